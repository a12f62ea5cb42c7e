package tunnel

import (
	"errors"
	"io"
	"net"
	"testing"
)

// TestAddCut checks that the cut function AddCut returns, and the Cut of
// the Handle AddOwned returns, end a relaying tunnel with ErrCut, leave
// other tunnels alone, and do nothing once the tunnel has ended.
func TestAddCut(t *testing.T) {
	Handle{}.Cut() // the zero Handle: nothing
	tests := []struct {
		name string
		add  func(e *Engine, client, upstream *net.TCPConn, done func(Result)) (cut func(), err error)
	}{
		{"AddCut", (*Engine).AddCut},
		{"AddOwned", func(e *Engine, client, upstream *net.TCPConn, done func(Result)) (func(), error) {
			h, err := e.AddOwned(client, upstream, nil, doneFunc(done))
			return h.Cut, err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			ln := newListener(t)
			other := newTunnel(t, e, ln)

			clientApp, clientProxy := tcpPair(t, ln)
			upstreamProxy, upstreamApp := tcpPair(t, ln)
			t.Cleanup(func() {
				clientApp.Close()
				upstreamApp.Close()
			})
			result := make(chan Result, 1)
			cut, err := tt.add(e, clientProxy, upstreamProxy, func(r Result) { result <- r })
			if err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			// Bytes flow until the cut.
			one := []byte{'x'}
			if _, err := clientApp.Write(one); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(upstreamApp, one); err != nil {
				t.Fatalf("relay before the cut: %v", err)
			}
			cut()
			cut() // a second call does nothing
			te := &tunnelEnds{result: result}
			r := te.wait(t)
			if !errors.Is(r.Err, ErrCut) || r.Up != 1 {
				t.Errorf("cut tunnel: %+v; want ErrCut after 1 byte up", r)
			}
			if _, err := clientApp.Read(one); err == nil {
				t.Error("client side still open after the cut")
			}
			cut() // after the end: nothing

			// The other tunnel still relays.
			if _, err := other.client.Write(one); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(other.upstream, one); err != nil {
				t.Fatalf("other tunnel after the cut: %v", err)
			}
			eventually(t, "one tunnel open", func() bool { return e.Len() == 1 })
		})
	}
}
