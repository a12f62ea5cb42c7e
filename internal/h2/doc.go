// Package h2 serves HTTP/2 (RFC 9113) to clients of rustle's TLS
// listeners that negotiate "h2" with ALPN: a forward proxy over HTTP/2.
//
// Each stream is one of:
//
//   - a request with :scheme http and an :authority, forwarded to an
//     HTTP/1.1 origin over the upstream keep-alive pool that the HTTP/1.1
//     proxy shares (request and response bodies streamed both ways,
//     chunked when their length is unknown, trailers passed on);
//   - CONNECT (RFC 9113 §8.5): a TCP tunnel whose half-closes map to
//     END_STREAM and to shutting down the upstream's write half;
//   - extended CONNECT with :protocol websocket (RFC 8441), advertised with
//     SETTINGS_ENABLE_CONNECT_PROTOCOL: translated into an HTTP/1.1
//     Upgrade handshake with the origin, then a tunnel;
//   - anything else (a request to the proxy itself, :scheme https) is
//     answered by rustle with a short error.
//
// Proxy-Authorization is checked per stream: a 407 ends that stream only.
//
// # Limits
//
// With a Config.Limiter, as in the HTTP/1.1 proxy:
//
//   - Wrong credentials (a proxy-authorization field that does not check;
//     a missing one is just answered 407) are reported to AuthFailed.
//     While the client's address is cooling down, the stream is answered
//     429 with Retry-After (whole seconds, rounded up), and the connection
//     is sent GOAWAY with ENHANCE_YOUR_CALM after that answer: streams it
//     opens later are refused (REFUSED_STREAM), the streams in progress,
//     tunnels included, run to their end, then the connection closes.
//   - The first user admitted on a connection (by credentials or a
//     verified client certificate) is counted with UserConn for the life
//     of the connection, and UserDone is called when it ends. A stream of
//     another user on the same connection is counted for the life of that
//     stream rather than refused, so that per-user limits hold however
//     clients share connections. When UserConn refuses, that stream is
//     answered 429 and the connection goes on.
//   - A paced user's bytes (Throttle) wait for the user's bucket before
//     they are written: response bodies and tunnel bytes before they are
//     sent as DATA, request bodies and tunnel bytes before they are
//     written upstream (a paced tunnel's client bytes always go through
//     its pump goroutine, never straight from the reader). Flow-control
//     credit is returned as bytes are written, so a paced stream slows its
//     client down without buffering more.
//
// # Design
//
// The connection is served by one goroutine that reads frames with
// golang.org/x/net/http2's Framer and HPACK decoder and handles them
// itself: flow control, stream states, SETTINGS, PING, GOAWAY. It never
// blocks on the client or an upstream. Frames to send are encoded into
// one output buffer in the order they must go out, and written by
// whichever goroutine finds the buffer unwritten (the reader starts a
// short-lived writer goroutine instead).
//
// A stream gets one worker goroutine while it is served. For a tunnel
// that worker then relays the upstream-to-client direction: it waits for
// the client's flow-control window, then for the upstream socket's
// readiness (without a buffer), and reads no more than the window allows.
// Client-to-upstream bytes are written by the reader straight to the
// upstream socket when it takes them without waiting; what it does not
// take is queued (at most a stream window, in pooled chunks) and written
// by a pump goroutine that exists only while bytes are queued. Stream
// window credit is returned as bytes reach the upstream, so a slow
// upstream slows only its own stream; connection credit is returned as
// bytes are queued, until a connection window's worth is queued in all.
//
// While idle, a connection's reader waits on socket readiness too (the
// TLS connection is made over tunnel.RecordConn, so crypto/tls holds no
// unread bytes), holding no read buffer, output buffer or frame buffer.
// An idle tunnel is then two goroutines parked with few frames (the
// garbage collector shrinks their stacks to 4 KiB), the connection's TLS
// and HPACK state and two sockets: measured (TestIdleTunnelMemory, Go
// heap and stacks of the proxy) about 20 KiB per idle tunnel, 8 KiB of
// it crypto/tls's, against about 90 KiB with x/net/http2's Server and a
// CONNECT handler relaying with goroutines.
//
// Shutdown (ServeConn's context) sends GOAWAY; streams in progress,
// tunnels included, run on until they end or the server closes the
// connection.
package h2
