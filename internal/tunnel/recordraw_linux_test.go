package tunnel

import (
	"bytes"
	"io"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/leaktest"
)

// TestRecordConnKeepsTheProcessor checks that the system calls of a TLS
// connection made over RecordConn, its reads of the socket (fill) and
// the records crypto/tls writes (Write), are ones the Go scheduler does
// not see: sampled while it makes them, the goroutine is never in the
// "syscall" state. As ordinary system calls they woke the runtime's
// monitor and had the processor handed to another thread on every
// request of the https port (futex wake-ups, nanosleeps, context
// switches; see package rawio).
func TestRecordConnKeepsTheProcessor(t *testing.T) {
	// Processors for the server's goroutine, the client's and the
	// sampler.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(3))
	serverConf, clientConf := tlsConfs(t, 0)
	client, server, _ := tlsHandshake(t, newListener(t), serverConf, clientConf, false)
	t.Cleanup(func() { client.Close(); server.Close() })
	deadline := time.Now().Add(20 * time.Second)
	client.SetDeadline(deadline.Add(10 * time.Second))
	server.SetDeadline(deadline.Add(10 * time.Second))
	// Records of 16 KiB, 8 to a message: calls long enough to be caught.
	const size = 128 << 10
	msg := bytes.Repeat([]byte("0123456789abcdef"), size/16)

	var stop atomic.Bool
	errc := make(chan error, 2)
	// The client echoes; the server writes a message and reads it back.
	go func() {
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(client, buf); err != nil {
				if stop.Load() {
					err = nil
				}
				errc <- err
				return
			}
			if _, err := client.Write(buf); err != nil {
				errc <- err
				return
			}
		}
	}()
	go func() {
		errc <- func() error {
			buf := make([]byte, size)
			for !stop.Load() {
				if _, err := server.Write(msg); err != nil {
					return err
				}
				if _, err := io.ReadFull(server, buf); err != nil {
					return err
				}
			}
			return nil
		}()
	}()

	calls := []string{"tunnel.(*recordConn).Write(", "tunnel.(*recordConn).fill("}
	states, samples := leaktest.CallStates(calls, 150, deadline)
	stop.Store(true)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	client.Close()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := leaktest.InSyscall(calls, states, samples, 30); err != nil {
		t.Fatal(err)
	}
	t.Logf("states sampled: %v", states)
}
