package tunnel

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"
)

// ErrNoPlaintext is what [Parker.ReadNow] returns when the records the
// socket had at once made no plaintext for the reader.
var ErrNoPlaintext = errors.New("tunnel: no plaintext in the records read")

// ErrWouldBlock is what a connection's Read answers, in a read without
// waiting (see [Looker]'s ReadNow), when it has no bytes at once. It is
// a temporary net.Error, which crypto/tls returns to its caller without
// marking its connection broken (it keeps a record cut short for the
// next read).
var ErrWouldBlock error = wouldBlockError{}

type wouldBlockError struct{}

func (wouldBlockError) Error() string   { return "tunnel: connection has nothing to read" }
func (wouldBlockError) Timeout() bool   { return false }
func (wouldBlockError) Temporary() bool { return true }

// Waiter is a reader's wait for the next bytes of a connection that
// holds none of them meanwhile: a socket's [Parker] (see [TLSWaiter]),
// or the wait a connection with no socket of its own provides
// ([WaiterConn]: an HTTP/2 CONNECT stream, whose bytes the HTTP/2
// connection's reader delivers). Its methods are those of Parker:
// Ready reports without waiting whether there are bytes to read (or
// the connection has ended: the read then says how); WaitRead waits for
// them on the calling goroutine, until the connection's read deadline;
// Notify calls fn once they come, with no goroutine waiting meanwhile
// (see [Parker.Notify]), or reports false where it cannot. A Waiter is
// used by one goroutine at a time, except for the Waker's Wake.
type Waiter interface {
	Ready() (ready bool, err error)
	WaitRead() error
	Notify(deadline time.Time, fn func(error)) (Waker, bool)
}

// Waker ends a wait of [Waiter.Notify]: its function then gets
// [ErrWoken]. It does not block, and may be called more than once.
type Waker interface{ Wake() }

// Looker is a Waiter of a TLS connection whose socket may bring records
// that make no plaintext for its reader (a KeyUpdate, an empty record):
// a reader that must not wait for more on its goroutine (one about to
// park) reads with ReadNow, and parks with NotifyLook, which looks
// itself before waking it. The Waiter of a TLS connection's socket
// ([TLSWaiter]'s Parker) is one.
type Looker interface {
	Waiter
	// ReadNow is [Parker.ReadNow]: r's read without waiting for the
	// socket, ErrNoPlaintext when it would wait.
	ReadNow(r io.Reader, b []byte) (int, error)
	// NotifyLook is Notify whose fn is called, once the socket is
	// readable, only if look reports true (see [Parker.NotifyLook]).
	NotifyLook(deadline time.Time, look func() bool, fn func(error)) (Waker, bool)
}

// WaiterConn is a connection that provides the Waiter of its reads
// itself (h2's intercepted CONNECT stream); false when it has none.
type WaiterConn interface {
	Waiter() (Waiter, bool)
}

// TLSWaiter returns the Waiter for the reads of c, a TLS connection:
// the one a connection under it provides ([WaiterConn], through
// wrappers that hold no bytes of their own and have a NetConn method),
// or else [TLSParker]'s; nil and false when there is neither.
func TLSWaiter(c *tls.Conn) (Waiter, bool) {
	nc := c.NetConn()
	for range 4 {
		if w, ok := nc.(WaiterConn); ok {
			return w.Waiter()
		}
		u, ok := nc.(interface{ NetConn() net.Conn })
		if _, tlsConn := nc.(*tls.Conn); !ok || tlsConn {
			break
		}
		nc = u.NetConn()
	}
	p, ok := TLSParker(c)
	if !ok {
		return nil, false
	}
	return tlsWaiter{parkerWaiter{p}}, true
}

// ParkerWaiter returns p as a Waiter, which has p's Wait method too.
func ParkerWaiter(p *Parker) Waiter { return parkerWaiter{p} }

// parkerWaiter is a socket's Parker as a Waiter.
type parkerWaiter struct{ *Parker }

func (p parkerWaiter) Notify(deadline time.Time, fn func(error)) (Waker, bool) {
	n, ok := p.Parker.Notify(deadline, fn)
	if !ok {
		return nil, false
	}
	return n, true
}

// tlsWaiter is a TLS connection's Parker as a Looker.
type tlsWaiter struct{ parkerWaiter }

func (p tlsWaiter) NotifyLook(deadline time.Time, look func() bool, fn func(error)) (Waker, bool) {
	n, ok := p.Parker.NotifyLook(deadline, look, fn)
	if !ok {
		return nil, false
	}
	return n, true
}
