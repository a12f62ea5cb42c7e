package route

import (
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestNewAfter checks what a reload's table takes over from the one in
// use: a parent with the same configuration is the same *Parent (its
// health and observer kept), one with the same name and URL but other
// settings is new with the old health, one with another URL starts
// afresh; and a kept parent's probe loop goes on across reloads quicker
// than its interval (a restarted loop would never probe), joined when the
// last table holding it closes.
func TestNewAfter(t *testing.T) {
	var probes atomic.Int64
	live := fakeParent(t, func(c net.Conn) { probes.Add(1) })
	dead := fakeParent(t, func(c net.Conn) {})
	const every = 50 * time.Millisecond
	cfg := func(cooldown time.Duration, otherURL string) Config {
		return tableConfig(Config{Parents: []ParentConfig{
			{Name: "probed", URL: "http://" + live, Probe: ProbeConfig{Interval: every}},
			{Name: "same", URL: "http://" + dead},
			{Name: "tuned", URL: "http://" + dead, Health: HealthConfig{Cooldown: cooldown}},
			{Name: "moved", URL: "http://" + otherURL},
		}})
	}
	before := runtime.NumGoroutine()
	prev, err := New(cfg(time.Minute, dead))
	if err != nil {
		t.Fatal(err)
	}
	prev.Start(testDialer(t))
	now := time.Now()
	for _, n := range []string{"same", "tuned", "moved"} {
		down(prev.Parent(n), now)
	}
	next, err := NewAfter(cfg(2*time.Minute, live), prev)
	if err != nil {
		t.Fatal(err)
	}
	if next.Parent("same") != prev.Parent("same") || next.Parent("probed") != prev.Parent("probed") {
		t.Error("an unchanged parent is not carried over as the same *Parent")
	}
	if p := next.Parent("tuned"); p == prev.Parent("tuned") || p.Health().Up(now) {
		t.Errorf("tuned: same *Parent %v, up %v; want a new parent, still down", p == prev.Parent("tuned"), p.Health().Up(now))
	}
	if p := next.Parent("same"); p.Health().Up(now) {
		t.Error("same: up after the reload, want down")
	}
	if p := next.Parent("moved"); p == prev.Parent("moved") || !p.Health().Up(now) {
		t.Error("moved (another URL): not a fresh parent that is up")
	}

	// Reloads in a row, each quicker than the probe interval: the kept
	// loop still probes.
	cur := prev
	deadline := time.Now().Add(10 * time.Second)
	start := probes.Load()
	for probes.Load() < start+5 {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes in 10s of reloads, want 5: the probe loop restarts on each reload", probes.Load()-start)
		}
		n, err := NewAfter(cfg(time.Minute, dead), cur)
		if err != nil {
			t.Fatal(err)
		}
		n.Start(testDialer(t))
		cur.Close()
		cur = n
	}
	cur.Close()
	waitUntil(t, "as many goroutines as before Start", func() bool { return runtime.NumGoroutine() <= before+2 })
}
