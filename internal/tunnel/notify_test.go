package tunnel

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/leaktest"
)

// TestNotify checks each way a Notice's wait ends, that its function is
// called once, and that the socket can be waited on again after it.
func TestNotify(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no Notify on " + runtime.GOOS)
	}
	cases := []struct {
		name     string
		deadline time.Duration                 // 0: none
		act      func(*Notice, io.WriteCloser) // what ends the wait
		want     error
	}{
		{"bytes", 0, func(_ *Notice, peer io.WriteCloser) { peer.Write([]byte("a")) }, nil},
		{"end of stream", 0, func(_ *Notice, peer io.WriteCloser) { peer.Close() }, nil},
		{"woken", 0, func(n *Notice, _ io.WriteCloser) { n.Wake(); n.Wake() }, ErrWoken},
		{"deadline", 30 * time.Millisecond, func(*Notice, io.WriteCloser) {}, os.ErrDeadlineExceeded},
		{"bytes before the deadline", time.Minute, func(_ *Notice, peer io.WriteCloser) { peer.Write([]byte("a")) }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, c, peer := newParked(t)
			rounds := 2 // the second: the socket waited on again
			if tc.name == "end of stream" {
				rounds = 1 // it stays readable
			}
			for round := range rounds {
				got := make(chan error, 2)
				var dl time.Time
				if tc.deadline > 0 {
					dl = time.Now().Add(tc.deadline)
				}
				n, ok := p.Notify(dl, func(err error) { got <- err })
				if !ok {
					t.Fatal("Notify reported no wait on Linux")
				}
				select {
				case err := <-got:
					t.Fatalf("round %d: called with %v before anything happened", round, err)
				case <-time.After(10 * time.Millisecond):
				}
				tc.act(n, peer)
				var err error
				select {
				case err = <-got:
				case <-time.After(10 * time.Second):
					t.Fatalf("round %d: not called", round)
				}
				if !errors.Is(err, tc.want) && err != tc.want {
					t.Fatalf("round %d: called with %v, want %v", round, err, tc.want)
				}
				n.Wake() // after the call: nothing more
				select {
				case err := <-got:
					t.Fatalf("round %d: called again, with %v", round, err)
				case <-time.After(20 * time.Millisecond):
				}
				if tc.want == nil && tc.name != "end of stream" {
					var b [1]byte
					if _, err := io.ReadFull(c, b[:]); err != nil {
						t.Fatal(err)
					}
				}
			}
		})
	}
	// No wait is left: the loop's goroutine has ended.
	if err := leaktest.Check(5*time.Second, "tunnel.(*notifier)"); err != nil {
		t.Error(err)
	}
}

// TestNotifyClosedSocket checks that a wait on a closed socket is
// called with the error that kept it from being registered.
func TestNotifyClosedSocket(t *testing.T) {
	p, c, _ := newParked(t)
	c.Close()
	got := make(chan error, 1)
	n, ok := p.Notify(time.Time{}, func(err error) { got <- err })
	if !ok {
		t.Skip("no Notify on " + runtime.GOOS)
	}
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("called with nil for a closed socket, want its error")
		}
	case <-time.After(10 * time.Second):
		n.Wake()
		t.Fatal("not called for a closed socket")
	}
}

// TestParkerReady checks Ready's answer on an empty socket, one with
// bytes, one at its end and one reset by its peer.
func TestParkerReady(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Ready reports false off Linux")
	}
	cases := []struct {
		name    string
		act     func(t *testing.T, peer *net.TCPConn)
		ready   bool
		wantErr bool
	}{
		{"empty", func(*testing.T, *net.TCPConn) {}, false, false},
		{"bytes", func(_ *testing.T, peer *net.TCPConn) { peer.Write([]byte("a")) }, true, false},
		{"end of stream", func(_ *testing.T, peer *net.TCPConn) { peer.Close() }, true, false},
		{"reset", func(_ *testing.T, peer *net.TCPConn) { peer.SetLinger(0); peer.Close() }, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _, peer := newParked(t)
			tc.act(t, peer)
			var ready bool
			var err error
			if tc.ready {
				// Bytes and the peer's end take a moment to arrive.
				eventually(t, "Ready", func() bool {
					ready, err = p.Ready()
					return ready
				})
			} else {
				ready, err = p.Ready()
			}
			if ready != tc.ready || (err != nil) != tc.wantErr {
				t.Fatalf("Ready = %v, %v; want %v, error %v", ready, err, tc.ready, tc.wantErr)
			}
		})
	}
}

// TestNotifyClosedUnder checks that a wait whose socket is closed under
// it, without Wake, still ends: with net.ErrClosed, at the loop's next
// look for closed sockets.
func TestNotifyClosedUnder(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("no Notify on " + runtime.GOOS)
	}
	p, c, _ := newParked(t)
	got := make(chan error, 1)
	if _, ok := p.Notify(time.Time{}, func(err error) { got <- err }); !ok {
		t.Fatal("Notify reported no wait on Linux")
	}
	c.Close()
	select {
	case err := <-got:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("called with %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not called for a socket closed under its wait")
	}
}
