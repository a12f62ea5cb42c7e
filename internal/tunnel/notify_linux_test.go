package tunnel

import (
	"errors"
	"io"
	"os"
	"runtime/metrics"
	"testing"
	"time"
)

// TestNotifyLoopStays checks that a wait after another, the one before
// having ended and no other left (a parked connection whose client
// sends a request now and then), starts no loop goroutine for each: the
// loop stays until a sweep finds no wait and none registered since the
// sweep before, so each round starts only the goroutine that calls the
// wait's function (before, the loop ended as the last wait left, woken
// for it by an eventfd write, and each Notify started it again: two
// goroutines a round). A loop that ended all the same (a machine so
// slow that a round spans two sweeps) may start again, so the bound
// allows one more goroutine for each second taken. TestNotify checks
// that the loop still ends once no wait is left.
func TestNotifyLoopStays(t *testing.T) {
	p, c, peer := newParked(t)
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	created := func() uint64 {
		metrics.Read(s)
		if s[0].Value.Kind() != metrics.KindUint64 {
			t.Skip("runtime/metrics has no /sched/goroutines-created")
		}
		return s[0].Value.Uint64()
	}
	got := make(chan error, 1)
	round := func() {
		t.Helper()
		if _, ok := p.Notify(time.Time{}, func(err error) { got <- err }); !ok {
			t.Fatal("Notify reported no wait on Linux")
		}
		peer.Write([]byte("a"))
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("called with %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("not called")
		}
		var b [1]byte
		if _, err := io.ReadFull(c, b[:]); err != nil {
			t.Fatal(err)
		}
	}
	round() // the loop started
	const rounds = 50
	start, before := time.Now(), created()
	for range rounds {
		round()
	}
	n := created() - before
	most := uint64(rounds) + 1 + uint64(time.Since(start)/notifySweep)
	t.Logf("%d goroutines started for %d waits one after another", n, rounds)
	if n > most {
		t.Errorf("%d goroutines started for %d waits one after another, want at most %d (one each, the loop kept)", n, rounds, most)
	}
}

// TestNotifyEpollCalls checks what a wait costs in epoll_ctl calls: one
// for a wait that its socket's bytes end (the socket, disabled by its
// one-shot event, stays in the set and is enabled again), where an add
// and a delete each cost two; and that a wait ended otherwise (its
// deadline, Wake) takes the socket out, the next one putting it back,
// each wait still called once, with nil for bytes.
func TestNotifyEpollCalls(t *testing.T) {
	p, c, peer := newParked(t)
	ctls := func() uint64 {
		notices.mu.Lock()
		defer notices.mu.Unlock()
		return notices.ctls
	}
	wait := func(deadline time.Time, wake, send bool) error {
		t.Helper()
		got := make(chan error, 1)
		n, ok := p.Notify(deadline, func(err error) { got <- err })
		if !ok {
			t.Fatal("Notify reported no wait on Linux")
		}
		if wake {
			n.Wake()
		}
		if send {
			peer.Write([]byte("a"))
		}
		var err error
		select {
		case err = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("not called")
		}
		if send {
			var b [1]byte
			if _, err := io.ReadFull(c, b[:]); err != nil {
				t.Fatal(err)
			}
		}
		return err
	}
	tests := []struct {
		name           string
		deadline, wake bool
		want           error
		most           uint64 // epoll_ctl calls of the wait, at most
	}{
		{"bytes", false, false, nil, 1},
		{"bytes again", false, false, nil, 1},
		{"deadline", true, false, os.ErrDeadlineExceeded, 2}, // enabled, then taken out
		{"bytes after a deadline", false, false, nil, 1},     // put back
		{"woken", false, true, ErrWoken, 2},
		{"bytes after a wake", false, false, nil, 1},
	}
	wait(time.Time{}, false, true) // the socket in the set
	for _, tt := range tests {
		before := ctls()
		var deadline time.Time
		if tt.deadline {
			deadline = time.Now().Add(20 * time.Millisecond)
		}
		err := wait(deadline, tt.wake, tt.want == nil)
		if !errors.Is(err, tt.want) && err != tt.want {
			t.Fatalf("%s: called with %v, want %v", tt.name, err, tt.want)
		}
		if n := ctls() - before; n > tt.most {
			t.Errorf("%s: %d epoll_ctl calls, want at most %d", tt.name, n, tt.most)
		}
	}
}
