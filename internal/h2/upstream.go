package h2

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/sni"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

var errBadUpgrade = errors.New("h2: upstream answered the WebSocket handshake wrongly")

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

// answerError answers a request whose upstream failed before any of
// the response was sent (see origin.Failure): x is the exchange of a
// forwarded request, nil for a tunnel to target. A stream already reset
// gets no answer.
func (s *stream) answerError(err error, x *origin.Exchange, target string) {
	if errors.Is(err, errStreamGone) || errors.Is(err, origin.ErrClientGone) || s.gone() {
		return
	}
	if x != nil && x.HTTP11Required(err) {
		// The origin reset its stream asking for HTTP/1.1: so is the
		// client asked.
		s.resetStream(http2.ErrCodeHTTP11Required)
		return
	}
	var status int
	var reason, text string
	switch {
	case errors.Is(err, errBadUpgrade):
		status, reason, text = 502, accesslog.ReasonUpstreamFailed, strings.TrimPrefix(err.Error(), "h2: ")
	case x != nil:
		status, reason, text = x.Failure(err)
	default:
		status, reason, text = origin.Failure(err, target)
	}
	if reason != "" {
		s.grant.SetReason(reason)
	}
	s.answer(status, text)
}

// dial connects to the request's destination under the stream's grant;
// a reset of the stream cancels it. The connection is TCP for a tunnel (tcpOnly), and may be
// TLS to an https parent for a forwarded request.
func (s *stream) dial(tcpOnly bool) (net.Conn, error) {
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
		if tc, err = s.grant.Dial(ctx); err == nil {
			up = tc
		}
	} else {
		up, err = s.grant.DialConn(ctx)
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

// detach ends the stream's use of up, a tunnel's upstream, and closes it.
func (s *stream) detach(up net.Conn) {
	c := s.c
	c.mu.Lock()
	s.up = nil
	c.mu.Unlock()
	up.Close()
}

// forward serves a request for an HTTP/1.1 origin through the exchange
// every HTTP front-end shares (origin.Exchange): the request head and
// body go out on a kept, pooled or new upstream connection, the response
// comes back as HEADERS and DATA, and the upstream goes back to the pool
// when both messages were complete.
func (s *stream) forward() {
	c := s.c
	r := &s.req
	e := s.getExchange()
	defer putExchange(e)
	x := &e.x
	if err := x.Begin(c.cfg.Origin, &s.grant, r.method, origin.Plain); err != nil {
		s.answerError(err, x, "")
		return
	}
	hasBody := !r.endStream
	_, err := x.Send(e, origin.Body{Done: !hasBody, Empty: !hasBody})
	if err != nil {
		s.answerError(err, x, "")
		return
	}
	bodyDone := noBodyDone // the body's result: none without a body
	if hasBody {
		var cut bool
		if bodyDone, cut, err = s.streamBody(e); cut {
			s.release(x, false)
			if berr := <-bodyDone; errors.Is(berr, errBodyStalled) {
				s.grant.SetReason(accesslog.ReasonBodyTimeout)
				s.answer(408, "request body not received in time")
			}
			return
		}
	}
	if err != nil {
		s.release(x, false)
		s.dropBody()
		<-bodyDone
		s.answerError(err, x, "")
		return
	}
	if refused, reuse := x.RetryOverHTTP11(); refused {
		// An answer only an HTTP/1.1 client connection can carry on
		// (NTLM, Negotiate): the client is asked to retry over it.
		s.release(x, reuse && !hasBody)
		if hasBody {
			s.dropBody()
			<-bodyDone
		}
		s.resetStream(http2.ErrCodeHTTP11Required)
		return
	}
	keep := x.KeepAlive()
	complete := s.relayResponse(e)
	if complete {
		s.stopBody()
	}
	bodyErr := s.bodyResult(bodyDone, x.Up.C)
	if errors.Is(bodyErr, errBodyStalled) {
		s.grant.SetReason(accesslog.ReasonBodyTimeout) // the stream was reset
	}
	s.release(x, complete && bodyErr == nil && keep)
}

// streamBody sends the request body on a goroutine of its own while the
// response head is awaited (see origin.Exchange.StartBody). It returns
// the body writer's result, whether the body failed on the client's side
// before the head was taken (cut), and the wait's error.
func (s *stream) streamBody(e *exchange) (done chan error, cut bool, err error) {
	c := s.c
	x := &e.x
	x.StartBody()
	c.mu.Lock()
	c.wg.Add(1)
	c.mu.Unlock()
	done = make(chan error, 1)
	go s.sendBody(x, x.Up.C, e.chunked(), done)
	err = x.ReadResponse(e)
	x.EndBody()
	c.mu.Lock()
	if cut = x.WasCut(); !cut && err == nil {
		s.finalHead = true // from now on, a stalled body resets s
	}
	c.mu.Unlock()
	return done, cut, err
}

// noBodyDone is the body result of a request without a body: closed, it
// answers nil at once to any number of receives.
var noBodyDone = func() chan error {
	ch := make(chan error)
	close(ch)
	return ch
}()

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
	// The writer stops waiting for the client's DATA, and its writes fail
	// at once: its deadline is set again until it has returned, as it
	// re-arms its own before each write.
	s.dropBody()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		up.SetWriteDeadline(time.Unix(1, 0))
		select {
		case <-done:
			return errBodyCut
		case <-tick.C:
		}
	}
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
// gets nil when the whole body was written. It tells x how the body
// ended: sent (or failed upstream: the origin may answer), or failed on
// the client's side (a reset, a stall). A stall after the response head
// was taken resets the stream, ending the response's relay.
func (s *stream) sendBody(x *origin.Exchange, up net.Conn, chunked bool, done chan<- error) {
	c := s.c
	defer c.wg.Done()
	err := s.writeBody(up, chunked)
	switch {
	case errors.Is(err, errBodyStalled):
		x.BodyCut()
		c.mu.Lock()
		if s.finalHead {
			c.resetLocked(s, http2.ErrCodeCancel, true)
		}
		c.mu.Unlock()
	case errors.Is(err, errStreamGone):
		x.BodyCut()
	default:
		x.BodySent()
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

// connect serves CONNECT (a TCP tunnel) and extended CONNECT for
// WebSocket (an HTTP/1.1 Upgrade handshake with the origin, then a
// tunnel): dial, answer 200, and relay until both directions end. It
// reports whether it handed the stream to a relay goroutine, which then
// ends the worker.
func (s *stream) connect() bool {
	r := &s.req
	if r.kind != kindWebSocket && s.grant.NeedsHello() {
		return s.helloFirst()
	}
	var up *net.TCPConn // a tunnel's relay waits on its socket
	fields := []hpack.HeaderField{{Name: ":status", Value: "200"}}
	var pending []byte
	if r.kind == kindWebSocket {
		var ok bool
		if up, fields, pending, ok = s.upgrade(); !ok {
			return false
		}
	} else {
		upc, err := s.dial(true)
		if err != nil {
			s.answerError(err, nil, string(s.grant.AppendDest(nil)))
			return false
		}
		up = upc.(*net.TCPConn)
		if !s.attach(up) {
			return false
		}
	}
	if s.sendHeaders(fields, false) != nil {
		s.detach(up)
		return false
	}
	s.answered(200)
	s.relaying = true
	s.releaseFields() // the tunnel does not need them; an idle one keeps less
	return s.startTunnel(up, pending)
}

// startTunnel makes up, the stream's upstream, a tunnel once the client
// has its 200: the client's bytes queued and to come go to up (see
// deliverLocked), pending (bytes behind an origin's 101) to the client,
// and a relay goroutine carries the upstream's to the client. It
// reports whether the relay took the stream over.
func (s *stream) startTunnel(up *net.TCPConn, pending []byte) bool {
	c := s.c
	c.mu.Lock()
	if s.reset {
		c.mu.Unlock()
		s.detach(up)
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
		s.detach(up)
		return false
	}
	s.grant.TunnelOpened()
	if len(pending) > 0 {
		if s.sendData(pending, false) != nil {
			s.detach(up)
			return false
		}
	}
	// The tunnel goes on on a fresh goroutine, whose stack, parked with
	// few frames on it, the garbage collector shrinks to 4 KiB; this
	// one's has grown with the dial and the handshake.
	go s.relay(up, nil, false, nil)
	return true
}

// helloFirst serves a CONNECT whose ClientHello the SNI check reads
// before the dial (gate.Grant.NeedsHello): answer 200 (the client sends
// its hello only then), wait for the hello in the stream's queue (within
// the grant's HelloTimeout, at most sni.MaxBytes; the client's window is
// not credited meanwhile), decide it, then dial and start the tunnel,
// whose first bytes upstream are the queued ones, the hello unchanged. A
// refusal, or a dial that fails, resets the stream with CONNECT_ERROR;
// the access log has the reason.
func (s *stream) helloFirst() bool {
	if s.sendHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}}, false) != nil {
		return false
	}
	s.answered(200)
	s.relaying = true
	s.releaseFields()
	h, err := s.waitHello()
	if errors.Is(err, errStreamGone) {
		return false
	}
	if s.grant.CheckHello(h, err) != gate.OK {
		s.resetStream(http2.ErrCodeConnect)
		return false
	}
	if s.grant.Intercepting() {
		return s.intercept()
	}
	upc, err := s.dial(true)
	if err != nil {
		s.resetStream(http2.ErrCodeConnect)
		return false
	}
	up := upc.(*net.TCPConn)
	if !s.attach(up) {
		return false
	}
	return s.startTunnel(up, nil)
}

