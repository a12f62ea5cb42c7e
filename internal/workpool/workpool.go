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
}

// New returns a Pool whose workers call run for each task, of which at
// most maxIdle wait for a task at once, each for wait before it ends.
func New[T any](run func(T), maxIdle int, wait time.Duration) *Pool[T] {
	return &Pool[T]{run: run, ch: make(chan T), maxIdle: int32(maxIdle), wait: wait}
}

// Start runs t on an idle worker, or on a new one when none waits.
func (p *Pool[T]) Start(t T) {
	select {
	case p.ch <- t:
	default:
		go p.work(t)
	}
}

// work runs t, then the tasks handed to it, until it has waited p.wait
// for one or p.maxIdle others are waiting already.
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
		if timer == nil {
			timer = time.NewTimer(p.wait)
		} else {
			timer.Reset(p.wait)
		}
		select {
		case t = <-p.ch:
			p.idle.Add(-1)
			timer.Stop()
		case <-timer.C:
			p.idle.Add(-1)
			return
		}
	}
}
