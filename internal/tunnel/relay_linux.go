package tunnel

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// maxRounds bounds the splice round trips (socket to pipe, pipe to
	// socket) one direction makes per turn before the engine serves other
	// tunnels; with 1 MiB pipes that is up to 4 MiB per turn.
	maxRounds = 4

	spliceFlags = unix.SPLICE_F_MOVE | unix.SPLICE_F_NONBLOCK

	// smallSize is the size of the engine's small buffer (Engine.small):
	// a direction with nothing in flight reads into it and writes what it
	// read (two plain system calls, cheaper than two splices for small
	// messages); a read that fills it switches the direction to splice.
	smallSize = 16 << 10

	// Bits of tunnel.ready, per side.
	canRead  = 1 << 0
	canWrite = 1 << 1
	// sawHup: an event reported the side's peer done sending (or the
	// socket failed). Sticky: from then on every short read is followed
	// by one more, which sees the end of the stream (see pump).
	sawHup = 1 << 2
)

// tunnel is one relayed pair of sockets. All fields except fd, done,
// meter and started (set before the tunnel is handed to the loop) are owned by the
// loop goroutine.
type tunnel struct {
	cutAsked bool     // AddCut's cut was called; guarded by Engine.mu
	ready    [2]uint8 // per side: canRead, canWrite as last learned from the kernel, and sawHup
	queued   bool     // in Engine.again
	moved    bool     // bytes moved during this turn
	dead     bool     // finished; its descriptors are closed
	fd       [2]int32 // client and upstream descriptors, owned by the engine
	gen      uint32   // registration tag carried by this tunnel's epoll events
	idx      int32    // index in Engine.all, -1 while not registered
	dir      [2]direction
	started  time.Duration // engine clock at Add
	last     time.Duration // engine clock when a byte last moved
	owner    Owner         // told of the end; nil = none
	meter    Meter         // told of delivered bytes; nil = none
	tls      *tlsTunnel    // a TLS tunnel's state (AddTLS); nil for a spliced one
}

// direction is one way of a tunnel: from side d to side 1-d.
type direction struct {
	p     *pipe // borrowed while bytes are in flight, else nil
	n     int64 // bytes delivered to the destination
	eof   bool  // the source has sent FIN
	full  bool  // a read into the non-empty pipe got EAGAIN: the pipe may be full
	ended bool  // eof, pipe drained and the destination's write half shut down
	// bulk: the last read filled the engine's small buffer, or the last
	// splice moved at least as much; reads splice while it is set, and
	// copy through the small buffer (copySmall) otherwise.
	bulk bool
}

// handle applies the events epoll reported for one side of t and relays
// what they allow.
func (e *Engine) handle(t *tunnel, side int, events uint32) {
	if events&unix.EPOLLERR != 0 {
		// A pending socket error (a reset, typically) that no splice
		// might otherwise see if neither direction has bytes to move.
		soErr, err := unix.GetsockoptInt(int(t.fd[side]), unix.SOL_SOCKET, unix.SO_ERROR)
		if err == nil && soErr != 0 {
			err = unix.Errno(soErr)
		}
		if err != nil {
			e.finish(t, fmt.Errorf("tunnel: %s socket: %w", sideName[side], err))
			return
		}
	}
	if events&(unix.EPOLLIN|unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		t.ready[side] |= canRead
	}
	if events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		t.ready[side] |= sawHup
	}
	if events&(unix.EPOLLOUT|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
		t.ready[side] |= canWrite
	}
	e.run(t)
}

// run relays both directions of t as far as the sockets allow (or until
// the per-turn budget is spent, in which case t is queued to resume), and
// finishes t when both directions have ended or one failed.
func (e *Engine) run(t *tunnel) {
	if t.tls != nil {
		e.runTLS(t)
		return
	}
	more0, err := e.pump(t, 0)
	more1 := false
	if err == nil {
		more1, err = e.pump(t, 1)
	}
	e.endTurn(t, more0 || more1, err)
}

