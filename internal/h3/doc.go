// Package h3 serves HTTP/3 (RFC 9114) to clients of rustle's https
// listeners that have http3 on: a forward proxy over QUIC, on the
// listener's port number over UDP, with its certificate and users.
// quic-go is the QUIC stack; the HTTP/3 layer is this package's own
// (conn.go: the control streams, SETTINGS, GOAWAY and the HTTP
// Datagrams; stream.go and frame.go: request streams, frame by frame;
// qpack.go: field sections, decoded with quic-go's QPACK decoder and
// encoded without allocating), so that a request costs no net/http
// request, header map or response writer, runs on a reused worker
// (package workpool) and answers in one stream write. Request heads are
// checked as HTTP/2's are (package fieldreq: RFC 9114 §4.2-4.3 repeat
// RFC 9113's rules); a malformed one is reset with H3_MESSAGE_ERROR and
// logged. This package calls internal/gate for everything the other
// front-ends share.
//
// Each request stream is one of:
//
//   - a request with :scheme http and an :authority, forwarded to an
//     HTTP/1.1 origin, or to the route's http parent, through the
//     exchange every HTTP front-end shares (origin.Exchange: the pool,
//     the retries, the parent's 407, pool or drop, the response head's
//     bounds, and failures answered as origin.Failure says); this package
//     turns the request's fields into the head (origin.AppendFieldHead)
//     and relays the response's content and trailers;
//   - CONNECT (RFC 9114 §4.4): a TCP tunnel relayed by gate.Grant.Tunnel,
//     the stream's FIN passed on as a half-close;
//   - extended CONNECT with :protocol connect-udp (RFC 9298) to a path
//     the configured URI template matches: a UDP flow whose payloads
//     travel in HTTP Datagrams (RFC 9297) in QUIC DATAGRAM frames,
//     relayed by gate.Grant.StartFlow (the guard checks every datagram's
//     destination; the flow idles out after UDPIdleTimeout, by the one
//     timer of the connection's gate.FlowGroup): the target's
//     datagrams read by the connection's one gate.FlowPoller
//     (Linux, unpaced users; otherwise the relay's goroutine), the
//     client's handed over by the connection's one datagram receiver;
//     capsules the
//     client sends on the stream are read and skipped;
//   - anything else is answered by rustle with a short error, once
//     authorized like any other request.
//
// Each QUIC connection is one gate.Session; every request stream is
// decided by it with Session.Authorize (Proxy-Authorization on every
// request, 407 per request; 429 for a client cooling down, after which
// the connection closes once its requests in progress have ended, or for
// a user over its limit; 403 for a rule's denial), with the ACL protocol
// "http", "connect" or "udp", and logged with protocol "h3". A stream
// holding an upstream counts as a connection past the first (Grant.Hold).
//
// Bounds: MaxStreams concurrent request streams per connection (QUIC
// stream credit), MaxFlows CONNECT-UDP flows per connection and
// MaxListenerFlows per listener (503 past either), MaxConns QUIC
// connections per listener (closed with H3_EXCESSIVE_LOAD past it). QUIC
// itself bounds what rustle sends towards an address it has not
// validated to three times what it received (RFC 9000 §8.1).
//
// Measured (TestIdleMemory, the proxy's Go heap and stacks, clients in
// another process): about 60 KiB per idle HTTP/3 connection, most of it
// quic-go's connection state (its TLS and QUIC state, about 35 KiB of
// heap, and two goroutines) beside this package's one goroutine (two
// until the client has opened its three critical unidirectional
// streams), and
// about 7.1 KiB per idle CONNECT-UDP flow (its QUIC stream's state in
// quic-go, with the context and hook that end the flow on the client's
// STOP_SENDING, its reqStream with the grant, the relay, its UDP
// socket's descriptor that the connection's gate.FlowPoller waits on,
// and one goroutine parked in quic-go's Peek on a 2 KiB stack; the
// connection's gate.FlowGroup has the one idle timer and revocation hook
// of all its flows).
//
// Shutdown (the session's context done) sends GOAWAY: requests in
// progress, tunnels and flows included, run on, and the connection
// closes once none is left or the drain is cut; a revoked user's
// connection is closed at once.
package h3
