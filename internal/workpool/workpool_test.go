package workpool

import (
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/leaktest"
)

// TestReuse checks that tasks started one after the other run on one
// worker, and that an idle worker ends after its wait.
func TestReuse(t *testing.T) {
	var mu sync.Mutex
	var ran []int
	done := make(chan struct{}, 1)
	p := New(func(i int) {
		mu.Lock()
		ran = append(ran, i)
		mu.Unlock()
		done <- struct{}{}
	}, 4, 200*time.Millisecond)
	created := func() uint64 {
		s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	p.Start(0)
	<-done
	waitIdle(t, p, 1)
	before := created()
	for i := 1; i <= 20; i++ {
		p.Start(i)
		<-done
		waitIdle(t, p, 1)
	}
	if n := created() - before; n > 2 {
		t.Errorf("20 tasks one after the other started %d goroutines, want them on the idle worker", n)
	}
	mu.Lock()
	if len(ran) != 21 {
		t.Errorf("ran %d tasks, want 21", len(ran))
	}
	mu.Unlock()
	waitIdle(t, p, 0) // the worker ends after its wait
}

// TestClose checks that Close ends the idle workers (whose own wait, an
// hour, would keep them) and returns once none waits any more, that it
// is idempotent, and that a task started after it runs, on a worker that
// ends with it.
func TestClose(t *testing.T) {
	const n = 8
	release := make(chan struct{})
	var ran sync.WaitGroup
	p := New(func(i int) {
		if i >= 0 {
			<-release // all n at once: n workers
		}
		ran.Done()
	}, n, time.Hour)
	ran.Add(n)
	for i := range n {
		p.Start(i)
	}
	close(release)
	ran.Wait()
	waitIdle(t, p, n)
	p.Close()
	if w := p.waiting.Load(); w != 0 {
		t.Errorf("Close returned with %d workers waiting for a task", w)
	}
	if err := leaktest.Check(5*time.Second, "workpool.(*Pool[...]).work"); err != nil {
		t.Fatal(err)
	}
	p.Close() // again: returns at once

	ran.Add(1)
	p.Start(-1)
	ran.Wait()
	if err := leaktest.Check(5*time.Second, "workpool.(*Pool[...]).work"); err != nil {
		t.Errorf("the worker of a task started after Close: %v", err)
	}
	if w := p.idle.Load(); w != 0 {
		t.Errorf("%d idle workers after Close", w)
	}
}

// waitIdle waits until n workers wait for a task.
func waitIdle(t *testing.T, p *Pool[int], n int32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for p.idle.Load() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d idle workers, want %d", p.idle.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkStart measures a task handed to an idle worker, one after the
// other: it allocates nothing.
func BenchmarkStart(b *testing.B) {
	done := make(chan struct{})
	p := New(func(struct{}) { done <- struct{}{} }, 4, time.Minute)
	b.ReportAllocs()
	for b.Loop() {
		p.Start(struct{}{})
		<-done
	}
}
