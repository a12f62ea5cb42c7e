package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestPercent(t *testing.T) {
	const mb = 1 << 20
	tests := []struct {
		name        string
		percent     int
		floor, live uint64
		want        int
	}{
		{"no floor", 25, 0, 1 * mb, 25},
		{"live heap not known", 25, 4 * mb, 0, 25},
		{"small heap raised", 25, 4 * mb, 1 * mb, 125},
		{"raised by the live heap's share", 25, 4 * mb, 3 * mb, 134},
		{"rounded up", 25, 4 * mb, 3*mb + 1, 134},
		{"large heap keeps percent", 25, 4 * mb, 100 * mb, 25},
		{"at the crossing", 25, 4 * mb, 16 * mb, 25},
		{"just under the crossing", 25, 4 * mb, 16*mb - 1, 26},
		{"nearly empty heap: the runtime's minimum", 25, 4 * mb, 1, 100},
		{"larger floor over a small heap", 25, 8 * mb, 256 << 10, 206},
		{"high percent wins", 200, 4 * mb, 4 * mb, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percent(tt.percent, tt.floor, tt.live); got != tt.want {
				t.Errorf("Percent(%d, %d, %d) = %d, want %d", tt.percent, tt.floor, tt.live, got, tt.want)
			}
			// The runtime's target at that percentage is about live +
			// floor (within a percent of live, or of heapMinimum, for
			// rounding) when raised, and at least live × (1 +
			// percent/100).
			if tt.live > 0 && tt.floor > 0 {
				got := uint64(Percent(tt.percent, tt.floor, tt.live))
				goal := max(tt.live*(100+got)/100, heapMinimum*got/100)
				slack := max(tt.live, heapMinimum) / 100
				if goal+slack < tt.live+tt.floor || goal < tt.live*uint64(100+tt.percent)/100 ||
					(got > uint64(tt.percent) && goal > tt.live+tt.floor+slack) {
					t.Errorf("target %d for live %d, floor %d, percent %d", goal, tt.live, tt.floor, tt.percent)
				}
			}
		})
	}
}

// gogc returns the collector's percentage now.
func gogc(t *testing.T) int {
	t.Helper()
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// live returns the live heap of the last collection.
func live() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// waitGOGC collects until the percentage is want or 10 s pass: the
// finalizer runs on its own goroutine after the collection.
func waitGOGC(t *testing.T, want func() int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		w := want()
		if got := gogc(t); got == w {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("GC percent %d, want %d (live heap %d)", got, w, live())
		}
		runtime.Gosched()
	}
}

func TestTunerFollowsLiveHeap(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })

	// A floor far above this test binary's live heap raises the
	// percentage after each collection.
	const floor = 8 << 20
	tu := New(25, floor)
	t.Cleanup(tu.Close)
	waitGOGC(t, func() int { return Percent(25, floor, live()) })
	if p := gogc(t); p <= 25 {
		t.Fatalf("GC percent %d with a %d-byte floor and a live heap of %d: not raised", p, floor, live())
	}

	// A live heap past floor × 100 / percent gets the percentage alone.
	big := make([][]byte, 0, 6)
	for range 6 {
		big = append(big, make([]byte, 8<<20)) // 48 MiB live > 8 MiB × 4
	}
	waitGOGC(t, func() int { return 25 })
	runtime.KeepAlive(big)
	big = nil

	// A reload's Set takes effect at once; Close leaves the percentage
	// without the floor.
	tu.Set(50, 0)
	if p := gogc(t); p != 50 {
		t.Errorf("after Set(50, 0): GC percent %d, want 50", p)
	}
	tu.Set(25, floor)
	waitGOGC(t, func() int { return Percent(25, floor, live()) })
	tu.Close()
	tu.Close()
	if p := gogc(t); p != 25 {
		t.Errorf("after Close: GC percent %d, want 25", p)
	}
	// Closed, it changes nothing after a collection.
	debug.SetGCPercent(77)
	runtime.GC()
	runtime.GC()
	if p := gogc(t); p != 77 {
		t.Errorf("a closed tuner set the percentage to %d", p)
	}
}

// TestTunerHeapGoal checks the heap target the runtime applies, not only
// the percentage: with a live heap far under the floor, the next
// collection comes after about the floor's bytes of allocation. Go's
// runtime also targets at least 4 MiB × GOGC/100 whatever the live heap,
// so a percentage raised to floor × 100 / live (3,200 for an 8 MiB floor
// over 256 KiB) put it at 128 MiB: a process with a small live heap
// then never collected, and every byte it allocated stayed resident.
func TestTunerHeapGoal(t *testing.T) {
	prev := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(prev) })
	for _, floor := range []uint64{4 << 20, 8 << 20} {
		tu := New(25, floor)
		waitGOGC(t, func() int { return Percent(25, floor, live()) })
		s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}, {Name: "/gc/heap/live:bytes"}}
		metrics.Read(s)
		goal, l := s[0].Value.Uint64(), s[1].Value.Uint64()
		tu.Close()
		t.Logf("floor %d KiB: live heap %d KiB, heap goal %d KiB, GC percent %d", floor>>10, l>>10, goal>>10, Percent(25, floor, l))
		// The proportional goal also counts stacks and globals: a
		// little over live + floor.
		if want := l + floor; goal < want*9/10 || goal > want+want/4 {
			t.Errorf("floor %d KiB: heap goal %d KiB with a live heap of %d KiB, want about %d KiB (live + floor)", floor>>10, goal>>10, l>>10, want>>10)
		}
	}
}
