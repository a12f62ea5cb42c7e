package tunnel

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// memPipeSize is the capacity of a pipe in memory (see pipe.buf): what
// the small buffer's copy (copySmall) leaves when the destination takes
// only part of it, and at most what a direction that could not have a
// splice pipe holds.
const memPipeSize = smallSize

// noPipeWait is how long the engine makes no pipe after pipe2 failed for
// want of descriptors, unless one of its tunnels ends first.
const noPipeWait = time.Second

// pipe is one splice pipe: bytes spliced in from a source socket wait here
// until they are spliced out to the destination. When the process has no
// descriptor left for a pipe, a direction relays through memory instead:
// buf holds the bytes, read and written with plain system calls, so that
// a live tunnel goes on (more slowly) rather than being reset.
type pipe struct {
	r, w int    // read and write ends, non-blocking; unused when buf is set
	n    int64  // bytes in the pipe now
	cap  int64  // capacity in bytes, as the kernel reports it
	buf  []byte // a pipe in memory when not nil: the bytes are buf[off:off+n]
	off  int64
}

func (p *pipe) close() {
	if p.buf != nil {
		return
	}
	unix.Close(p.r)
	unix.Close(p.w)
}

// fill reads from the socket src into the pipe's free room.
func (p *pipe) fill(src int) (int64, error) {
	if p.buf == nil {
		return spliceFD(src, p.w, int(p.cap-p.n))
	}
	if p.off > 0 {
		copy(p.buf, p.buf[p.off:p.off+p.n])
		p.off = 0
	}
	n, err := unix.Read(src, p.buf[p.n:])
	if err != nil {
		n = 0
	}
	return int64(n), err
}

// put writes b into the pipe, which must be empty and hold at least
// len(b) bytes.
func (p *pipe) put(b []byte) error {
	if p.buf != nil {
		p.off, p.n = 0, int64(copy(p.buf, b))
		return nil
	}
	n, err := writeFD(p.w, b)
	p.n = int64(n)
	if err == nil && n < len(b) {
		err = fmt.Errorf("took %d of %d bytes", n, len(b))
	}
	if err != nil {
		return fmt.Errorf("tunnel: write to pipe: %w", err)
	}
	return nil
}

// shortFill returns a count such that a fill that moves fewer bytes than
// it has emptied the socket's receive queue; 0 when no count tells. A TCP
// read stops short only when the queue is empty; a splice also when the
// pipe runs out of slots (one page each, the pipe's capacity over the
// page size), which an empty pipe cannot before as many bytes as it has
// slots have moved, each slot holding at least one.
func (p *pipe) shortFill() int64 {
	if p.buf != nil {
		return p.cap - p.n
	}
	if p.n != 0 {
		return 0
	}
	return p.cap / pageSize
}

var pageSize = int64(unix.Getpagesize())

// drain writes the pipe's bytes to the socket dst.
func (p *pipe) drain(dst int) (int64, error) {
	if p.buf == nil {
		return spliceFD(p.r, dst, int(p.n))
	}
	n, err := unix.Write(dst, p.buf[p.off:p.off+p.n])
	if err != nil {
		return 0, err
	}
	p.off += int64(n)
	if int64(n) == p.n {
		p.off = 0
	}
	return int64(n), nil
}

// canSplice reports whether getPipe would return a splice pipe: one is
// pooled, or the engine holds fewer than its Config.MaxPipes and pipe2
// has not just failed for want of descriptors. A direction that cannot
// splice copies through the engine's small buffer instead (copySmall).
func (e *Engine) canSplice() bool {
	if len(e.pool) > 0 {
		return true
	}
	if limit := e.maxPipes.Load(); limit > 0 && e.pipes.Load() >= limit {
		if !e.capWarn {
			e.capWarn = true
			e.log.Info("tunnel: splice pipe budget spent, relaying through memory", "max_pipes", limit)
		}
		return false
	}
	return e.now >= e.noPipeUntil
}

// getPipe returns an empty pipe from the pool, a new one, or, when the
// engine holds its Config.MaxPipes or the process is out of descriptors,
// a pipe in memory.
func (e *Engine) getPipe() (*pipe, error) {
	if n := len(e.pool); n > 0 {
		p := e.pool[n-1]
		e.pool[n-1] = nil
		e.pool = e.pool[:n-1]
		return p, nil
	}
	if !e.canSplice() {
		return e.memPipe(), nil
	}
	var fds [2]int
	if err := e.pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
		if err == unix.EMFILE || err == unix.ENFILE {
			// Out of descriptors: relay through memory rather than
			// reset the tunnel, and make no pipe for a while.
			e.noPipeUntil = e.now + noPipeWait
			if !e.memWarn {
				e.memWarn = true
				e.log.Warn("tunnel: no descriptor for a splice pipe, relaying through memory", "err", err)
			}
			return e.memPipe(), nil
		}
		return nil, fmt.Errorf("tunnel: create pipe: %w", err)
	}
	e.pipes.Add(1)
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
			e.closePipe(p)
			return nil, fmt.Errorf("tunnel: get pipe size: %w", err)
		}
	}
	p.cap = int64(size)
	return p, nil
}

// memPipe returns an empty pipe in memory from its pool, or a new one.
func (e *Engine) memPipe() *pipe {
	e.memPipes.Add(1)
	if n := len(e.memPool); n > 0 {
		p := e.memPool[n-1]
		e.memPool[n-1] = nil
		e.memPool = e.memPool[:n-1]
		return p
	}
	return &pipe{buf: make([]byte, memPipeSize), cap: memPipeSize}
}

// putPipe returns a pipe to the pool, or closes it when it still holds
// bytes, the pool is full or the engine holds more than its MaxPipes.
func (e *Engine) putPipe(p *pipe) {
	if p.buf != nil {
		e.memPipes.Add(-1)
		if p.n == 0 && len(e.memPool) < e.maxIdle {
			e.memPool = append(e.memPool, p)
		}
		return
	}
	if limit := e.maxPipes.Load(); p.n != 0 || len(e.pool) >= e.maxIdle || (limit > 0 && e.pipes.Load() > limit) {
		e.closePipe(p)
		return
	}
	e.pool = append(e.pool, p)
}

// closePipe closes a splice pipe and takes it off the engine's count.
func (e *Engine) closePipe(p *pipe) {
	if p.buf == nil {
		e.pipes.Add(-1)
	}
	p.close()
}
