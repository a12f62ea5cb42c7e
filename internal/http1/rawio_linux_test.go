package http1

import (
	"bytes"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/leaktest"
)

// TestReadsAndWritesKeepTheProcessor checks that a Conn's reads (Fill)
// and writes (Write, Vec.WriteConn) on a TCP connection are system calls
// the Go scheduler does not see: sampled while it makes them, the
// goroutine is never in the "syscall" state. Through net.Conn it is,
// for the whole call: the runtime's monitor is woken by the first such
// call after the process idled, polls every 20 µs while it lasts, and
// hands the processor of any call that spans its tick to another thread
// (futex wake-ups, context switches): that, on every request of the
// proxy's plain and HTTPS ports, is what raw calls take away (package
// rawio).
func TestReadsAndWritesKeepTheProcessor(t *testing.T) {
	// Two processors: one for the goroutine making the calls, one for
	// the sampler.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	peer, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	// Calls long enough (a copy of 128 KiB) to be caught in the act.
	const size = 128 << 10
	var b Conn
	b.Attach(c, &UpstreamBufs)
	defer b.Release()
	b.Buf = make([]byte, size)
	msg := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	var v Vec

	var stop atomic.Bool
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			got := make([]byte, size)
			for !stop.Load() {
				if _, err := peer.Write(msg); err != nil {
					return err
				}
				for b.R, b.W = 0, 0; b.W < size; {
					if err := b.Fill(size); err != nil {
						return err
					}
				}
				if _, err := b.Write(msg); err != nil {
					return err
				}
				if _, err := io.ReadFull(peer, got); err != nil {
					return err
				}
				if _, err := v.WriteConn(&b, msg[:size/2], msg[size/2:]); err != nil {
					return err
				}
				if _, err := io.ReadFull(peer, got); err != nil {
					return err
				}
			}
			return nil
		}()
	}()

	// The calls and what the goroutine was doing in each sample taken
	// while it was in one of them.
	calls := []string{"http1.(*Conn).Fill(", "http1.(*Conn).Write(", "http1.(*Vec).WriteConn("}
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
