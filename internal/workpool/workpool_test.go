package workpool

import (
	"runtime/metrics"
	"sync"
	"testing"
	"time"
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
