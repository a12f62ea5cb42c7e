package h2

import (
	"errors"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// intercept hands a CONNECT stream whose tunnel is to be intercepted
// (gate.Grant.Intercepting), answered already, to the policy's
// Interceptor as a net.Conn over the stream (streamConn): its ClientHello
// is still queued, and is read first. It reports whether the
// intercepted connection goes on without the calling goroutine: its
// front-end waits for an idle client with no goroutine (streamConn's
// Notify), and the stream's worker ends (finish, exit) once it has
// ended; false when it has ended already.
//
// While its front-end is parked (parkedLocked) the stream counts as a
// tunnel for the connection's reader (see conn.idleLocked): with no
// other stream open it waits for the client with no goroutine either,
// and delivers the DATA that comes to the stream, whose wait it ends
// (wakeInterceptLocked). While the front-end serves, or waits on its
// goroutine for the next request (httpproxy's parkAfter), the reader
// keeps its worker: a client sending its requests one after another
// costs no wait registered and goroutine started by the reader for
// each.
func (s *stream) intercept() bool {
	c := s.c
	sc := &streamConn{s: s, local: c.nc.LocalAddr(), remote: c.nc.RemoteAddr()}
	return s.grant.InterceptThen(sc, nil, s.interceptEnded)
}

// parkedLocked reports whether the stream is an intercepted tunnel
// whose front-end waits for the client with no goroutine.
func (s *stream) parkedLocked() bool {
	return s.icWait != nil && !s.icWait.w.Fired()
}

// interceptEnded ends the stream's worker once the intercepted
// connection that went on without it has ended.
func (s *stream) interceptEnded() {
	s.finish()
	s.exit()
}

// wakeInterceptLocked ends the wait of an intercepted stream's
// front-end for the client (streamConn.Notify), if any: the client has
// sent, ended its side, or the stream was reset.
func (s *stream) wakeInterceptLocked() {
	if n := s.icWait; n != nil {
		s.icWait = nil
		n.w.Fire(nil)
	}
}

// streamConn is a stream as the client's side of an intercepted tunnel:
// its reads are the client's DATA, credited as they are read, until
// END_STREAM (io.EOF) or a reset; its writes go out as DATA within the
// flow-control windows; Close ends the stream (END_STREAM, and
// RST_STREAM NO_ERROR when the client still sends). Reads honour a
// deadline; writes are bounded by the connection's write timeout
// (sendData).
//
// Its reads never go past the end of the TLS record they read (the
// tunnel is the client's TLS to the origin, from its first byte): the
// record's 5-byte header, then its body. crypto/tls then holds none of
// the client's bytes between two records, and a front-end idle between
// requests may wait for the next with its Waiter (tunnel.WaiterConn:
// Ready, WaitRead, Notify) while the bytes not yet read stay in the
// stream's queue, which the Waiter sees. The Waiter is a tunnel.Looker:
// records that make no plaintext (a KeyUpdate, an empty record) leave
// a front-end about to park, or parked, with no goroutine and no buffer
// (ReadNow, NotifyLook).
type streamConn struct {
	s             *stream
	local, remote net.Addr
	rdl           time.Time   // the read deadline; guarded by the connection's mu
	timer         *time.Timer // waits for rdl

	// bounds follows the TLS records being read; owned by the reader.
	bounds tunnel.RecordBounds
	// now makes Read answer tunnel.ErrWouldBlock instead of waiting
	// for the client's bytes (ReadNow); owned by the reader.
	now bool
}

func (sc *streamConn) Read(p []byte) (int, error) {
	if lim := sc.bounds.Limit(); len(p) > lim {
		p = p[:lim]
	}
	s := sc.s
	c := s.c
	c.mu.Lock()
	for s.in.n == 0 && !s.remoteDone && !s.reset {
		if sc.now {
			c.mu.Unlock()
			return 0, tunnel.ErrWouldBlock
		}
		if !sc.rdl.IsZero() && !time.Now().Before(sc.rdl) {
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		}
		s.waitTimerLocked(&sc.timer, sc.rdl)
	}
	n, err := streamReader{s}.readLocked(p)
	c.mu.Unlock()
	sc.bounds.Advance(p[:n])
	return n, err
}

func (sc *streamConn) Write(p []byte) (int, error) {
	if err := sc.s.sendData(p, false); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close ends the stream: END_STREAM after what was written, and, when
// the client has not ended its side, RST_STREAM NO_ERROR to stop it.
func (sc *streamConn) Close() error {
	s := sc.s
	c := s.c
	c.mu.Lock()
	done := s.reset || s.localDone
	c.mu.Unlock()
	if !done {
		s.sendData(nil, true)
	}
	s.resetStream(http2.ErrCodeNo)
	c.mu.Lock()
	if sc.timer != nil {
		sc.timer.Stop()
	}
	s.wakeInterceptLocked()
	c.mu.Unlock()
	return nil
}

func (sc *streamConn) LocalAddr() net.Addr  { return sc.local }
func (sc *streamConn) RemoteAddr() net.Addr { return sc.remote }

// SetDeadline sets the read deadline; writes have the connection's
// write timeout.
func (sc *streamConn) SetDeadline(t time.Time) error { return sc.SetReadDeadline(t) }

// SetReadDeadline sets the deadline of reads, waking one in progress to
// look at it.
func (sc *streamConn) SetReadDeadline(t time.Time) error {
	c := sc.s.c
	c.mu.Lock()
	sc.rdl = t
	sc.s.cond.Broadcast()
	c.mu.Unlock()
	return nil
}

// SetWriteDeadline does nothing: writes are bounded by the connection's
// write timeout.
func (sc *streamConn) SetWriteDeadline(time.Time) error { return nil }

// Waiter returns the stream's wait for the client's bytes: the
// streamConn itself (tunnel.WaiterConn).
func (sc *streamConn) Waiter() (tunnel.Waiter, bool) { return sc, true }

// readyLocked reports whether a read would not wait: bytes are queued,
// or the stream has ended or was reset.
func (sc *streamConn) readyLocked() bool {
	s := sc.s
	return s.in.n > 0 || s.remoteDone || s.reset
}

// Ready reports, without waiting, whether the client's bytes are
// queued, or the stream has ended or was reset (the read says which).
func (sc *streamConn) Ready() (bool, error) {
	c := sc.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	return sc.readyLocked(), nil
}

// WaitRead waits until Ready, or until the read deadline has passed
// (os.ErrDeadlineExceeded); nothing is read.
func (sc *streamConn) WaitRead() error {
	s := sc.s
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for !sc.readyLocked() {
		if !sc.rdl.IsZero() && !time.Now().Before(sc.rdl) {
			return os.ErrDeadlineExceeded
		}
		s.waitTimerLocked(&sc.timer, sc.rdl)
	}
	return nil
}

// Wait is WaitRead, for the HTTP/2 front-end inside the tunnel
// (clientWaiter).
func (sc *streamConn) Wait() error { return sc.WaitRead() }

// ReadNow is tunnel.Looker's: r, the TLS connection over the stream,
// read without waiting for the client's bytes; tunnel.ErrNoPlaintext
// when what the stream had queued made no plaintext for r's reader (a
// KeyUpdate, which crypto/tls answers if asked to, an empty record) or
// was a record cut short, which crypto/tls keeps for the next read.
// Only the goroutine that reads the stream calls it.
func (sc *streamConn) ReadNow(r io.Reader, b []byte) (int, error) {
	sc.now = true
	n, err := r.Read(b)
	sc.now = false
	if n == 0 && errors.Is(err, tunnel.ErrWouldBlock) {
		return 0, tunnel.ErrNoPlaintext
	}
	return n, err
}

// Notify calls fn, on a goroutine of its own, once Ready (nil), with
// os.ErrDeadlineExceeded once deadline has passed (zero: never), or with
// tunnel.ErrWoken once woken; whichever comes first, and only once. No
// goroutine waits meanwhile: the connection's reader ends the wait as it
// delivers to the stream (wakeInterceptLocked), and a timer waits for the
// deadline.
func (sc *streamConn) Notify(deadline time.Time, fn func(error)) (tunnel.Waker, bool) {
	return sc.NotifyLook(deadline, nil, fn)
}

// NotifyLook is tunnel.Looker's: Notify, whose wait, once the client's
// bytes come, calls look on a goroutine of its own, and fn (nil) only
// if look reports true; when it reports false (it read records with no
// plaintext, see ReadNow) the wait goes on, its deadline too, with no
// goroutine. A deadline or Wake that comes while look runs is what fn
// gets once it returns.
func (sc *streamConn) NotifyLook(deadline time.Time, look func() bool, fn func(error)) (tunnel.Waker, bool) {
	s := sc.s
	c := s.c
	n := &streamNotice{sc: sc, look: look}
	n.w.Init(n, look != nil, fn)
	if look != nil {
		n.w.ReuseWorker() // the connection's reader serves on after its look
	}
	c.mu.Lock()
	if sc.readyLocked() {
		c.mu.Unlock()
		n.w.Fire(nil)
		return n, true
	}
	s.icWait = n
	c.idledLocked() // a reader waiting on its worker may leave the wait to none
	n.w.SetDeadline(deadline)
	c.mu.Unlock()
	return n, true
}

// streamNotice is one wait of streamConn.Notify or NotifyLook, its Wait
// (locking the connection's mu before the Wait's own) owned by it: a
// NotifyLook's looks with look, and waits on the stream again
// (s.icWait) when look found nothing to read.
type streamNotice struct {
	w    tunnel.Wait
	sc   *streamConn
	look func() bool // NotifyLook's; nil for Notify's
}

// Wake ends the wait if fn has not been called yet: fn gets
// tunnel.ErrWoken.
func (n *streamNotice) Wake() { n.w.Wake() }

// Lock takes the connection's mu, which the Wait takes before its own.
func (n *streamNotice) Lock() { n.sc.s.c.mu.Lock() }

// Unlock releases the connection's mu.
func (n *streamNotice) Unlock() { n.sc.s.c.mu.Unlock() }

// Look is NotifyLook's look, once the client's bytes have come.
func (n *streamNotice) Look() bool { return n.look() }

// Leave does nothing: the reader takes the wait off the stream as it
// fires it (wakeInterceptLocked); one that a deadline or Wake ended
// stays as s.icWait, fired, which is not parked (parkedLocked).
func (n *streamNotice) Leave() {}

// Rearm waits on the stream again after a look that found nothing to
// read, the front-end staying parked with no buffer; again when more
// bytes came while look ran: they are looked at first. The
// connection's mu is held.
func (n *streamNotice) Rearm() (again bool, err error) {
	if n.sc.readyLocked() {
		return true, nil
	}
	s := n.sc.s
	s.icWait = n
	s.c.idledLocked()
	return false, nil
}
