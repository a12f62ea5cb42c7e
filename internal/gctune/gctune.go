// Package gctune sets the Go garbage collector's target for the process:
// a percentage of the live heap (GOGC), with a floor under the growth
// allowed between two collections.
//
// A low percentage keeps a large live heap from carrying much garbage (an
// idle TLS tunnel's resident size grows with it), but on a small live heap
// it makes the collector run very often: at 25 % of 1 MB of live data,
// Go's runtime collects after every megabyte allocated, which a proxy
// doing TLS handshakes (about 70 KB of crypto/tls state each) reaches
// every dozen new connections, emptying the buffer pools each time. A
// [Tuner] raises the percentage after each collection, while the live heap
// is small, so that the next one waits for at least the floor's bytes of
// new allocation: the target is max(live × (1 + percent/100), live +
// floor). Once the live heap is large the percentage is the configured
// one again.
//
// The tuner runs after each collection on the runtime's finalizer
// goroutine (a sentinel object re-armed each time), so an idle process
// pays nothing; it starts no goroutine of its own.
package gctune

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// maxPercent bounds the percentage a floor may ask for.
const maxPercent = 10000

// heapMinimum is the Go runtime's least heap target at GOGC 100
// (runtime.defaultHeapMinimum): at a percentage p the runtime targets at
// least heapMinimum × p / 100 bytes, however small the live heap.
const heapMinimum = 4 << 20

// Percent returns the GC percentage that gives a live heap of live bytes
// a target of about live + floor bytes, and at least percent of live
// bytes of growth; floor 0 (or a live heap not known yet, 0) leaves
// percent as it is.
//
// The runtime's target at a percentage p is the larger of live × (1 +
// p/100) and heapMinimum × p/100. The raise is the least p whose first
// term reaches live + floor, but no more than the p whose second term
// does: on a heap much smaller than heapMinimum the second term alone
// makes the target live + floor (a percentage of floor × 100 / live
// there would target far more, up to GB, and the heap would grow with
// everything allocated, uncollected).
func Percent(percent int, floor, live uint64) int {
	if floor == 0 || live == 0 {
		return percent
	}
	need := (floor*100 + live - 1) / live     // ceil(floor / live × 100)
	fit := (live + floor) * 100 / heapMinimum // heapMinimum × fit/100 ≤ live + floor
	return max(percent, int(min(need, fit, maxPercent)))
}

// A Tuner keeps the collector's percentage at Percent(percent, floor,
// live heap) after every collection until Close.
type Tuner struct {
	mu      sync.Mutex // guards the fields below
	percent int
	floor   uint64
	closed  bool
	applied int              // the percentage last set; 0 = none yet
	sample  []metrics.Sample // the live heap, read after each collection
}

// New sets the collector's percentage to percent (positive) and keeps it
// there, raised while the live heap is under the floor's bytes × 100 /
// percent, until Close. floor 0 means no floor: percent alone, as
// debug.SetGCPercent would set it.
func New(percent int, floor uint64) *Tuner {
	t := &Tuner{sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.Set(percent, floor)
	arm(t)
	return t
}

// Set changes the percentage and the floor (on a reload); it applies them
// at once with the live heap of the last collection.
func (t *Tuner) Set(percent int, floor uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.percent, t.floor = percent, floor
	t.applyLocked()
}

// Close stops the tuning and leaves the configured percentage, without
// the floor's raise, in place. It is idempotent.
func (t *Tuner) Close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return
	}
	t.closed = true
	t.floor = 0
	t.applyLocked()
}

// applyLocked sets the percentage for the live heap now. t.mu must be
// held.
func (t *Tuner) applyLocked() {
	metrics.Read(t.sample)
	var live uint64
	if t.sample[0].Value.Kind() == metrics.KindUint64 {
		live = t.sample[0].Value.Uint64()
	}
	if p := Percent(t.percent, t.floor, live); p != t.applied {
		debug.SetGCPercent(p)
		t.applied = p
	}
}

// afterGC runs after a collection: it sets the percentage for the live
// heap that collection found and reports whether to run after the next.
func (t *Tuner) afterGC() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.applyLocked()
	return true
}

// sentinel is an object only the finalizer refers to: it becomes
// unreachable at the next collection, and its finalizer runs after it.
type sentinel struct {
	t *Tuner
	_ [16]byte // not a tiny allocation, which could share a block and outlive the cycle
}

// arm allocates the sentinel whose finalizer calls t.afterGC once the
// next collection has run.
func arm(t *Tuner) {
	s := &sentinel{t: t}
	runtime.SetFinalizer(s, func(s *sentinel) {
		if s.t.afterGC() {
			arm(s.t)
		}
	})
}
