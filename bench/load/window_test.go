package main

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestRunWindow checks the measuring window every load command runs: one
// call per worker, each with its own index and the same end, a context
// still live during the window, and the window's time capped at its
// length.
func TestRunWindow(t *testing.T) {
	const workers, window = 4, 50 * time.Millisecond
	var mu sync.Mutex
	seen := map[int]time.Time{}
	before := time.Now()
	elapsed := runWindow(window, time.Second, workers, func(ctx context.Context, end time.Time, i int) {
		live := ctx.Err() == nil
		mu.Lock()
		seen[i] = end
		mu.Unlock()
		if !live {
			t.Errorf("worker %d: context done at the start of the window", i)
		}
		<-time.After(time.Until(end) + 20*time.Millisecond) // overrun the window
	})
	if len(seen) != workers {
		t.Fatalf("workers called: %v, want indexes 0 to %d", seen, workers-1)
	}
	for i := range workers {
		if end, ok := seen[i]; !ok || end != seen[0] || end.Before(before.Add(window)) {
			t.Errorf("worker %d: end %v (called %v), want the same end, %v after the start", i, end, ok, window)
		}
	}
	if elapsed != window {
		t.Errorf("elapsed %v for workers that overran the window, want it capped at %v", elapsed, window)
	}
}

// TestHTTPResult checks that a run's counts are summed into its result:
// requests, bytes, errors by kind, the first error, and percentiles over
// every worker's latencies.
func TestHTTPResult(t *testing.T) {
	a := counts{requests: 2, bytes: 200, latencies: []time.Duration{time.Millisecond, 3 * time.Millisecond}}
	a.fail(&a.errs.Timeout, errors.New("first"))
	b := counts{requests: 1, bytes: 50, latencies: []time.Duration{2 * time.Millisecond}}
	b.fail(&b.errs.Read, errors.New("second"))
	b.fail(&b.errs.Connect, errors.New("third"))
	res := httpResult(3, []counts{a, b}, 1500*time.Microsecond)
	if res.Conns != 3 || res.Requests != 3 || res.Bytes != 250 || res.DurationUS != 1500 {
		t.Errorf("result %+v, want 3 conns, 3 requests, 250 bytes over 1500 us", res)
	}
	if e := res.Errors; e.Timeout != 1 || e.Read != 1 || e.Connect != 1 || e.Write != 0 || e.Status != 0 {
		t.Errorf("errors %+v, want one timeout, one read, one connect", e)
	}
	if res.FirstError != "first" {
		t.Errorf("first error %q, want the first worker's", res.FirstError)
	}
	if res.LatencyP50US != 2000 || res.LatencyMaxUS != 3000 {
		t.Errorf("latency p50 %d us, max %d us, want 2000 and 3000", res.LatencyP50US, res.LatencyMaxUS)
	}
}
