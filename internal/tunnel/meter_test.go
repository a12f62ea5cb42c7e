package tunnel

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
)

// limitMeter stops a tunnel once limit bytes have moved either way.
type limitMeter struct {
	limit int64
	moved atomic.Int64
}

func (m *limitMeter) Moved(d int, n int64) bool { return m.moved.Add(n) < m.limit }

// TestMetered checks that a meter is told of the bytes the engine and the
// portable relay deliver, and that its false stops the tunnel with
// ErrStopped within one delivery of the limit.
func TestMetered(t *testing.T) {
	// slack is the most one delivery moves: a pipe on Linux, a buffer elsewhere.
	const limit, sent, slack = 256 << 10, 64 << 20, 1 << 20
	for _, tt := range []struct {
		name  string
		start func(t *testing.T, client, upstream *net.TCPConn, m Meter) chan Result
	}{
		{"engine", func(t *testing.T, client, upstream *net.TCPConn, m Meter) chan Result {
			e := newEngine(t, Config{})
			ch := make(chan Result, 1)
			if _, err := e.AddMetered(client, upstream, m, func(r Result) { ch <- r }); err != nil {
				t.Fatal(err)
			}
			return ch
		}},
		{"relay", func(t *testing.T, client, upstream *net.TCPConn, m Meter) chan Result {
			ch := make(chan Result, 1)
			go func() { ch <- RelayMetered(context.Background(), client, upstream, 0, m) }()
			return ch
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln := newListener(t)
			clientApp, clientProxy := tcpPair(t, ln)
			upstreamProxy, upstreamApp := tcpPair(t, ln)
			t.Cleanup(func() {
				clientApp.Close()
				upstreamApp.Close()
			})
			m := &limitMeter{limit: limit}
			result := tt.start(t, clientProxy, upstreamProxy, m)
			go sendRandom(clientApp, 1, sent)
			got, _ := io.Copy(io.Discard, upstreamApp)
			r := (&tunnelEnds{result: result}).wait(t)
			if !errors.Is(r.Err, ErrStopped) {
				t.Errorf("Err = %v, want ErrStopped", r.Err)
			}
			if r.Up != m.moved.Load() || r.Up < limit || r.Up > limit+slack {
				t.Errorf("Up = %d, metered %d; want within a pipe (%d) past %d", r.Up, m.moved.Load(), slack, limit)
			}
			if got >= sent {
				t.Errorf("upstream got all %d bytes", got)
			}
		})
	}
}
