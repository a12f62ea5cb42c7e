package tunnel

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// pipe is one splice pipe: bytes spliced in from a source socket wait here
// until they are spliced out to the destination.
type pipe struct {
	r, w int   // read and write ends, non-blocking
	n    int64 // bytes in the pipe now
	cap  int64 // capacity in bytes, as the kernel reports it
}

func (p *pipe) close() {
	unix.Close(p.r)
	unix.Close(p.w)
}

// getPipe returns an empty pipe from the pool, or a new one.
func (e *Engine) getPipe() (*pipe, error) {
	if n := len(e.pool); n > 0 {
		p := e.pool[n-1]
		e.pool[n-1] = nil
		e.pool = e.pool[:n-1]
		return p, nil
	}
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		return nil, fmt.Errorf("tunnel: create pipe: %w", err)
	}
	p := &pipe{r: fds[0], w: fds[1]}
	size, err := unix.FcntlInt(uintptr(p.w), unix.F_SETPIPE_SZ, e.pipeSize)
	if err != nil {
		// The pipe keeps the kernel's default size; that works, only
		// with more system calls per byte.
		if !e.pipeWarn {
			e.pipeWarn = true
			e.log.Debug("tunnel: pipe size refused, using the kernel default", "size", e.pipeSize, "err", err)
		}
		if size, err = unix.FcntlInt(uintptr(p.w), unix.F_GETPIPE_SZ, 0); err != nil {
			p.close()
			return nil, fmt.Errorf("tunnel: get pipe size: %w", err)
		}
	}
	p.cap = int64(size)
	return p, nil
}

// putPipe returns a pipe to the pool, or closes it when it still holds bytes
// or the pool is full.
func (e *Engine) putPipe(p *pipe) {
	if p.n != 0 || len(e.pool) >= e.maxIdle {
		p.close()
		return
	}
	e.pool = append(e.pool, p)
}
