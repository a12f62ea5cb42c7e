package h2

import (
	"net"
	"os"
	"time"

	"golang.org/x/net/http2"
)

// intercept hands a CONNECT stream whose tunnel is to be intercepted
// (gate.Grant.Intercepting), answered already, to the policy's
// Interceptor as a net.Conn over the stream (streamConn): its ClientHello
// is still queued, and is read first. It returns once the intercepted
// connection has ended and the stream with it.
func (s *stream) intercept() {
	c := s.c
	sc := &streamConn{s: s, local: c.nc.LocalAddr(), remote: c.nc.RemoteAddr()}
	s.grant.Intercept(sc, nil)
}

// streamConn is a stream as the client's side of an intercepted tunnel:
// its reads are the client's DATA, credited as they are read, until
// END_STREAM (io.EOF) or a reset; its writes go out as DATA within the
// flow-control windows; Close ends the stream (END_STREAM, and
// RST_STREAM NO_ERROR when the client still sends). Reads honour a
// deadline; writes are bounded by the connection's write timeout
// (sendData).
type streamConn struct {
	s             *stream
	local, remote net.Addr
	rdl           time.Time   // the read deadline; guarded by the connection's mu
	timer         *time.Timer // waits for rdl
}

func (sc *streamConn) Read(p []byte) (int, error) {
	s := sc.s
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for s.in.n == 0 && !s.remoteDone && !s.reset {
		if !sc.rdl.IsZero() && !time.Now().Before(sc.rdl) {
			return 0, os.ErrDeadlineExceeded
		}
		s.waitTimerLocked(&sc.timer, sc.rdl)
	}
	return streamReader{s}.readLocked(p)
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
