package server

import (
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/leaktest"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// TestNewConnectionCallsKeepTheProcessor checks that the system calls a
// new client connection's goroutine makes before its TLS handshake
// (peekByte's and waitRecord's looks at the first bytes) and when
// httpproxy sets its socket buffers (dialer.SetBuffers) are calls the Go
// scheduler does not see: sampled while it makes them, the goroutine is
// never in the "syscall" state. As ordinary calls, the first of them
// after the process had idled woke the runtime's monitor (a futex
// wake-up), which then polled every 20 µs (nanosleep, a thread switch
// on the proxy's core each time) until the processor idled again: at
// 200 new TLS connections a second on one core, 1.0 of the 5.0 futex
// and 1.5 of the 7.3 nanosleep calls per connection (the rest are the
// monitor's wake-ups by net's accept4 and close, which have no raw
// form).
func TestNewConnectionCallsKeepTheProcessor(t *testing.T) {
	_, rc := queuedRecord(t)
	var pk peeker
	var w recordWaiter
	keepsProcessor(t, 150, []string{"server.(*peeker).peek(", "server.(*recordWaiter).ready(", "dialer.SetBuffers("}, func() error {
		pk = peeker{}
		if err := rc.Read(pk.peek); err != nil {
			return err
		}
		if pk.err != nil || pk.n != 1 || pk.b[0] != 0x16 {
			return fmt.Errorf("peek: %d bytes %x, %v; want the record's first byte", pk.n, pk.b[:pk.n], pk.err)
		}
		w = recordWaiter{}
		if err := rc.Read(w.ready); err != nil {
			return err
		}
		if w.err != nil {
			return fmt.Errorf("wait for the record: %w", w.err)
		}
		return dialer.SetBuffers(rc, 256<<10)
	})
}

// TestRequestCallsKeepTheProcessor is TestNewConnectionCallsKeepTheProcessor
// for the calls made on each request of a kept-alive connection: the
// parked connection's readiness peek when the poller wakes it
// (tunnel.Parker), the check of a pooled upstream connection before its
// reuse (dialer.Alive), and the look at what a spliced body's source
// holds and the send-queue bound of a large body (http1.Readable,
// http1.SetNotSentLowat). Made ordinary, each was the first system call
// of a woken goroutine, the one that wakes the runtime's monitor.
func TestRequestCallsKeepTheProcessor(t *testing.T) {
	tc, rc := queuedRecord(t)
	p := tunnel.NewParker(rc)
	// The raw calls are short: a sample finds the goroutine inside one
	// of them seldom, so fewer are asked for.
	keepsProcessor(t, 60, []string{"tunnel.(*Parker).ready(", "dialer.(*aliveCheck).peek(", "http1.Readable.func1(", "http1.SetNotSentLowat.func1("}, func() error {
		if err := p.Wait(); err != nil {
			return fmt.Errorf("park: %w", err)
		}
		if dialer.Alive(tc) {
			return fmt.Errorf("Alive on a connection with bytes unread = true; want false")
		}
		if n, err := http1.Readable(tc); err != nil || n != 6 {
			return fmt.Errorf("Readable = %d, %v; want the 6 bytes queued", n, err)
		}
		http1.SetNotSentLowat(tc, 16<<10)
		return nil
	})
}

// queuedRecord returns the accepted end, and its RawConn, of a loopback TCP
// connection whose peer has sent a whole TLS record (a header and its
// one byte), which stays queued: every look finds what it waits for at
// once, every time.
func queuedRecord(t *testing.T) (*net.TCPConn, syscall.RawConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	if _, err := c.Write([]byte{0x16, 3, 1, 0, 1, 1}); err != nil {
		t.Fatal(err)
	}
	rc, err := peer.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return peer.(*net.TCPConn), rc
}

// keepsProcessor runs round in a loop on a goroutine of its own while it
// takes n samples (or as many as 20 seconds give) of that goroutine's
// state inside calls, and fails t when any sample saw it in a system
// call the scheduler sees, or when fewer than 30 saw it there at all.
func keepsProcessor(t *testing.T, n int, calls []string, round func() error) {
	t.Helper()
	// Two processors: one for the goroutine making the calls, one for
	// the sampler.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	var stop atomic.Bool
	errc := make(chan error, 1)
	go func() {
		for !stop.Load() {
			if err := round(); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	states, samples := leaktest.CallStates(calls, n, time.Now().Add(20*time.Second))
	stop.Store(true)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := leaktest.InSyscall(calls, states, samples, 30); err != nil {
		t.Fatal(err)
	}
	t.Logf("states sampled: %v", states)
}
