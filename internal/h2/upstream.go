package h2

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

var (
	errHeadTooLarge  = errors.New("h2: upstream response head too large")
	errUnexpected101 = errors.New("h2: upstream switched protocols without an upgrade request")
	errBadUpgrade    = errors.New("h2: upstream answered the WebSocket handshake wrongly")
	errCoding        = errors.New("h2: upstream used a transfer coding other than chunked")
	// errUpstreamClosed is an origin closing the connection before a
	// byte of its response: a pooled connection it had given up on, so
	// the request may be sent again.
	errUpstreamClosed = fmt.Errorf("h2: upstream closed the connection without a response: %w", io.EOF)
)

// answerLocal answers the stream with status, the extra fields and a
// one-line text body. A request other than CONNECT is read (and dropped)
// to its end first, for at most the write timeout; a client still
// sending after the answer is asked to stop.
func (s *stream) answerLocal(status int, reason string, extra ...hpack.HeaderField) {
	if s.req.method == "CONNECT" {
		s.c.mu.Lock()
		s.discardLocked()
		s.c.mu.Unlock()
	} else {
		s.waitRemote()
	}
	s.answer(status, reason, extra...)
}

// answer sends a complete answer with the extra fields and a one-line
// text body, then asks a client still sending to stop.
func (s *stream) answer(status int, reason string, extra ...hpack.HeaderField) {
	body := "rustle: " + reason + "\n"
	fields := []hpack.HeaderField{
		{Name: ":status", Value: strconv.Itoa(status)},
		{Name: "content-type", Value: "text/plain; charset=utf-8"},
		{Name: "content-length", Value: strconv.Itoa(len(body))},
	}
	s.answered(status)
	fields = append(fields, extra...)
	if s.req.method == "HEAD" {
		s.sendHeaders(fields, true)
	} else if s.sendHeaders(fields, false) == nil {
		s.sendData([]byte(body), true)
	}
	s.stopBody()
}

// answerError answers a request whose upstream exchange failed before
// any of the response was sent.
func (s *stream) answerError(err error, target string) {
	switch {
	case errors.Is(err, errStreamGone):
		return
	case errors.Is(err, errHeadTooLarge), errors.Is(err, errUnexpected101), errors.Is(err, errBadUpgrade), errors.Is(err, errCoding):
		s.grant.SetReason(accesslog.ReasonUpstreamFailed)
		s.answer(502, strings.TrimPrefix(err.Error(), "h2: "))
	default:
		// A refused destination was logged by the grant's Dial.
		status, reason, text := gate.UpstreamFailure(err, target)
		if reason != "" {
			s.grant.SetReason(reason)
		}
		s.answer(status, text)
	}
}

