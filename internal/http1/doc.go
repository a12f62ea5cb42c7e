// Package http1 is rustle's HTTP/1.1 message layer, shared by every
// front-end that talks HTTP/1.1 to a peer: the plain and TLS ports
// (internal/httpproxy) for client requests and origin responses, and the
// HTTP/2 port (internal/h2) for the origin responses of its streams.
//
// It is written for the per-request hot path: Head parses a request or
// response head in place, keeping spans of the buffer instead of strings
// and allocating nothing once its field slice has grown; ChunkedScanner
// follows a chunked body's framing as its bytes pass, so that a body is
// forwarded verbatim or decoded without a copy; Conn is a connection with
// a pooled read buffer, ReadHead to find the next head in it, and read
// and write deadlines armed from a monotonic clock and re-armed only when
// they have drifted.
//
// The parsers refuse what would let two implementations read a message
// differently (RFC 9112 §6, §7.1; request smuggling): bare CR or LF,
// obsolete line folding, whitespace before a colon, conflicting
// Content-Length values, Content-Length with Transfer-Encoding in a
// request, malformed chunk sizes and trailers. Every bound a peer
// controls is enforced: head size, header count, Connection options,
// chunk line length and trailer size.
package http1
