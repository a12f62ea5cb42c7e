package tunnel

// System calls that the engine's loop makes without telling Go's
// scheduler.
//
// A system call made through syscall.Syscall marks the goroutine's P as
// in a system call; the runtime's monitor (sysmon), which looks every
// 20 µs while a P is busy, takes the P away from any call that spans one
// of its looks and hands it to another thread. With one P (the engine's
// usual setting: one core per worker) every such hand-off wakes a thread,
// and every hand-off keeps the monitor at its 20 µs pace, so the relay
// of small messages paid for thread wake-ups and monitor rounds on top of
// its reads and writes (perf, WebSocket 64 B: sysmon and
// handoffp about 12% of the engine's CPU, with 0.2 nanosleep and 0.07
// futex calls per message). The calls below cannot block: every
// descriptor of the engine is non-blocking, and each call moves at most
// the engine's small buffer (smallSize), a TLS out buffer (tlsOutSize,
// 20 KiB) or a pipe's bytes, so they are made with RawSyscall, which the
// monitor does not see. Splices included: a splice moves page references,
// not bytes, and takes tens of microseconds, long enough for the monitor
// to take the processor away from most of them, which bulk tunnels paid
// for in thread hand-offs (CONNECT bulk, 8 tunnels: per GB relayed, 4,000
// context switches, 800 futex and 900 nanosleep calls as ordinary system
// calls; 400 to 850, 5 and 30 with RawSyscall, and 14% less CPU per byte
// on the load side too). Only the waits that block stay ordinary system
// calls.
//
// The price is paid when the engine's core is shared: the scheduler sees
// one thread doing a worker's relaying, and gives it one thread's share
// of a contended core, where a relay whose calls are ordinary ones spreads
// over the threads the monitor hands the processor to, and gets more.
// Measured on 2026-12-07 (WebSocket over TLS, 64 connections, 5,000
// messages a second, other work loading both cores of the benchmark VM to
// a load average of 5.0 to 9.9, bench/README.md, "Latency tails at a
// fixed rate"): p99 12 ms to 6.9 s with RawSyscall, 6 ms to 1.8 s with
// ordinary calls, in alternating runs (in 10 pairs, one the other way),
// the ordinary calls costing 104 against 62 µs per message where both
// kept up; on a core of its own the engine's tail was ahead of gost's and
// Squid's. The campaign's proxy_wait_ms says how long the proxy waited
// for a CPU in a run. With the core to itself (2026-12-07, 12:50, the
// campaign's rate-ws-64 and rate-wss-64 in quick mode, builds alternated
// A B B A) the ordinary calls cost 1.3 to 1.45 times the CPU per message
// (WebSocket at 5,000 msg/s: 99.5 and 112.8 µs against 72.0 and 77.6;
// over TLS: 106.5 and 130.7 against 81.8 and 88.8), made the proxy wait
// 0.6 to 1.3 s a run for its own core (its threads' hand-offs; 7 to 37
// ms with RawSyscall), and gave no better p99 (1.14 to 1.59 ms against
// 0.91 to 2.06): so the engine keeps RawSyscall.

import (
	"unsafe"

	"github.com/rustle-proxy/rustle/internal/rawio"
	"golang.org/x/sys/unix"
)

// readFD reads fd once, retrying on EINTR; n is 0 on error. fd must be
// non-blocking. It is rawio.Read, with the error as an error.
func readFD(fd int, p []byte) (int, error) {
	n, e := rawio.Read(uintptr(fd), p)
	if e != 0 {
		return 0, e
	}
	return n, nil
}

// writeFD is readFD for write(2): rawio.Write.
func writeFD(fd int, p []byte) (int, error) {
	n, e := rawio.Write(uintptr(fd), p)
	if e != 0 {
		return 0, e
	}
	return n, nil
}

// spliceFD splices up to n bytes from in to out once (one of them a
// pipe), without waiting, retrying on EINTR; n is 0 on error.
func spliceFD(in, out, n int) (int64, error) {
	for {
		r, _, e := unix.RawSyscall6(unix.SYS_SPLICE, uintptr(in), 0, uintptr(out), 0, uintptr(n), spliceFlags)
		switch e {
		case 0:
			return int64(r), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}

// pollEvents returns the events ready on epfd without waiting
// (epoll_pwait with a zero timeout), retrying on EINTR.
func pollEvents(epfd int, events []unix.EpollEvent) (int, error) {
	for {
		n, _, e := unix.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(unsafe.SliceData(events))), uintptr(len(events)), 0, 0, 0)
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		}
		return 0, e
	}
}