// dial connects to addr under the stream's grant; a reset of the stream
// cancels it. The connection is TCP for a tunnel (tcpOnly), and may be
// TLS to an https parent for a forwarded request.
func (s *stream) dial(addr string, tcpOnly bool) (net.Conn, error) {
	c := s.c
	c.mu.Lock()
	if s.reset {
		c.mu.Unlock()
		return nil, errStreamGone
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	c.mu.Unlock()
	var up net.Conn
	var err error
	if tcpOnly {
		var tc *net.TCPConn
		if tc, err = s.grant.Dial(ctx, addr); err == nil {
			up = tc
		}
	} else {
		up, err = s.grant.DialConn(ctx, addr)
	}
	c.mu.Lock()
	s.cancel = nil
	gone := s.reset
	c.mu.Unlock()
	cancel()
	if err != nil && gone {
		return nil, errStreamGone
	}
	return up, err
}

// attach makes up the stream's upstream, which a reset interrupts. It
// closes up and reports false when the stream is gone already.
func (s *stream) attach(up net.Conn) bool {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.reset {
		up.Close()
		return false
	}
	s.up = up
	return true
}

// detach ends the stream's use of up: back to the pool as key when reuse
// is set and the stream was not reset, closed otherwise.
func (s *stream) detach(up net.Conn, key string, reuse bool) {
	c := s.c
	pool := s.grant.Pool()
	c.mu.Lock()
	s.up = nil
	reuse = reuse && !s.reset && pool != nil && !s.grant.ViaParent()
	c.mu.Unlock()
	if !reuse {
		up.Close()
		return
	}
	up.SetDeadline(time.Time{})
	pool.Put(key, s.grant.PoolOwner(), up) // the grant that got or dialed it
}

// upstream returns a pooled connection to key or dials one, and reports
// whether it was pooled. canRetry says whether the request could be sent
// again should a pooled connection turn out dead (see gate.Grant.Admits).
func (s *stream) upstream(key string, fresh, canRetry bool) (net.Conn, bool, error) {
	if p := s.grant.Pool(); p != nil && !fresh {
		owner := s.grant.PoolOwner()
		if up := p.Get([]byte(key), owner); up != nil {
			// A pooled connection may have been made under another
			// request's rule: the grant checks its address.
			if s.grant.Admits(up, owner, canRetry) {
				return up, true, nil
			}
			up.Close()
		}
	}
	up, err := s.dial(key, false)
	return up, false, err
}

// forward serves a request for an HTTP/1.1 origin: the request head and
// body go out on a pooled or new upstream connection, the response comes
// back as HEADERS and DATA, and the upstream goes back to the pool when
// both messages were complete.
func (s *stream) forward() {
	c := s.c
	r := &s.req
	dest := string(appendHostPort(make([]byte, 0, len(r.host)+8), r.host, r.port, r.ipv6))
	hasBody := !r.endStream
	opts := headOptions{forwarded: c.cfg.Forwarded, via: c.cfg.Via, clientAddr: c.clientAddr,
		limitHops: s.limitHops, maxForwards: s.maxFwd, self: c.sess.Policy().Instance}
	// key is the pool key: the destination, or an HTTP parent's key when
	// the request goes to one in absolute form.
	key, ok := s.forwardParent(dest, &opts)
	if !ok {
		return
	}
	o := getOrigin()
	defer putOrigin(o)
	// The head is built in o's buffer, which the pool keeps.
	head, chunked := appendRequestHead(o.reqHead[:0], r, hasBody, &opts, "")
	defer func() { o.reqHead = head[:0] }()
	canRetry := !hasBody && gate.Idempotent(r.method)

	var up net.Conn // TCP, or TLS to an https parent
	var err error
	var written time.Time // when the head went upstream
	fresh := false
	for {
		var reused bool
		up, reused, err = s.upstream(key, fresh, canRetry)
		if err != nil {
			// A parent that failed to connect: once more through the
			// route's next one (see gate.Grant.RetryParent).
			if canRetry && s.grant.RetryParent(dest, err) {
				if key, ok = s.forwardParent(dest, &opts); !ok {
					return
				}
				head, chunked = appendRequestHead(head[:0], r, hasBody, &opts, "")
				continue
			}
			s.answerError(err, upstreamName(key, &opts))
			return
		}
		if !s.attach(up) {
			return
		}
		o.attach(up)
		up.SetWriteDeadline(gate.Deadline(time.Now(), c.cfg.WriteTimeout))
		_, err = up.Write(head)
		written = time.Now()
		if err == nil && !hasBody {
			err = s.readResponse(o, r.method, false)
			if err == nil && canRetry && s.grant.Parent() != nil {
				// Nothing of the answer goes to the client before its
				// small body is in, so that a parent dying in the
				// middle of it can still be retried.
				h := &o.head
				if !noBody(h, r.method) && !h.Chunked && !h.TEOther {
					err = o.up.ReadRest(h.ContentLength, c.cfg.WriteTimeout)
				}
			}
		}
		if err == nil || !canRetry || !isDeadConn(err) || o.interim {
			break
		}
		s.detach(up, key, false)
		if reused && !fresh {
			fresh = true // a pooled connection the origin had closed
			continue
		}
		if reused || !s.grant.RetryParent(dest, err) {
			// Answered below; the upstream is closed already.
			s.answerError(err, upstreamName(key, &opts))
			return
		}
		// The route's parent closed a fresh connection before a byte
		// of the response: once more through its next parent.
		if key, ok = s.forwardParent(dest, &opts); !ok {
			return
		}
		head, chunked = appendRequestHead(head[:0], r, hasBody, &opts, "")
	}
	bodyDone := noBodyDone // the body's result: none without a body
	cut := false           // the request body failed on the client's side before the head was taken
	if err == nil && hasBody {
		// The response-header timeout starts once the body is sent; an
		// early answer is read at once, and a body that fails on the
		// client's side ends the wait (see http1.ResponseWait).
		o.rw.Start(&o.up, c.cfg.ResponseHeaderTimeout)
		o.bodyPending = true
		c.mu.Lock()
		c.wg.Add(1)
		c.mu.Unlock()
		done := make(chan error, 1)
		bodyDone = done
		go s.sendBody(o, up, chunked, done)
		err = s.readResponse(o, r.method, false)
		o.bodyPending = false
		c.mu.Lock()
		if cut = o.rw.WasCut(); !cut && err == nil {
			s.finalHead = true // from now on, a stalled body resets s
		}
		c.mu.Unlock()
	}
	if cut {
		s.detach(up, key, false)
		if berr := <-bodyDone; errors.Is(berr, errBodyStalled) {
			s.grant.SetReason(accesslog.ReasonBodyTimeout)
			s.answer(408, "request body not received in time")
		}
		return
	}
	if err != nil {
		s.detach(up, key, false)
		s.dropBody()
		<-bodyDone
		s.answerError(err, upstreamName(key, &opts))
		return
	}
	s.grant.FirstByte(written)
	keep := o.keepAlive(r.method)
	complete := s.relayResponse(o, r.method)
	if complete {
		s.stopBody()
	}
	bodyErr := s.bodyResult(bodyDone, up)
	if errors.Is(bodyErr, errBodyStalled) {
		s.grant.SetReason(accesslog.ReasonBodyTimeout) // the stream was reset
	}
	reuse := complete && bodyErr == nil && keep && len(o.up.Buffered()) == 0
	s.detach(up, key, reuse)
}

// noBodyDone is the body result of a request without a body: closed, it
// answers nil at once to any number of receives.
var noBodyDone = func() chan error {
	ch := make(chan error)
	close(ch)
	return ch
}()

// forwardParent asks the grant whether the request to dest goes to an
// HTTP parent in absolute form (see gate.Grant.ForwardParent), notes the
// parent in o, and returns the pool key: dest, or the parent's key. On a
// refusal it has answered the stream and reports false.
func (s *stream) forwardParent(dest string, o *headOptions) (string, bool) {
	o.parent = nil
	if s.grant.Route().Direct() {
		return dest, true
	}
	p, err := s.grant.ForwardParent([]byte(dest))
	if err != nil {
		s.answerError(err, dest)
		return "", false
	}
	if p == nil {
		return dest, true
	}
	o.parent = p
	return string(gate.ForwardKey(make([]byte, 0, 64), p)), true
}

// upstreamName is how an answer names the upstream at key: the
// destination, or the parent (never its address) the request went to.
func upstreamName(key string, o *headOptions) string {
	if o.parent != nil {
		return "through parent proxy " + o.parent.Name()
	}
	return key
}

// errBodyCut is the request body's error when the origin answered
// without taking all of it.
var errBodyCut = errors.New("h2: origin answered before taking the whole request body")

// bodyResult waits for the request body's writer. When the origin has
// answered without taking the whole body, the writer is given a moment
// and then cut off.
func (s *stream) bodyResult(done <-chan error, up net.Conn) error {
	select {
	case err := <-done:
		return err
	default:
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
	}
	up.SetWriteDeadline(time.Unix(1, 0))
	<-done
	return errBodyCut
}

// errBodyStalled is the request body's error when the client sent none
// of it for the write timeout.
var errBodyStalled = errors.New("h2: client sent no request body for the write timeout")

// errBodyUnwanted is the request body's error when the exchange failed
// upstream while the body was awaited.
var errBodyUnwanted = errors.New("h2: request body no longer wanted")

// dropBody ends the request body's writer while it waits for the
// client: the exchange failed and the body will not be sent.
func (s *stream) dropBody() {
	c := s.c
	c.mu.Lock()
	s.discardLocked()
	s.cond.Broadcast()
	c.mu.Unlock()
}

// sendBody writes the request body from the stream's input queue to up,
// chunked when its length is unknown, without the client's trailers. done
// gets nil when the whole body was written. It tells o.rw how the body
// ended: sent (or failed upstream: the origin may answer), or failed on
// the client's side (a reset, a stall). A stall after the response head
// was taken resets the stream, ending the response's relay.
func (s *stream) sendBody(o *origin, up net.Conn, chunked bool, done chan<- error) {
	c := s.c
	defer c.wg.Done()
	err := s.writeBody(up, chunked)
	switch {
	case errors.Is(err, errBodyStalled):
		o.rw.Cut()
		c.mu.Lock()
		if s.finalHead {
			c.resetLocked(s, http2.ErrCodeCancel, true)
		}
		c.mu.Unlock()
	case errors.Is(err, errStreamGone):
		o.rw.Cut()
	default:
		o.rw.BodySent()
	}
	done <- err
}

// writeBody writes the request body to up. It waits for the client's
// DATA for at most the write timeout at a time.
func (s *stream) writeBody(up net.Conn, chunked bool) error {
	c := s.c
	var hdr [16]byte
	c.mu.Lock()
	for {
		waiting := false       // for the client, since deadline was set
		var deadline time.Time // of the wait for the client; zero: no limit
		for s.in.n == 0 && !s.remoteDone && !s.reset && !s.discard {
			if !waiting {
				waiting, deadline = true, gate.Deadline(time.Now(), c.cfg.WriteTimeout)
			}
			if !s.waitTimerLocked(&s.bodyTimer, deadline) {
				s.discardLocked()
				c.mu.Unlock()
				return errBodyStalled
			}
		}
		if s.reset {
			c.mu.Unlock()
			return errStreamGone
		}
		if s.in.n == 0 && !s.remoteDone {
			c.mu.Unlock()
			return errBodyUnwanted
		}
		if s.in.n == 0 {
			c.mu.Unlock()
			if !chunked {
				return nil
			}
			// The client's trailers are dropped, as on HTTP/1.1 (RFC 9110
			// §6.5.1): none can carry a framing or hop-by-hop field to
			// the origin.
			up.SetWriteDeadline(gate.Deadline(time.Now(), c.cfg.WriteTimeout))
			_, err := up.Write([]byte("0\r\n\r\n"))
			return err
		}
		p := s.in.front()
		s.pumping = true
		c.mu.Unlock()
		s.pace(len(p))
		up.SetWriteDeadline(gate.Deadline(time.Now(), c.cfg.WriteTimeout))
		var err error
		var n int // bytes of p written
		if chunked {
			h := strconv.AppendInt(hdr[:0], int64(len(p)), 16)
			h = append(h, "\r\n"...)
			bufs := net.Buffers{h, p, []byte("\r\n")}
			var w int64
			w, err = bufs.WriteTo(up)
			n = int(min(max(w-int64(len(h)), 0), int64(len(p))))
		} else {
			n, err = up.Write(p)
		}
		c.mu.Lock()
		s.pumping = false
		s.countUpLocked(n)
		if s.reset {
			c.dequeuedLocked(int64(s.in.n))
			s.in.drop()
			c.mu.Unlock()
			return errStreamGone
		}
		s.consumedLocked(len(p))
		if err != nil {
			s.discardLocked()
			c.kickLocked()
			c.mu.Unlock()
			return err
		}
		c.flushLocked()
	}
}

// isDeadConn reports whether err says a pooled connection had been
// closed by the origin before the request reached it.
func isDeadConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// connect serves CONNECT (a TCP tunnel) and extended CONNECT for
// WebSocket (an HTTP/1.1 Upgrade handshake with the origin, then a
// tunnel): dial, answer 200, and relay until both directions end. It
// reports whether it handed the stream to a relay goroutine, which then
// ends the worker.
func (s *stream) connect() bool {
	c := s.c
	r := &s.req
	key := string(appendHostPort(make([]byte, 0, len(r.host)+8), r.host, r.port, r.ipv6))
	upc, err := s.dial(key, true)
	if err != nil {
		s.answerError(err, key)
		return false
	}
	up := upc.(*net.TCPConn) // a tunnel's relay waits on its socket
	if !s.attach(up) {
		return false
	}
	fields := []hpack.HeaderField{{Name: ":status", Value: "200"}}
	var pending []byte
	if r.kind == kindWebSocket {
		var ok bool
		if fields, pending, ok = s.upgrade(up, key); !ok {
			s.detach(up, key, false)
			return false
		}
	}
	if s.sendHeaders(fields, false) != nil {
		s.detach(up, key, false)
		return false
	}
	s.answered(200)
	s.relaying = true
	s.releaseFields() // the tunnel does not need them; an idle one keeps less
	c.mu.Lock()
	if s.reset {
		c.mu.Unlock()
		s.detach(up, key, false)
		return false
	}
	if err := s.upw.init(up); err == nil {
		s.tunnel = true
		s.touch()
		s.kickUpLocked()
		c.idledLocked()
	}
	c.mu.Unlock()
	if !s.tunnel {
		s.resetStream(http2.ErrCodeInternal)
		s.detach(up, key, false)
		return false
	}
	s.grant.TunnelOpened()
	if len(pending) > 0 {
		if s.sendData(pending, false) != nil {
			s.detach(up, key, false)
			return false
		}
	}
	// The tunnel goes on on a fresh goroutine, whose stack, parked with
	// few frames on it, the garbage collector shrinks to 4 KiB; this
	// one's has grown with the dial and the handshake.
	go s.relay(up, nil, false, nil)
	return true
}

// relay runs an established tunnel to its end, as the stream's worker;
// p is the upstream's Parker, nil on the tunnel's first goroutine.
// waited says that it resumes a wait for the upstream (Parker.Notify),
// which ended with werr.
func (s *stream) relay(up *net.TCPConn, p *tunnel.Parker, waited bool, werr error) {
	if !s.pumpDown(up, p, waited, werr) {
		return // going on on a fresh goroutine
	}
	s.finishTunnel()
	s.detach(up, "", false)
	s.finish()
	s.exit()
}

// upgrade performs the WebSocket handshake with the origin for an
// extended CONNECT (RFC 8441 §5) and returns the fields of the 200 answer
// and the bytes that came behind the origin's 101. On failure it has
// answered the client.
func (s *stream) upgrade(up *net.TCPConn, key string) ([]hpack.HeaderField, []byte, bool) {
	c := s.c
	var nonce [16]byte
	rand.Read(nonce[:])
	wsKey := base64.StdEncoding.EncodeToString(nonce[:])
	opts := headOptions{forwarded: c.cfg.Forwarded, via: c.cfg.Via, clientAddr: c.clientAddr}
	head, _ := appendRequestHead(make([]byte, 0, 512), &s.req, false, &opts, wsKey)
	up.SetWriteDeadline(gate.Deadline(time.Now(), c.cfg.WriteTimeout))
	if _, err := up.Write(head); err != nil {
		s.answerError(err, key)
		return nil, nil, false
	}
	o := getOrigin()
	defer putOrigin(o)
	o.attach(up)
	if err := s.readResponse(o, "GET", true); err != nil {
		s.answerError(err, key)
		return nil, nil, false
	}
	h := &o.head
	if h.Status != 101 {
		// Refused: the origin's answer goes to the client as it is.
		if s.relayResponse(o, "GET") {
			s.stopBody()
		}
		return nil, nil, false
	}
	sum := sha1.Sum([]byte(wsKey + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	accept := h.FieldIndex("sec-websocket-accept")
	if !upgradesToWebSocket(h) || accept < 0 ||
		string(h.Fields[accept].Value.Of(h.Buf)) != base64.StdEncoding.EncodeToString(sum[:]) {
		s.answerError(errBadUpgrade, key)
		return nil, nil, false
	}
	fields := responseFields(make([]hpack.HeaderField, 0, 8), 200, h, c.cfg.Via, "sec-websocket-accept", nil)
	var pending []byte
	if p := o.up.Buffered(); len(p) > 0 {
		pending = append([]byte(nil), p...)
	}
	return fields, pending, true
}

// pumpDown relays upstream-to-client bytes of a tunnel until the
// upstream ends its stream (then END_STREAM) or something fails (then
// RST_STREAM), and reports true. While idle it waits on the upstream
// socket's readiness (p, made when nil), holding no buffer, and it reads
// no more than the client's windows allow.
//
// Where the platform has it (Linux), the wait holds no goroutine: the
// pump registers it with Parker.Notify and reports false, and the
// tunnel resumes on a fresh goroutine (relay, waited set, werr the
// wait's end) once the upstream is readable, the idle deadline has
// passed or a reset has woken it (resetLocked). Elsewhere it waits on a
// goroutine, and bytes it has sent grew that goroutine's stack (a TLS
// record written), which parked would stay at 4 KiB: before it waits
// again it hands the tunnel to a fresh goroutine (relay) and reports
// false, so that an idle tunnel waits on a 2 KiB stack.
func (s *stream) pumpDown(up *net.TCPConn, p *tunnel.Parker, waited bool, werr error) bool {
	c := s.c
	idle := c.cfg.TunnelIdleTimeout
	if p == nil {
		rc, err := up.SyscallConn()
		if err != nil {
			s.resetStream(http2.ErrCodeInternal)
			return true
		}
		p = tunnel.NewParker(rc)
	}
	if waited {
		c.mu.Lock()
		s.upWait = nil
		c.mu.Unlock()
	}
	for sent := false; ; waited = false {
		n, err := s.sendable(bufSize)
		if err != nil {
			return true
		}
		if !waited {
			if ok, err := p.Ready(); ok {
				// More to read (or the upstream's end): no wait.
				waited, werr = true, err
			} else if stop, ok := s.notify(up, p); ok {
				return false
			} else if stop {
				return true
			}
		}
		if !waited {
			if sent {
				go s.relay(up, p, false, nil)
				return false
			}
			if idle > 0 {
				up.SetReadDeadline(s.idleDeadline())
			}
			werr = p.Wait()
		}
		if werr != nil {
			if s.gone() {
				return true
			}
			if errors.Is(werr, tunnel.ErrWoken) {
				continue
			}
			if errors.Is(werr, os.ErrDeadlineExceeded) {
				switch {
				case idle <= 0: // no limit: a deadline from elsewhere, not ours
					up.SetReadDeadline(time.Time{})
				case time.Since(c.s.start)-time.Duration(s.last.Load()) >= idle:
					s.resetStream(http2.ErrCodeCancel)
					return true
				}
				continue
			}
			s.resetStream(http2.ErrCodeConnect)
			return true
		}
		buf := bufPool.Get().(*[bufSize]byte)
		m, rerr := up.Read(buf[:n])
		if m > 0 {
			s.touch()
			s.pace(m)
			if s.sendData(buf[:m], false) != nil {
				bufPool.Put(buf)
				return true
			}
			sent = true
		}
		bufPool.Put(buf)
		switch {
		case rerr == nil:
		case rerr == io.EOF:
			s.sendData(nil, true)
			return true
		case s.gone():
			return true
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			// The idle check above decides.
		default:
			s.resetStream(http2.ErrCodeConnect)
			return true
		}
	}
}

// notify registers the wait for the upstream with Parker.Notify, to
// resume in relay. It reports ok when the wait is registered (the caller
// returns, its goroutine ends), and stop without ok when the stream has
// been reset (the caller ends the tunnel); neither where the platform
// has no such wait.
func (s *stream) notify(up *net.TCPConn, p *tunnel.Parker) (stop, ok bool) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if s.reset {
		return true, false
	}
	w, ok := p.Notify(s.idleDeadline(), func(err error) { s.relay(up, p, true, err) })
	if ok {
		s.upWait = w
	}
	return ok, ok
}

// gone reports whether the stream was reset.
func (s *stream) gone() bool {
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	return s.reset
}

// finishTunnel waits, after the upstream-to-client direction has ended,
// for the other direction to end too: the client's END_STREAM, its bytes
// written and the upstream's write half shut down. A tunnel idle for the
// idle timeout meanwhile is reset.
func (s *stream) finishTunnel() {
	c := s.c
	if idle := c.cfg.TunnelIdleTimeout; idle > 0 { // 0: no limit
		var t *time.Timer
		t = time.AfterFunc(idle, func() {
			if left := idle - (time.Since(c.s.start) - time.Duration(s.last.Load())); left > 0 {
				t.Reset(left)
				return
			}
			s.resetStream(http2.ErrCodeCancel)
		})
		defer t.Stop()
	}
	c.mu.Lock()
	for !s.reset && !(s.remoteDone && s.upShut && !s.pumping) {
		s.cond.Wait()
	}
	if !s.reset && !s.localDone {
		// The upstream-to-client direction failed without a reset.
		c.resetLocked(s, http2.ErrCodeInternal, true)
	}
	c.mu.Unlock()
}
