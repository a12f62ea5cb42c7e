// Package tunnel relays established TCP tunnels (CONNECT, SOCKS5 CONNECT,
// 101 Upgrade) between a client socket and an upstream socket. On Linux it
// does so without a goroutine, a buffer or a pipe per idle tunnel.
//
// # Platforms
//
// What the design below describes is Linux only: the epoll and splice
// [Engine], its TLS tunnels ([Engine.AddTLS]), the [RelayTLS] relay that
// parks TLS tunnels on socket readiness with no buffer on two goroutines
// instead, and the [RecordConn] wrapping that both need.
// [Relay], which copies both ways on two goroutines through user-space
// buffers and works on any pair of net.Conns, is portable. On other
// systems (macOS, Windows, the BSDs) [Engine] keeps its API but relays
// each tunnel with [Relay] on goroutines of its own; [RawTCP] reports
// false, so callers use their goroutine relays instead of [RelayTLS];
// [RecordConn] returns its connection unwrapped; and [Parker] waits on the
// platform's readiness (a peek on Unix, a zero-byte read on Windows).
//
// # Design
//
// On Linux an [Engine] owns one epoll instance and one goroutine.
// [Engine.Add] takes the two sockets out of Go's netpoller (it duplicates
// each descriptor and closes the *net.TCPConn) and hands them to the
// engine's goroutine, which registers each descriptor once,
// edge-triggered, for input, output and peer half-close. After that a
// tunnel is a small struct (128 bytes) and two file descriptors: an idle
// tunnel costs no goroutine stack, no user-space buffer and no pipe. A
// caller that keeps an object of its own per tunnel hands it to
// [Engine.AddOwned] as the tunnel's [Owner], and cuts the tunnel with the
// [Handle] it gets back: no callback or cut function is made per tunnel.
// With two goroutines and io.Copy per tunnel the same tunnel costs tens of
// kilobytes and six descriptors.
//
// Bytes move in one of two ways. A direction with nothing in flight whose
// destination is writable reads the source into the engine's one small
// buffer (16 KiB, shared by every tunnel, the loop being the only user)
// and writes what it read to the destination: two plain system calls per
// message, cheaper than two splices for the small messages of WebSocket,
// SSH or keep-alive traffic. What the destination does not take waits in
// a pipe. A read that fills the small buffer marks the direction bulk, and
// its bytes then move with splice(2): socket to pipe, pipe to socket, so
// the payload never enters user space; the direction goes back to the
// small buffer once a splice moves less than the buffer holds. A pipe is
// borrowed from the engine's pool only while bytes are in flight and goes
// back to the pool as soon as it is empty again, so pipes exist only for
// bytes in flight; a pool bounded by [Config.MaxIdlePipes] keeps the pipe2
// and fcntl calls off the common path. An idle tunnel holds neither the
// small buffer (it is empty between calls) nor a pipe. When no splice
// pipe is to be had ([Config.MaxPipes] reached, or pipe2 failing with
// EMFILE or ENFILE) a bulk direction copies through the small buffer too,
// reading only while its destination is writable: what the destination
// does not take (at most 16 KiB) waits in memory, the rest in the
// source's socket, and the tunnel goes on rather than being reset.
//
// The loop's reads, writes, splices and event polls, all non-blocking,
// are made with RawSyscall, which Go's scheduler does not see: an ordinary
// system call lets the runtime's monitor take the loop's processor away
// mid-call and hand it to another thread, which cost thread wake-ups on
// every message, and on most splices of a bulk transfer, when the process
// has one processor. Only the waits that block are ordinary system calls.
//
// When the engine has no event to handle it parks its goroutine in Go's
// netpoller, on the epoll descriptor itself (readable while it has
// events), instead of blocking a thread in epoll_wait. A busy loop looks
// for events once more before it parks; a quiet one, whose last look
// found none, parks at once, so that a message relayed from a parked
// loop costs two event polls of the engine's: the one that ends the park
// and the one that finds nothing before the next.
//
// Each edge-triggered event is drained until the kernel answers EAGAIN. The
// engine remembers per socket whether it is readable and writable, so it
// never makes a call it knows will fail. When a destination is not writable
// the engine stops reading the source once the pipe is full; the bytes wait
// in the pipe (and then in the source's receive buffer, which closes the TCP
// window) until EPOLLOUT on the destination resumes the flow. A tunnel that
// keeps moving bytes yields after a bounded amount of work so that one bulk
// transfer cannot starve the others.
//
// # Half-close and errors
//
// When one side sends FIN (a read or splice returns 0), the engine first
// delivers what is still in that direction's pipe, then shuts down the
// write half of the other socket, so the other side sees EOF exactly where
// the sender stopped; the opposite direction keeps flowing. A tunnel ends
// cleanly when both directions have ended this way. Any socket error (a reset, EPIPE) ends the
// tunnel at once: both sockets are closed with SO_LINGER 0, so the peer
// that is still there sees a reset rather than a clean end of a truncated
// stream. Tunnels with no bytes in either direction for [Config.IdleTimeout]
// are closed by a coarse periodic sweep; there are no per-tunnel timers.
//
// [Result] counts bytes delivered to the destination socket, not bytes read
// from the source, so bytes lost in a pipe (or read into the small buffer)
// when a tunnel fails are not counted.
//
// # TLS tunnels
//
// A tunnel whose client speaks TLS (CONNECT on the HTTPS port) cannot be
// spliced: [Engine.AddTLS] relays it on the same loop through user space.
// crypto/tls reads and writes the engine's descriptor through
// [RecordConn], which never waits in that mode: a read of an empty socket
// fails with a temporary error that crypto/tls passes up, and a write
// keeps what the socket does not take in a buffer borrowed until EPOLLOUT
// drains it, reading no more from upstream meanwhile. Plaintext moves
// through a pooled 16 KiB buffer borrowed only while it is in flight, so
// an idle TLS tunnel holds no goroutine and no buffer, only crypto/tls's
// state (about 6 KiB of heap after a handshake, measured by
// TestRelayTLSIdleMemory; crypto/tls keeps its input buffer grown to the
// client's largest record, 16 to 32 KiB more after uploads, which is why
// [RecordConn] hands it the ClientHello in small records).
package tunnel
