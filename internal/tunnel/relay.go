package tunnel

// Relay: a tunnel relayed by two goroutines and a copy buffer per
// direction, for any pair of net.Conns on any platform. It serves where
// the splice engine cannot: off Linux (where [Engine] is built on it) and
// for connections that are not plain TCP sockets.

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// relayBufSize is the size of Relay's copy buffers, one per direction,
// borrowed for the tunnel's life.
const relayBufSize = 32 << 10

// relayBufPool holds *[relayBufSize]byte buffers.
var relayBufPool = sync.Pool{New: func() any { return new([relayBufSize]byte) }}

// closeWriter is a connection whose write half can be shut down alone:
// *net.TCPConn, *net.UnixConn, *tls.Conn (which sends close_notify).
type closeWriter interface{ CloseWrite() error }

// lingerer is a connection that can be set to reset when closed.
type lingerer interface{ SetLinger(sec int) error }

// Relay relays bytes between client and upstream, both ways, until both
// directions have ended or one fails, then closes both connections and
// returns what moved. The calling goroutine copies client to upstream and
// one goroutine it starts (and waits for) copies upstream to client, each
// through a pooled 32 KiB buffer.
//
// Half-close passes through: when one side ends its stream, the other's
// write half is shut down if it has a CloseWrite method, and the other
// direction keeps flowing. A connection without CloseWrite (a net.Pipe
// end, say) learns of the end only when the tunnel ends.
//
// [Result.Up] counts the bytes written to upstream and [Result.Down] those
// written to client. [Result.Err] is nil when both directions ended
// cleanly. Otherwise it says why the tunnel ended: a wrapped read or
// write error (both connections are then closed with SO_LINGER 0 where
// they support it, so that the surviving peer sees a reset rather than a
// clean end of a truncated stream); [ErrIdleTimeout] when no byte moved
// either way for idle (0 means no idle limit; a write that the peer does
// not take within idle counts as idle too); or ctx's cause, wrapped, when
// ctx was done, which closes both connections at once.
func Relay(ctx context.Context, client, upstream net.Conn, idle time.Duration) Result {
	return RelayMetered(ctx, client, upstream, idle, nil)
}

// RelayMetered is Relay with a meter (nil = none) told of each write's
// bytes (at most the relay's buffer) as it returns, which may stop the
// tunnel: its Result.Err is then [ErrStopped].
func RelayMetered(ctx context.Context, client, upstream net.Conn, idle time.Duration, m Meter) Result {
	r := &relay{conns: [2]net.Conn{client, upstream}, idle: idle, start: time.Now(), meter: m}
	return r.run(ctx)
}

// relay is one tunnel being relayed by Relay. Sides and directions share
// indexes with the splice engine: side 0 is the client, direction 0 runs
// from the client to the upstream.
type relay struct {
	conns [2]net.Conn
	idle  time.Duration
	start time.Time
	last  atomic.Int64 // time since start when a byte last moved, if idle > 0
	n     [2]int64     // bytes written per direction; each owned by its direction
	meter Meter        // told of written bytes; nil = none

	mu    sync.Mutex
	timer *time.Timer // the idle check; guarded by mu

	over atomic.Bool // the tunnel's outcome is decided
	once sync.Once
	err  error // the first failure; written under once, read after the final once.Do
}

// run relays until both directions end.
func (r *relay) run(ctx context.Context) Result {
	stop := context.AfterFunc(ctx, func() {
		r.fail(fmt.Errorf("tunnel: relay: %w", context.Cause(ctx)), false)
	})
	if r.idle > 0 {
		r.mu.Lock()
		r.timer = time.AfterFunc(math.MaxInt64, r.checkIdle)
		r.timer.Reset(r.idle)
		r.mu.Unlock()
	}
	down := make(chan struct{})
	go func() {
		defer close(down)
		r.direction(1)
	}()
	r.direction(0)
	<-down
	stop()
	// Decide the outcome: a failure racing with the end (ctx, the idle
	// check) either completed before this Do returns or is ignored.
	r.once.Do(func() { r.over.Store(true) })
	if r.idle > 0 {
		r.mu.Lock()
		r.timer.Stop()
		r.mu.Unlock()
	}
	r.conns[0].Close()
	r.conns[1].Close()
	return Result{Up: r.n[0], Down: r.n[1], Duration: time.Since(r.start), Err: r.err}
}

// direction copies direction d until its source ends (then it passes the
// half-close on) or something fails (then the tunnel fails).
func (r *relay) direction(d int) {
	buf := relayBufPool.Get().(*[relayBufSize]byte)
	defer relayBufPool.Put(buf)
	src, dst := r.conns[d], r.conns[1-d]
	for {
		n, rerr := src.Read(buf[:])
		if n > 0 {
			r.touch()
			m, werr := dst.Write(buf[:n])
			r.n[d] += int64(m)
			if werr != nil {
				r.fail(fmt.Errorf("tunnel: write to %s: %w", sideName[1-d], werr), true)
				return
			}
			if r.meter != nil && !r.meter.Moved(d, int64(m)) {
				r.fail(ErrStopped, true)
				return
			}
			r.touch()
		}
		switch {
		case rerr == io.EOF:
			if cw, ok := dst.(closeWriter); ok {
				if err := cw.CloseWrite(); err != nil {
					r.fail(fmt.Errorf("tunnel: shut down writes to %s: %w", sideName[1-d], err), true)
				}
			}
			return
		case rerr != nil:
			r.fail(fmt.Errorf("tunnel: read from %s: %w", sideName[d], rerr), true)
			return
		}
	}
}

// touch notes that bytes moved, for the idle check.
func (r *relay) touch() {
	if r.idle > 0 {
		r.last.Store(int64(time.Since(r.start)))
	}
}

// checkIdle is the idle timer's function: it fails the tunnel if no byte
// moved for idle, and otherwise sets the timer for when that would be.
func (r *relay) checkIdle() {
	if r.over.Load() {
		return
	}
	quiet := time.Since(r.start) - time.Duration(r.last.Load())
	if quiet >= r.idle {
		r.fail(ErrIdleTimeout, false)
		return
	}
	r.mu.Lock()
	r.timer.Reset(r.idle - quiet)
	r.mu.Unlock()
}

// fail records err as the tunnel's error if the outcome is not decided
// yet, and closes both connections so that both directions stop: with
// SO_LINGER 0 when abort is set (a read or write failure), plainly
// otherwise (an idle timeout, the context done).
func (r *relay) fail(err error, abort bool) {
	r.once.Do(func() {
		r.over.Store(true)
		r.err = err
		if abort {
			for _, c := range r.conns {
				if l, ok := c.(lingerer); ok {
					l.SetLinger(0)
				}
			}
		}
		r.conns[0].Close()
		r.conns[1].Close()
	})
}
