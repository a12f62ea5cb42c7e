package h2

import (
	"sync/atomic"
	"time"
)

// Stream workers for requests that end with their answer (forwarded
// requests and rustle's own answers) are reused: a worker that has served
// one waits a while for the next stream of any connection of the server
// instead of ending. A fresh goroutine starts with a 2 KiB stack, and
// serving a forwarded request (TLS records, the origin's response, HPACK)
// grows it twice or three times, each a copy of the stack: measured on
// h2-1k, 9 % of rustle's CPU went to copying stacks before workers were
// reused. A tunnel's stream never gets a reused worker: its goroutine
// stays parked while the tunnel is idle, and must keep the small stack a
// fresh one has (see doc.go).

const (
	// maxIdleWorkers bounds the workers waiting for a stream, so that a
	// burst of concurrent requests leaves at most this many behind.
	maxIdleWorkers = 256
	// workerIdle is how long a worker waits for a stream before it ends.
	workerIdle = 2 * time.Second
)

// workerPool hands streams to idle workers.
type workerPool struct {
	ch   chan *stream // unbuffered: a send succeeds only into a waiting worker
	idle atomic.Int32 // workers waiting on ch
}

func newWorkerPool() *workerPool {
	return &workerPool{ch: make(chan *stream)}
}

// start runs s on an idle worker, or on a new one when none waits.
func (p *workerPool) start(s *stream) {
	select {
	case p.ch <- s:
	default:
		go p.work(s)
	}
}

// work runs s, then the streams handed to it, until it has waited
// workerIdle for one or maxIdleWorkers others are waiting already.
func (p *workerPool) work(s *stream) {
	var t *time.Timer
	for {
		s.run()
		s = nil
		if p.idle.Add(1) > maxIdleWorkers {
			p.idle.Add(-1)
			return
		}
		if t == nil {
			t = time.NewTimer(workerIdle)
		} else {
			t.Reset(workerIdle)
		}
		select {
		case s = <-p.ch:
			p.idle.Add(-1)
			t.Stop()
		case <-t.C:
			p.idle.Add(-1)
			return
		}
	}
}
