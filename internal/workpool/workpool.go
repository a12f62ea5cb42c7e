// Package workpool reuses the goroutines that serve short tasks (a
// forwarded request's stream, an answer of rustle's own): a worker that
// has run one waits a while for the next task instead of ending. A fresh
// goroutine starts with a small stack, and serving a forwarded request
// (TLS records or QUIC packets, the origin's response, header
// compression) grows it two or three times, each a copy of the stack:
// measured on HTTP/2 1 KB requests, 9 % of rustle's CPU went to copying
// stacks before workers were reused. A task that parks for long (a
// tunnel, a UDP flow) should run on a fresh goroutine instead, which
// keeps the small stack a new one has.
package workpool

import (
	"sync"
	"sync/atomic"
	"time"
)

// Pool hands tasks of type T to idle workers, each running them with
// the pool's function.
type Pool[T any] struct {
	run     func(T)
	ch      chan T // unbuffered: a send succeeds only into a waiting worker
	idle    atomic.Int32
	maxIdle int32
	wait    time.Duration
	done    chan struct{} // closed by Close: idle workers end

	waiting atomic.Int32 // workers in their wait for a task (or about to be)
	closed  atomic.Bool
	mu      sync.Mutex // Close's wait
	gone    sync.Cond  // broadcast when waiting drops to 0 after Close; L is &mu
}

// New returns a Pool whose workers call run for each task, of which at
// most maxIdle wait for a task at once, each for wait before it ends.
func New[T any](run func(T), maxIdle int, wait time.Duration) *Pool[T] {
	p := &Pool[T]{run: run, ch: make(chan T), maxIdle: int32(maxIdle), wait: wait, done: make(chan struct{})}
	p.gone.L = &p.mu
	return p
}

// Start runs t on an idle worker, or on a new one when none waits. After
// Close it still runs t, on a new goroutine that ends with it.
func (p *Pool[T]) Start(t T) {
	select {
	case p.ch <- t:
	default:
		go p.work(t)
	}
}

// Close ends the workers waiting for a task and waits until they have
// ended; from then on a worker ends after its task instead of waiting for
// another. The owner calls it when it hands the pool no more tasks, or
// few (a server whose generation a reload retired, whose connections
// still run): tasks started after it still run. It is idempotent.
func (p *Pool[T]) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed.Swap(true) {
		close(p.done)
	}
	for p.waiting.Load() > 0 {
		p.gone.Wait()
	}
}

// Waiting returns how many workers wait for a task.
func (p *Pool[T]) Waiting() int { return int(p.waiting.Load()) }

// work runs t, then the tasks handed to it, until it has waited p.wait
// for one, p.maxIdle others are waiting already, or the pool is closed.
func (p *Pool[T]) work(t T) {
	var timer *time.Timer
	var zero T
	for {
		p.run(t)
		t = zero
		if p.idle.Add(1) > p.maxIdle {
			p.idle.Add(-1)
			return
		}
		if !p.enter() {
			p.idle.Add(-1)
			return
		}
		if timer == nil {
			timer = time.NewTimer(p.wait)
		} else {
			timer.Reset(p.wait)
		}
		ok := true
		select {
		case t = <-p.ch:
			timer.Stop()
		case <-timer.C:
			ok = false
		case <-p.done:
			timer.Stop()
			ok = false
		}
		p.idle.Add(-1)
		p.leave()
		if !ok {
			return
		}
	}
}

// enter counts a worker that is to wait for a task, and reports false,
// counting nothing, once the pool is closed. (Close sets closed, then
// reads waiting; enter adds to waiting, then reads closed: one of them
// sees the other.)
func (p *Pool[T]) enter() bool {
	p.waiting.Add(1)
	if p.closed.Load() {
		p.leave()
		return false
	}
	return true
}

// leave ends enter's count, waking Close once the last waiting worker
// of a closed pool has stopped waiting.
func (p *Pool[T]) leave() {
	if p.waiting.Add(-1) == 0 && p.closed.Load() {
		p.mu.Lock() // Close is in gone.Wait, or has not read waiting yet
		p.gone.Broadcast()
		p.mu.Unlock()
	}
}