// endTurn ends a turn of t that stopped with err, or with more work left
// if more: it stamps t's activity and finishes or queues it as due.
func (e *Engine) endTurn(t *tunnel, more bool, err error) {
	if t.moved {
		// Read the clock after the turn, so that activity is never
		// stamped earlier than it happened.
		t.moved = false
		t.last = e.clock()
	}
	switch {
	case err != nil:
		e.finish(t, err)
	case t.dir[0].ended && t.dir[1].ended:
		e.finish(t, nil)
	case more && !t.queued:
		t.queued = true
		e.again = append(e.again, t)
	}
}

// resume gives another turn to the tunnels that spent their budget.
func (e *Engine) resume() {
	batch := e.again
	e.again = e.againSpare[:0]
	for i, t := range batch {
		batch[i] = nil
		t.queued = false
		if !t.dead {
			e.run(t)
		}
	}
	e.againSpare = batch[:0]
}

// pump moves bytes of direction d of t: it drains the pipe into the
// destination while the destination is writable and refills it from the
// source while the source is readable and the pipe has room, until neither
// is possible. It reports more when it stopped only because its budget was
// spent.
func (e *Engine) pump(t *tunnel, d int) (more bool, err error) {
	dr := &t.dir[d]
	if dr.ended {
		return false, nil
	}
	src, dst := int(t.fd[d]), int(t.fd[1-d])
	for range maxRounds {
		progress := false
		if p := dr.p; p != nil && p.n > 0 && t.ready[1-d]&canWrite != 0 {
			n, err := p.drain(dst)
			switch err {
			case nil:
				p.n -= int64(n)
				dr.n += int64(n)
				dr.full = false
				progress = true
				t.moved = true
				if t.meter != nil && !t.meter.Moved(d, int64(n)) {
					return false, ErrStopped
				}
			case unix.EAGAIN:
				t.ready[1-d] &^= canWrite
			case unix.EINTR:
				progress = true
			default:
				return false, fmt.Errorf("tunnel: write to %s: %w", sideName[1-d], err)
			}
			if p.n == 0 {
				e.putPipe(p)
				dr.p = nil
			}
		}
		if dr.eof {
			if dr.p != nil {
				if !progress {
					return false, nil // wait for the destination
				}
				continue
			}
			// Everything the source sent has been delivered: pass
			// its FIN on.
			if err := unix.Shutdown(dst, unix.SHUT_WR); err != nil {
				if err == unix.ENOTCONN {
					// The destination was reset; say so if the
					// socket still holds the error.
					if soErr, _ := unix.GetsockoptInt(dst, unix.SOL_SOCKET, unix.SO_ERROR); soErr != 0 {
						err = unix.Errno(soErr)
					}
				}
				return false, fmt.Errorf("tunnel: shut down writes to %s: %w", sideName[1-d], err)
			}
			dr.ended = true
			return false, nil
		}
		if dr.p != nil && dr.p.n >= dr.p.cap {
			dr.full = true
		}
		if t.ready[d]&canRead != 0 && dr.p == nil && t.ready[1-d]&canWrite != 0 && (!dr.bulk || !e.canSplice()) {
			// Nothing in flight and the destination writable: copy
			// through the engine's small buffer (bulk too when no
			// splice pipe is to be had).
			moved, err := e.copySmall(t, d)
			if err != nil {
				return false, err
			}
			progress = progress || moved
		} else if t.ready[d]&canRead != 0 && !dr.full && (dr.p != nil || e.canSplice()) {
			// (With no pipe to be had and the destination not
			// writable, the bytes wait in the source's socket until
			// EPOLLOUT, rather than in memory.)
			p := dr.p
			if p == nil {
				if p, err = e.getPipe(); err != nil {
					return false, err
				}
				dr.p = p
			}
			short := p.shortFill()
			n, err := p.fill(src)
			switch {
			case err == nil && n == 0:
				dr.eof = true
				progress = true
			case err == nil:
				p.n += int64(n)
				progress = true
				t.moved = true
				if n < smallSize {
					dr.bulk = false
				}
				if n < short && t.ready[d]&sawHup == 0 {
					// The socket had no more: a read now would
					// only return EAGAIN, and bytes that arrive
					// later bring a new edge. (A FIN that arrived
					// before this turn's event brings none, hence
					// sawHup.)
					t.ready[d] &^= canRead
				}
			case err == unix.EAGAIN && p.n == 0:
				// The pipe is empty, so the socket is.
				t.ready[d] &^= canRead
				dr.bulk = false
			case err == unix.EAGAIN:
				// Either the socket is empty or the pipe is full;
				// try again once the pipe has drained some.
				dr.full = true
			case err == unix.EINTR:
				progress = true
			}
			if p.n == 0 {
				e.putPipe(p)
				dr.p = nil
			}
			if err != nil && err != unix.EAGAIN && err != unix.EINTR {
				return false, fmt.Errorf("tunnel: read from %s: %w", sideName[d], err)
			}
		}
		if !progress {
			return false, nil
		}
	}
	return true, nil
}