// waitHello waits until the bytes the client sent on the stream hold a
// whole ClientHello, or show they cannot (see sni.Scanner), and returns
// what they are; the bytes stay queued. It returns errStreamGone when
// the stream is reset, io.ErrUnexpectedEOF when the client ends its
// side first, and os.ErrDeadlineExceeded when the grant's HelloTimeout
// passes.
func (s *stream) waitHello() (sni.Hello, error) {
	c := s.c
	deadline := gate.Deadline(time.Now(), s.grant.HelloTimeout())
	var sc sni.Scanner
	var buf []byte // a copy of the queue's first bytes, which grows as they come
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if s.in.n > len(buf) {
			buf = s.in.appendTo(buf, min(s.in.n, sni.MaxBytes))
			if h, _, err := sc.Scan(buf); err != sni.ErrShort {
				return h, err
			}
		}
		switch {
		case s.reset:
			return sni.Hello{}, errStreamGone
		case s.remoteDone:
			return sni.Hello{}, io.ErrUnexpectedEOF
		case !s.waitUntilLocked(deadline):
			return sni.Hello{}, os.ErrDeadlineExceeded
		}
	}
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
	s.detach(up)
	s.waitPumped()
	s.finish()
	s.exit()
}

// waitPumped waits until a tunnel's pumpUp has returned: a write
// upstream that the stream's reset cut short (detach closed the
// upstream) has then counted its bytes, which finish reports.
func (s *stream) waitPumped() {
	c := s.c
	c.mu.Lock()
	for s.pumping {
		s.cond.Wait()
	}
	c.mu.Unlock()
}

