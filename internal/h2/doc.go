// Package h2 serves HTTP/2 (RFC 9113) to clients of rustle's TLS
// listeners that negotiate "h2" with ALPN: a forward proxy over HTTP/2.
//
// Each stream is one of:
//
//   - a request with :scheme http and an :authority, forwarded to an
//     HTTP/1.1 origin (or the route's http parent) through the exchange
//     every HTTP front-end shares (origin.Exchange: the upstream pool,
//     the retries, the parent's 407, pool or drop, the response head's
//     bounds), request and response bodies streamed both ways, chunked
//     when their length is unknown, trailers passed on;
//   - CONNECT (RFC 9113 §8.5): a TCP tunnel whose half-closes map to
//     END_STREAM and to shutting down the upstream's write half;
//   - extended CONNECT with :protocol websocket (RFC 8441), advertised with
//     SETTINGS_ENABLE_CONNECT_PROTOCOL: translated into an HTTP/1.1
//     Upgrade handshake with the origin through the same exchange, then
//     a tunnel;
//   - extended CONNECT with :protocol connect-udp (RFC 9298 §5) to a
//     path the UDP URI template matches: a UDP flow whose payloads travel
//     in DATAGRAM capsules (RFC 9297 §3.5) on the stream, relayed by
//     gate.Grant.RelayFlow (ACL protocol udp; the guard checks every
//     datagram's destination; the flow ends after UDPIdleTimeout without
//     a datagram, or with the stream);
//   - anything else (a request to the proxy itself, :scheme https) is
//     answered by rustle with a short error, once authorized like any
//     other request.
//
// Each stream's request is decided by the connection's gate.Session:
// the proxy-authorization field (or the session's client certificate
// identity), the user's limits and the access rules, in one
// Session.Authorize per stream. A refusal ends that stream only:
//
//   - no valid credentials: 407 with the policy's proxy-authenticate
//     challenge;
//   - a client address cooling down after too many failed
//     authentications: 429 with retry-after (whole seconds, rounded up),
//     and the connection is sent GOAWAY with ENHANCE_YOUR_CALM after that
//     answer: streams it opens later are refused (REFUSED_STREAM), the
//     streams in progress, tunnels included, run to their end, then the
//     connection closes;
//   - a user with too many connections: 429, and the connection goes on
//     (the first user of a connection is counted for the connection, any
//     other user on it for the life of its stream);
//   - a request an access rule denies: 403.
//
// What never becomes a stream's request is logged with
// gate.Session.Reject, reason protocol: a malformed request, its stream
// reset with PROTOCOL_ERROR (one record each, the first 16 of a
// connection), and a connection error, answered with GOAWAY (one record
// for the connection, whatever frames follow it).
//
// A granted stream dials, or takes a pooled upstream, through its
// gate.Grant, which also learns its status, first byte and payload bytes
// for the access log and the metrics. A paced user's bytes wait for the
// user's bucket (Grant.Pace) before they are written: response bodies
// and tunnel bytes before they are sent as DATA, request bodies and
// tunnel bytes before they are written upstream (a paced tunnel's client
// bytes always go through its pump goroutine, never straight from the
// reader). Flow-control credit is returned as bytes are written, so a
// paced stream slows its client down without buffering more.
//
// # Design
//
// The connection's frames are read with golang.org/x/net/http2's Framer
// and HPACK decoder and handled by rustle itself: flow control, stream
// states, SETTINGS, PING, GOAWAY. The reader never blocks on the client
// or an upstream. It runs on a worker goroutine, one at a time, which
// ends when the connection goes idle with tunnels open (and no other
// stream), or with no stream once the client is quiet: the wait for the client's next bytes is then made by
// ServeConn's goroutine, which does no other work, so that the stack
// parked for an idle tunnel's connection stays small, and the next bytes
// start a fresh worker. Frames to send are encoded into one output
// buffer in the order they must go out, and written by whichever
// goroutine finds the buffer unwritten (the reader starts a short-lived
// writer goroutine instead).
//
// A stream gets one worker goroutine while it is served; the worker of a
// forwarded request or of rustle's own answer then serves later such
// streams of any connection (workers.go), so that its grown stack is not
// grown again for each. For a tunnel
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
// A stream's bytes down are the relayed DATA payload written to the
// client: the output buffer notes each relayed DATA frame's stream and
// where the frame ends, the writer credits a stream as its frames are
// wholly written, and a stream is finished (logged and counted) once its
// last frame is written or the connection has failed.
//
// While idle, a connection's reader waits on socket readiness too (the
// TLS connection is made over tunnel.RecordConn, so crypto/tls holds no
// unread bytes), holding no read buffer, output buffer or frame buffer.
// On Linux an idle tunnel holds no goroutine either: once a connection
// serves only tunnels, or has no stream and its client has sent nothing
// for quietWait (100 ms: a client sending its requests one after
// another, or one every 64 ms, keeps its worker), its reader registers the wait for the client with
// tunnel.Parker's Notify, whose one epoll loop serves every such wait of
// the process (with the idle timeout as its deadline when no stream is
// open), and its goroutine ends; a fresh one resumes when the
// client sends, a stream ends or the server shuts down (then the reader
// waits on a goroutine: a connection shutting down may be closed under
// it, which a Notice would see only up to a second later). A tunnel waits for its upstream the same way, resumed by its
// bytes, its idle deadline or its reset. ServeConnThen, which
// internal/server uses, returns at once, so that no goroutine of the
// caller waits for the connection either. With the connection's TLS and
// HPACK state and two sockets that is, measured (TestIdleTunnelMemory,
// Go heap and stacks of the proxy), about 13 KiB per idle tunnel (it was
// 22 with the two goroutines parked, 6.3 KiB of stacks), against about
// 90 KiB with x/net/http2's Server and a CONNECT handler relaying with
// goroutines. Elsewhere the waits are goroutines: ServeConn's parked with
// few frames (4 KiB), and the tunnel's, which hands the tunnel to a fresh
// goroutine after it has sent bytes, before it waits again (2 KiB; a
// goroutine parked with more than about 1.2 KiB of frames keeps an 8 KiB
// stack once it has grown to it, and one with more than about 250 bytes
// a 4 KiB stack).
//
// # Cost of a wake-up
//
// A client sending one request every 64 ms (bench/campaign's rate-h2-1k
// at 1,000 a second over 64 connections) had its connection parked and
// woken for each request while quietWait was 50 ms; the HTTP/1.1
// connections of rate-https-1k keep their goroutine and are never
// parked. With quietWait at 100 ms, and the quiet wait's deadline moved
// on once it would come more than quietWait/2 early (so that it does not
// bring the worker back between two requests to find the client not
// quiet long enough), such a connection keeps its worker: its system
// calls per request are the HTTPS row's (10.2 against 10.0 to 10.1, no
// epoll_ctl), and its CPU per request 0.96 to 1.25× HTTPS's where it was
// 1.2 to 1.6× (TestSteadyClientKeepsItsWorker; bench/README.md, "The
// cost of an HTTP/2 wake-up"). A client quiet for longer than that is
// parked and woken as follows. Per wake-up
// (issue 32, measured 2026-12-07 with perf on bench/load h2 -rate 1000
// against rustle on one core, load average 2 to 7): the worker's
// quietWait deadline firing and its goroutine ending; notify (the read
// deadline cleared, the socket registered, a timer for the idle
// timeout); the epoll loop woken (the poller's epoll_pwait and one of
// its own); then the look (a read of the record) and resume. Before
// 2a9f880 the look and resume ran on a fresh goroutine whose stack grew
// two or three times (runtime.newstack 5.0 % of rustle's CPU, goroutine
// exits 8 %), and the socket was added to the epoll set and deleted
// again each time (two epoll_ctl); now a reused worker runs them
// (tunnel.Wait.ReuseWorker: newstack 0.5 %, no goroutine started,
// TestWakeReusesWorkers), and the socket stays in the set, disabled, and
// is enabled again (one epoll_ctl, tunnel's TestNotifyEpollCalls). The
// epoll loop still looks at its set before each wait in the poller:
// RawConn.Read forgets a readiness reported between the last look and
// the wait, so skipping that look could leave an event for the next
// sweep, up to a second (the figures below were taken with the look
// skipped, one epoll_pwait fewer per wake-up). What is left of a
// wake-up is about a tenth of rustle's CPU in the profile (the loop
// 3.7 %, notify 3.1 %, the quietWait wait's timers 3.4 %), the look's read
// and record being work an unparked connection does too. With the
// machine quiet, rustle's CPU per request fell 10 % (perf stat
// task-clock 0.125 to 0.112 ms, HTTPS 0.073: 1.73× to 1.53×); under
// other load it moved more between runs of one build (±30 %) than
// between builds. See bench/README.md ("The cost of an HTTP/2
// wake-up") for the figures.
//
// Shutdown (the session's context) sends GOAWAY; streams in progress,
// tunnels included, run on until they end or the server closes the
// connection.
//
// # Bounds on what a client may make rustle wait for or do
//
// A frame the client has begun must go on arriving: each read within it
// waits at most WriteTimeout (the deadline is re-armed only when it would
// fall more than http1.DeadlineSlack early, as the HTTP/1.1 proxy's are),
// and a header block must end within
// HandshakeTimeout (timeouts.read_header) of its HEADERS frame and in
// at most max(16, MaxHeaderListSize/1024) CONTINUATION frames (the
// reader follows frame boundaries in the bytes it hands out; the header
// list's bound, as x/net/http2's Framer has it, counts bytes only, not
// empty frames). Header blocks are decoded by rustle (blockDecoder) with
// the checks of x/net's Framer, straight out of the read buffer, into
// field buffers that the streams take and give back: a header block
// costs no allocation beyond the strings HPACK decodes (none for fields
// the dynamic table holds). Streams the client resets before rustle
// has answered them spend a budget (resetBudget) whose end is GOAWAY
// with ENHANCE_YOUR_CALM. A response waits at most WriteTimeout for
// flow-control window, a tunnel as long as it is not idle for
// TunnelIdleTimeout; then the stream is reset and its upstream closed.
package h2