// copySmall reads what the source of direction d of t has, up to
// smallSize bytes, into the engine's small buffer and writes it to the
// destination, which must be writable, with direction d holding no pipe.
// What the destination does not take is kept in a pipe. A read that fills
// the buffer marks the direction bulk: its next reads splice. It reports
// whether it moved anything (bytes, or the source's end of stream).
func (e *Engine) copySmall(t *tunnel, d int) (progress bool, err error) {
	dr := &t.dir[d]
	src, dst := int(t.fd[d]), int(t.fd[1-d])
	n, err := readFD(src, e.small)
	switch {
	case err == unix.EAGAIN:
		t.ready[d] &^= canRead
		return false, nil
	case err != nil:
		return false, fmt.Errorf("tunnel: read from %s: %w", sideName[d], err)
	case n == 0:
		dr.eof = true
		return true, nil
	}
	t.moved = true
	if n == len(e.small) {
		// Maybe more waiting: bulk, for splice.
		dr.bulk = true
	} else if t.ready[d]&sawHup == 0 {
		// The socket had no more (see the splice read in pump).
		t.ready[d] &^= canRead
	}
	w, err := writeFD(dst, e.small[:n])
	if err != nil && err != unix.EAGAIN {
		return false, fmt.Errorf("tunnel: write to %s: %w", sideName[1-d], err)
	}
	if w > 0 {
		dr.n += int64(w)
		if t.meter != nil && !t.meter.Moved(d, int64(w)) {
			return false, ErrStopped
		}
	}
	if w == n {
		return true, nil
	}
	// The send queue is full: the rest waits in a pipe for EPOLLOUT.
	t.ready[1-d] &^= canWrite
	p, err := e.getPipe()
	if err != nil {
		return false, err
	}
	if p.buf == nil && p.cap < int64(n-w) {
		// A pipe the kernel shrank (its user's pipe pages spent).
		e.putPipe(p)
		p = e.memPipe()
	}
	dr.p = p
	if err := p.put(e.small[w:n]); err != nil {
		return false, err
	}
	return true, nil
}

// finish ends t: it closes both sockets (abortively when err is a failure,
// so that the surviving peer sees a reset), returns or closes its pipes and
// calls its done callback.
func (e *Engine) finish(t *tunnel, err error) {
	if t.dead {
		return
	}
	t.dead = true
	if i := t.idx; i >= 0 {
		last := len(e.all) - 1
		e.all[i] = e.all[last]
		e.all[i].idx = i
		e.all[last] = nil
		e.all = e.all[:last]
		t.idx = -1
	}
	e.noPipeUntil = 0 // its descriptors are free again
	abort := err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrIdleTimeout)
	for _, fd := range t.fd {
		if int(fd) < len(e.byFD) && e.byFD[fd] == t {
			e.byFD[fd] = nil
		}
		if abort {
			unix.SetsockoptLinger(int(fd), unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1})
		}
		unix.Close(int(fd)) // also removes it from the epoll set
	}
	for d := range t.dir {
		if p := t.dir[d].p; p != nil {
			e.putPipe(p) // closes it if bytes are left
			t.dir[d].p = nil
		}
	}
	if t.tls != nil {
		releaseTLS(t.tls)
		t.tls = nil // crypto/tls's state goes with it
	}
	e.open.Add(-1)
	if o := t.owner; o != nil {
		t.owner = nil
		o.TunnelDone(Result{
			Up:       t.dir[0].n,
			Down:     t.dir[1].n,
			Duration: e.clock() - t.started,
			Err:      err,
		})
	}
}