// upgrade performs the WebSocket handshake with the origin for an
// extended CONNECT (RFC 8441 §5) through the exchange every HTTP
// front-end shares (origin.Exchange: a pooled or new connection, or an
// http parent that forwards the upgrade), and returns the upstream, now
// the stream's, the fields of the 200 answer and the bytes that came
// behind the origin's 101. On failure it has answered the client.
func (s *stream) upgrade() (*net.TCPConn, []hpack.HeaderField, []byte, bool) {
	c := s.c
	var nonce [16]byte
	rand.Read(nonce[:])
	wsKey := base64.StdEncoding.EncodeToString(nonce[:])
	e := s.getExchange()
	defer putExchange(e)
	e.req.WebSocketKey = wsKey
	x := &e.x
	if err := x.Begin(c.cfg.Origin, &s.grant, "GET", origin.UpgradeTCP); err != nil {
		s.answerError(err, x, "")
		return nil, nil, nil, false
	}
	if _, err := x.Send(e, origin.Body{Done: true, Empty: true}); err != nil {
		s.answerError(err, x, "")
		return nil, nil, nil, false
	}
	h := &x.Resp
	if h.Status != 101 {
		// Refused: the origin's answer goes to the client as it is.
		if s.relayResponse(e) {
			s.stopBody()
		}
		s.release(x, false)
		return nil, nil, nil, false
	}
	sum := sha1.Sum([]byte(wsKey + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	accept := h.FieldIndex("sec-websocket-accept")
	if accept < 0 || string(h.Fields[accept].Value.Of(h.Buf)) != base64.StdEncoding.EncodeToString(sum[:]) {
		s.release(x, false)
		s.answerError(errBadUpgrade, x, "")
		return nil, nil, nil, false
	}
	fields := responseFields(make([]hpack.HeaderField, 0, 8), 200, h, c.cfg.Origin.Config().Via, "sec-websocket-accept", nil)
	fields = appendRuleFields(fields, x.Headers())
	var pending []byte
	if p := x.Up.Buffered(); len(p) > 0 {
		pending = append([]byte(nil), p...)
	}
	return x.Detach().(*net.TCPConn), fields, pending, true
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
			k := s.take(m)
			var err error
			if k > 0 {
				err = s.sendData(buf[:k], false)
			}
			s.taken()
			if err != nil || k < m {
				// Failed, or the quota is reached: taken, here or in
				// the other direction, resets the stream.
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
