package server

import (
	"fmt"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/leaktest"
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
	// Two processors: one for the goroutine making the calls, one for
	// the sampler.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
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
	// A whole TLS record (a header and its one byte) stays queued: both
	// looks find what they wait for at once, every time.
	if _, err := c.Write([]byte{0x16, 3, 1, 0, 1, 1}); err != nil {
		t.Fatal(err)
	}
	rc, err := peer.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}

	var stop atomic.Bool
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			for !stop.Load() {
				var pk peeker
				if err := rc.Read(pk.peek); err != nil {
					return err
				}
				if pk.err != nil || pk.n != 1 || pk.b[0] != 0x16 {
					return fmt.Errorf("peek: %d bytes %x, %v; want the record's first byte", pk.n, pk.b[:pk.n], pk.err)
				}
				var w recordWaiter
				if err := rc.Read(w.ready); err != nil {
					return err
				}
				if w.err != nil {
					return fmt.Errorf("wait for the record: %w", w.err)
				}
				if err := dialer.SetBuffers(rc, 256<<10); err != nil {
					return err
				}
			}
			return nil
		}()
	}()

	calls := []string{"server.(*peeker).peek(", "server.(*recordWaiter).ready(", "dialer.SetBuffers("}
	states, samples := leaktest.CallStates(calls, 150, time.Now().Add(20*time.Second))
	stop.Store(true)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := leaktest.InSyscall(calls, states, samples, 30); err != nil {
		t.Fatal(err)
	}
	t.Logf("states sampled: %v", states)
}
