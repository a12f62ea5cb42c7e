package h2

import (
	"time"

	"github.com/rustle-proxy/rustle/internal/workpool"
)

// Stream workers for requests that end with their answer (forwarded
// requests and rustle's own answers) are reused (package workpool): a
// worker that has served one waits a while for the next stream of any
// connection of the server instead of ending. A tunnel's stream never
// gets a reused worker: its goroutine stays parked while the tunnel is
// idle, and must keep the small stack a fresh one has (see doc.go).

const (
	// maxIdleWorkers bounds the workers waiting for a stream, so that a
	// burst of concurrent requests leaves at most this many behind.
	maxIdleWorkers = 256
	// workerIdle is how long a worker waits for a stream before it ends.
	workerIdle = 2 * time.Second
)

// newWorkerPool returns the pool that runs streams ending with their
// answer.
func newWorkerPool() *workpool.Pool[*stream] {
	return workpool.New((*stream).run, maxIdleWorkers, workerIdle)
}
