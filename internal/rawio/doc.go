// Package rawio makes a TCP socket's reads and writes raw, non-blocking
// system calls on Linux, waiting through Go's poller only when the socket
// has nothing to read or no room to write.
//
// A read or write made through net.Conn is an ordinary system call: the
// goroutine's processor is marked as in a system call for its length.
// The first such call after the process was idle wakes the runtime's
// monitor (sysmon, a futex wake-up), which then polls every 20 µs
// (nanosleep) until the processors look idle again; and a loopback
// write, which delivers the segment to the peer in the caller's own
// softirq, often lasts longer than that tick, so the monitor takes the
// processor away and hands it to another thread (futex wake-ups and
// context switches). A raw system call is not seen by the monitor: a
// call that cannot block (the socket is non-blocking) needs nothing
// else. The engine of rustle's tunnels makes its calls the same way
// (internal/tunnel/rawsys_linux.go).
//
// Measured with one worker at 1,000 1 KB GETs a second, per request on
// the plain and the https port alike: 2.3 to 3 futex and 1.7 nanosleep
// calls, 0.2 to 0.5 sched_yield and 5.4 to 6.5 context switches through
// net.Conn; none, none, none and 1.6 to 2 with raw calls, and a third
// less CPU on the plain port, 15 to 35 % less on the https port. The
// benchmark tools' connections ([Wrap]) saved 10 % of the load tool's
// CPU in the 64-byte WebSocket row, where the load core limited the
// proxy's rate.
//
// A descriptor's number is used only inside the RawConn callback, while
// the poller holds the descriptor open: a closed socket's number, soon
// another socket's, is never written to.
//
// [FD] is the per-connection state (embedded in a connection struct, so
// that a read or write allocates nothing), [Writer] its writing half for
// a connection that reads its own way; [Read] and [Write] are the single
// calls for a struct that already keeps a syscall.RawConn and its
// callbacks. [Peek], [Queued] and [SetsockoptInt] are the raw forms of
// the looks and settings made on a socket between reads: every peek of
// rustle's (a new connection's first bytes, a parked connection woken,
// a pooled upstream connection checked before reuse) is Peek. Elsewhere
// than on Linux FD makes the connection's ordinary calls, and Peek is
// an ordinary call on other Unix systems.
package rawio
