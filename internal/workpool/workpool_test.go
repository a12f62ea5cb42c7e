package workpool

import (
	"runtime/metrics"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rustle-proxy/rustle/internal/leaktest"
)

// TestReuse checks that tasks started one after the other run on one
// worker, and that an idle worker ends after its wait. It runs in a
// synctest bubble: the worker's wait is virtual time, which passes only
// when every goroutine of the test is blocked, so a loaded machine can
// neither end the worker before the next task (its wait is 200 ms) nor
// hand a task over while the worker is still on its way to its wait.
func TestReuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
		idle := func(want int32) {
			t.Helper()
			synctest.Wait() // the worker waits for a task, or has ended
			if n := p.idle.Load(); n != want {
				t.Fatalf("%d idle workers, want %d", n, want)
			}
		}
		p.Start(0)
		<-done
		idle(1)
		before := created()
		for i := 1; i <= 20; i++ {
			p.Start(i)
			<-done
			idle(1)
		}
		if n := created() - before; n > 2 { // 2: a first GC may start its mark workers meanwhile
			t.Errorf("20 tasks one after the other started %d goroutines, want them on the idle worker", n)
		}
		mu.Lock()
		if len(ran) != 21 {
			t.Errorf("ran %d tasks, want 21", len(ran))
		}
		mu.Unlock()
		time.Sleep(199 * time.Millisecond)
		idle(1) // not yet
		time.Sleep(time.Millisecond)
		idle(0) // the worker ends after its wait
	})
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
