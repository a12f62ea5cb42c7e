package h2

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// errStreamGone is what a stream's goroutines get when the stream was
// reset (by either side) or the connection is ending.
var errStreamGone = errors.New("h2: stream reset")

// stream is one client-initiated stream. Its worker goroutine (run)
// serves the request; for a tunnel it then relays upstream-to-client
// bytes, while client-to-upstream bytes are written by the connection's
// reader directly when the upstream socket takes them, or else by a pump
// goroutine that exists only while bytes are queued.
type stream struct {
	c   *conn
	id  uint32
	req request // set before the worker starts, then owned by it
	// fields is the buffer req.fields lies in (see blockDecoder), given
	// back by releaseFields; nil when none. Set with req, then owned by
	// the worker.
	fields *fieldBuf

	cond sync.Cond // L is &c.mu; broadcast when anything below changes

	// Guarded by c.mu.
	sendWindow  int64      // bytes rustle may still send
	recvWindow  int64      // bytes the client may still send
	recvUnacked int64      // stream credit not yet sent
	in          chunkQueue // request body or tunnel bytes not yet written upstream
	remoteDone  bool       // END_STREAM received
	localDone   bool       // END_STREAM sent
	headersSent bool       // a header block was sent: the client's reset is not an early one
	reset       bool       // RST_STREAM sent or received, or the connection ended
	blocked     bool       // in c.blocked
	discard     bool       // client bytes are dropped (an answer that ignores the body)
	finalHead   bool       // forward took the origin's final response head: a stalled body resets s
	tunnel      bool       // client bytes go to up
	up          net.Conn   // TCP, or for a forwarded request TLS to an https parent
	pumping     bool       // a goroutine is writing in's first bytes to up
	upShut      bool       // up's write half is shut down
	cancel      context.CancelFunc
	paceStop    context.CancelFunc // ends paceCtx; nil when the stream's bytes are not paced
	upBytes     int64              // the client's bytes written upstream (body content or tunnel)
	downBytes   int64              // relayed DATA payload written to the client (see conn.flights)
	dataEnd     int64              // conn.queued once the stream's last relayed DATA frame was queued

	// Set by the worker (paced and paceCtx with c.mu held) before it
	// starts other goroutines for the stream; read-only after.
	paced   bool            // the user's bytes go through grant.Pace: paced on its byte bucket, or metered against its byte quota
	paceCtx context.Context // done when the stream is reset or over; set with paced

	// grant is the stream's passage through the session's policy, used by
	// the worker; its Pace is called by the stream's other goroutines too
	// (it only reads the bucket Authorize set).
	grant    gate.Grant
	relaying bool         // the DATA sent is relayed payload (not rustle's own answer); owned by the worker
	got      int64        // DATA payload bytes received; owned by the reader
	upw      rawWriter    // non-blocking writes to up; used by the reader while !pumping
	last     atomic.Int64 // when a tunnel byte last moved, in ns since start
	// upWait is the tunnel's wait for its upstream (pumpDown); nil when
	// none. Guarded by c.mu.
	upWait *tunnel.Notice
	// icWait is the wait for the client's bytes of an intercepted
	// tunnel's front-end (streamConn.Notify); nil when none. While it
	// waits, the connection's reader may wait with no goroutine, as it
	// does for tunnels (parkedLocked). Guarded by c.mu.
	icWait *streamNotice
	// timer wakes the worker from a wait with a deadline
	// (waitUntilLocked), bodyTimer the request body's writer (writeBody);
	// each is made on its first such wait. Guarded by c.mu.
	timer     *time.Timer
	bodyTimer *time.Timer

	// limitHops says the request is a TRACE or OPTIONS whose forwarded
	// Max-Forwards is maxFwd (see hopLimit); owned by the worker.
	limitHops bool
	maxFwd    int
}

func (c *conn) newStreamLocked(id uint32, req request) *stream {
	s := &stream{
		c:          c,
		id:         id,
		req:        req,
		sendWindow: c.peerWindow,
		recvWindow: int64(c.cfg.InitialStreamWindow),
	}
	s.cond.L = &c.mu
	return s
}

// run is the stream's worker goroutine.
func (s *stream) run() {
	if !s.serve() {
		s.finish()
		s.exit()
	}
}

// finish reports the stream's request, or its tunnel, as over: its
// payload bytes each way go to the grant, which logs and counts it and
// ends its hold on the user's connection count. It first waits until the
// relayed DATA it queued has been written to the client, or cannot be
// (the connection failed), so that bytes down are what was written.
func (s *stream) finish() {
	c := s.c
	c.mu.Lock()
	for s.dataEnd > c.sent && c.werr == nil {
		if c.writing {
			c.wcond.Wait()
			continue
		}
		c.flushLocked()
		if s.dataEnd > c.sent && c.werr == nil {
			break // nothing queued is left to write; not expected
		}
	}
	up, down := s.upBytes, s.downBytes
	c.mu.Unlock()
	s.grant.Finish(up, down)
}

// releaseFields gives back the buffer of the request's fields, which
// nothing reads from then on.
func (s *stream) releaseFields() {
	s.req.fields = nil
	if s.fields != nil {
		putFieldBuf(s.fields)
		s.fields = nil
	}
}

// exit ends the stream's worker.
func (s *stream) exit() {
	s.releaseFields()
	c := s.c
	c.mu.Lock()
	if c.streams[s.id] == s {
		// Every path ends the stream; this one did not.
		c.resetLocked(s, http2.ErrCodeInternal, true)
	}
	c.workers--
	switch {
	case c.goAway:
		// The reader looks again at whether the connection has
		// drained.
		c.wakeLocked()
	case c.workers == 0 && len(c.streams) == 0:
		c.becameIdleLocked()
	}
	if s.paceStop != nil {
		s.paceStop()
	}
	c.mu.Unlock()
	c.wg.Done()
}

// serve serves the stream's request. It reports whether it handed the
// stream to another goroutine, which then calls exit.
func (s *stream) serve() bool {
	c := s.c
	r := &s.req
	if r.kind == kindConnectUDP {
		s.matchUDP()
	}
	switch k := c.authorize(r, &s.grant); k {
	case gate.OK:
	case gate.NeedAuth:
		var extra []hpack.HeaderField
		if ch := c.sess.Policy().Challenge(); ch != "" {
			extra = append(extra, hpack.HeaderField{Name: "proxy-authenticate", Value: ch})
		}
		s.answerLocal(407, gate.NeedAuth.Reason(), extra...)
		return false
	case gate.CoolingDown:
		secs := int64((s.grant.RetryAfter + time.Second - 1) / time.Second)
		s.answerLocal(429, gate.CoolingDown.Reason(),
			hpack.HeaderField{Name: "retry-after", Value: strconv.FormatInt(secs, 10)})
		c.mu.Lock()
		c.goAwayLocked(http2.ErrCodeEnhanceYourCalm)
		c.mu.Unlock()
		return false
	default: // gate.UserLimit: 429; gate.Denied: 403
		s.answerLocal(k.Status(), k.Reason())
		return false
	}
	if metered := s.grant.Meter(); s.grant.Throttle() != nil || metered {
		ctx, stop := context.WithCancel(context.Background())
		c.mu.Lock()
		s.paced, s.paceCtx, s.paceStop = true, ctx, stop
		if s.reset {
			stop()
		}
		c.mu.Unlock()
	}
	switch r.kind {
	case kindLocal:
		status, why := r.localStatus()
		reason := accesslog.ReasonBadRequest
		switch status {
		case 431:
			reason = accesslog.ReasonHeadTooLarge
		case 421:
			reason = accesslog.ReasonMisdirected
		}
		s.grant.SetReason(reason)
		s.answerLocal(status, why)
		return false
	}
	if r.kind == kindForward && origin.HopLimited(r.method) && s.hopLimit() {
		return false
	}
	// The stream is to hold an upstream: past the first one of the
	// connection, it counts as a connection of its own.
	if k := s.grant.Hold(); k != gate.OK {
		s.answerLocal(k.Status(), k.Reason())
		return false
	}
	switch r.kind {
	case kindForward:
		s.forward()
		return false
	case kindConnectUDP:
		s.connectUDP()
		return false
	}
	return s.connect()
}

// authorize asks the session's policy about r, filling g. A request
// rustle answers itself (kindLocal) is asked about too: it needs
// credentials like any other, and is logged with the answer it gets.
func (c *conn) authorize(r *request, g *gate.Grant) gate.Kind {
	proto := acl.HTTP
	method := r.method
	switch {
	case r.kind == kindWebSocket || r.method == "CONNECT" && r.protocol == "websocket":
		proto = acl.WebSocket
	case r.method == "CONNECT" && r.protocol == protoConnectUDP:
		proto, method = acl.UDP, "CONNECT-UDP"
	case r.method == "CONNECT":
		proto = acl.Connect
	}
	// The target as the access log shows it: the URL of a forwarded
	// request, host:port of a tunnel; then the Proxy-Authorization
	// value. Authorize keeps no reference to either (it copies the
	// target, as it must the HTTP/1.1 front-end's, which are slices of
	// its read buffer), so they are built in a pooled buffer.
	bp := scratchPool.Get().(*[]byte)
	b := (*bp)[:0]
	if r.kind == kindConnectUDP {
		b = gate.AppendHostPort(append(b, "udp://"...), r.host, r.port, r.ipv6)
	} else if r.scheme != "" {
		b = append(append(append(append(b, r.scheme...), "://"...), r.authority...), r.path...)
	} else {
		b = append(b, r.authority...)
	}
	n := len(b)
	target := b[:n:n]
	if r.kind == kindLocal {
		target = gate.LoggableTarget(target) // a refused :authority may carry userinfo
	}
	var authz []byte
	if r.hasProxyAuth {
		b = append(b, r.proxyAuth...)
		authz = b[n:]
	}
	// The Via values, joined: checked for rustle's own element (a loop);
	// a tunnel's go on to an HTTP parent.
	vs := -1
	for _, f := range r.fields {
		if f.Name != "via" {
			continue
		}
		if vs < 0 {
			vs = len(b)
		} else {
			b = append(b, ", "...)
		}
		b = append(b, f.Value...)
	}
	var via []byte
	if vs >= 0 {
		via = b[vs:]
	}
	path := ""
	if r.kind == kindForward {
		path = r.path
	}
	host, addr, port := r.host, netip.Addr{}, uint16(r.port)
	if in := c.icept; in != nil {
		// A request inside an intercepted tunnel: to its destination.
		proto, host, addr, port = acl.HTTPS, in.Host, in.Addr, in.Port
	}
	k := c.sess.Authorize(&gate.Request{
		Protocol:      proto,
		Log:           accesslog.ProtoH2,
		Method:        method,
		Host:          host,
		Addr:          addr,
		Port:          port,
		Target:        target,
		Path:          path,
		Authorization: authz,
		Via:           via,
	}, g)
	if cap(b) <= scratchKeep {
		clear(b) // neither the target nor a credential stays in the pool
		*bp = b[:0]
		scratchPool.Put(bp)
	}
	return k
}

// scratchPool holds *[]byte, empty: authorize's buffers.
var scratchPool = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

// scratchKeep is the largest buffer that goes back to scratchPool.
const scratchKeep = 4 << 10

// pace waits, when the stream's user's bytes are paced, until n more
// bytes may pass; it is called before they are written, with c.mu not
// held. A reset of the stream ends the wait.
//
// A stream whose user has a byte quota goes through it too: its bytes
// are counted as they are sent, and once the quota is spent the stream
// is reset (CANCEL): the write that crossed it was the last.
func (s *stream) pace(n int) {
	if s.paced && !s.grant.Pace(s.paceCtx, n) {
		s.resetStream(http2.ErrCodeCancel)
	}
}

// take is pace for a tunnel's bytes: it waits, when the stream's user's
// bytes are paced, until n more bytes may pass, and returns how many of
// them may be sent: n, or fewer once the user's byte quota is reached
// (gate.Grant.Take). The direction that got fewer than it asked for
// sends those and moves nothing more. Each take is followed by one taken.
func (s *stream) take(n int) int {
	if !s.paced {
		return n
	}
	return s.grant.Take(s.paceCtx, n)
}

// taken ends a take whose bytes were sent or given up. Once the quota is
// reached, the last one (that of the direction whose bytes were the last
// on their way) resets the stream (CANCEL): a direction stopped by the
// quota does not cut bytes the other one was allowed, which would then
// not be counted, leaving the user under its quota.
func (s *stream) taken() {
	if s.paced && s.grant.Taken() {
		s.resetStream(http2.ErrCodeCancel)
	}
}

// sendErrLocked returns errStreamGone when nothing more may be sent on s.
func (s *stream) sendErrLocked() error {
	c := s.c
	if s.reset || s.localDone || c.werr != nil || c.closing {
		return errStreamGone
	}
	return nil
}

// sendHeaders sends a header block; end closes rustle's side.
func (s *stream) sendHeaders(fields []hpack.HeaderField, end bool) error {
	return s.queueHeaders(fields, end, true)
}

// queueHeaders queues a header block, and writes it unless flush is
// false: then DATA about to follow goes out with it.
func (s *stream) queueHeaders(fields []hpack.HeaderField, end, flush bool) error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := s.sendErrLocked(); err != nil {
		return err
	}
	c.writeHeadersLocked(s.id, fields, end)
	s.headersSent = true
	if end {
		s.endLocalLocked()
	}
	if flush || end {
		c.flushLocked()
	}
	return nil
}

// sendData sends p as DATA frames within the flow-control windows,
// waiting for them as needed; end sets END_STREAM on the last frame (an
// empty one when p is empty). A client that grants no window for the
// write timeout gets the stream reset (RST_STREAM CANCEL), which closes
// its upstream.
func (s *stream) sendData(p []byte, end bool) error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	waiting := false       // for window, since deadline was set
	var deadline time.Time // of the wait for window; zero: no limit
	for {
		if err := s.sendErrLocked(); err != nil {
			return err
		}
		if len(p) == 0 {
			if end {
				c.appendFrame(http2.FrameData, http2.FlagDataEndStream, s.id, nil)
				s.endLocalLocked()
				c.flushLocked()
			}
			return nil
		}
		if c.out != nil && len(c.out.b) >= outLimit {
			// The writer's write timeout bounds this wait.
			if !c.writing {
				c.flushLocked()
			} else {
				s.waitConnLocked(time.Time{})
			}
			continue
		}
		n := min(int64(len(p)), s.sendWindow, c.sendWindow, int64(c.peerFrame))
		if n <= 0 {
			if c.out != nil && len(c.out.b) > 0 && !c.writing {
				c.flushLocked() // the client may be waiting for it to grant more
				continue
			}
			if !waiting {
				waiting, deadline = true, gate.Deadline(time.Now(), c.cfg.WriteTimeout)
			}
			if !s.waitWindowLocked(deadline) {
				return s.stalledLocked()
			}
			continue
		}
		waiting = false
		var flags http2.Flags
		last := n == int64(len(p))
		if last && end {
			flags = http2.FlagDataEndStream
		}
		c.appendFrame(http2.FrameData, flags, s.id, p[:n])
		if s.relaying {
			c.flights = append(c.flights, flight{s: s, end: c.queued, n: n})
			s.dataEnd = c.queued
		}
		s.sendWindow -= n
		c.sendWindow -= n
		p = p[n:]
		if flags != 0 {
			s.endLocalLocked()
		}
		if last {
			c.flushLocked()
			return nil
		}
	}
}

// sendable waits until some bytes may be sent on s and returns how many
// (at most max), so that a tunnel reads no more from its upstream than
// the client accepts. A tunnel whose client grants no window while no
// byte moves either way for the tunnel idle timeout is reset.
func (s *stream) sendable(max int) (int, error) {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if err := s.sendErrLocked(); err != nil {
			return 0, err
		}
		n := min(int64(max), s.sendWindow, c.sendWindow)
		switch {
		case n > 0:
			return int(n), nil
		case c.out != nil && len(c.out.b) > 0 && !c.writing:
			c.flushLocked()
		case !s.waitWindowLocked(s.idleDeadline()):
			return 0, s.stalledLocked()
		}
	}
}

// waitWindowLocked waits for the stream's window, or the connection's
// when the stream has some, until deadline (zero: none). It reports
// false once the deadline has passed.
func (s *stream) waitWindowLocked(deadline time.Time) bool {
	if s.sendWindow > 0 {
		return s.waitConnLocked(deadline)
	}
	return s.waitUntilLocked(deadline)
}

// waitConnLocked waits for a change in the connection's window or output
// room, until deadline (zero: none). It reports false once the deadline
// has passed.
func (s *stream) waitConnLocked(deadline time.Time) bool {
	if !s.blocked {
		s.blocked = true
		s.c.blocked = append(s.c.blocked, s)
	}
	return s.waitUntilLocked(deadline)
}

// stalledLocked resets s, whose client has granted it no window for the
// time allowed, and returns errStreamGone.
func (s *stream) stalledLocked() error {
	s.c.resetLocked(s, http2.ErrCodeCancel, true)
	return errStreamGone
}

// endLocalLocked notes that rustle's side of s is done.
func (s *stream) endLocalLocked() {
	s.localDone = true
	if s.remoteDone {
		s.c.removeLocked(s)
	}
	s.cond.Broadcast()
}

// resetStream resets s with code unless it is over.
func (s *stream) resetStream(code http2.ErrCode) {
	c := s.c
	c.mu.Lock()
	if !s.reset && (!s.localDone || !s.remoteDone) {
		c.resetLocked(s, code, true)
	}
	c.mu.Unlock()
}

// stopBody ends a stream whose answer is complete while the client is
// still sending: RST_STREAM(NO_ERROR) asks it to stop (RFC 9113 §8.1).
func (s *stream) stopBody() {
	c := s.c
	c.mu.Lock()
	if !s.reset && !s.remoteDone {
		c.resetLocked(s, http2.ErrCodeNo, true)
	}
	c.mu.Unlock()
}

// waitRemote waits until the client has ended its side of s (or s is
// reset), dropping what it sends meanwhile, for at most the write
// timeout: the answer does not need the body.
func (s *stream) waitRemote() {
	c := s.c
	c.mu.Lock()
	s.discardLocked()
	deadline := gate.Deadline(time.Now(), c.cfg.WriteTimeout)
	for !s.remoteDone && !s.reset && s.waitUntilLocked(deadline) {
	}
	c.mu.Unlock()
}

// waitUntilLocked waits for a broadcast of s.cond, or until deadline
// (zero: no deadline). It reports false, without waiting, once the
// deadline has passed. It is the stream's worker's: the request body's
// writer waits with waitTimerLocked on a timer of its own.
func (s *stream) waitUntilLocked(deadline time.Time) bool {
	return s.waitTimerLocked(&s.timer, deadline)
}

// waitTimerLocked is waitUntilLocked with the timer *t, which only one
// goroutine may wait with at a time.
func (s *stream) waitTimerLocked(t **time.Timer, deadline time.Time) bool {
	if deadline.IsZero() {
		s.cond.Wait()
		return true
	}
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	if *t == nil {
		*t = time.AfterFunc(d, s.wake)
	} else {
		(*t).Reset(d)
	}
	s.cond.Wait()
	(*t).Stop()
	return true
}

// wake is the timer's: it wakes the stream's waiters to look at their
// deadlines.
func (s *stream) wake() {
	s.c.mu.Lock()
	s.cond.Broadcast()
	s.c.mu.Unlock()
}

// discardLocked drops the client's bytes from now on.
func (s *stream) discardLocked() {
	s.discard = true
	if !s.pumping {
		n := s.in.n
		s.in.drop()
		s.c.dequeuedLocked(int64(n))
		s.creditLocked(int64(n))
	}
}

// creditLocked returns n bytes of stream window to the client, in
// batches, while it may still send.
func (s *stream) creditLocked(n int64) {
	c := s.c
	s.recvUnacked += n
	if s.remoteDone || s.reset {
		return
	}
	if s.recvUnacked >= int64(c.cfg.InitialStreamWindow/4) {
		c.writeWindowUpdateLocked(s.id, s.recvUnacked)
		s.recvWindow += s.recvUnacked
		s.recvUnacked = 0
	}
}

// deliverLocked takes DATA payload from the reader: dropped, written to a
// tunnel's upstream at once when its socket takes it, or queued.
func (s *stream) deliverLocked(p []byte) {
	c := s.c
	n := int64(len(p))
	if s.discard {
		c.creditConnLocked(n)
		s.creditLocked(n)
		return
	}
	if s.tunnel && !s.pumping && s.in.n == 0 && !s.paced {
		k := s.upw.write(p)
		if k > 0 {
			s.countUpLocked(k)
			s.touch()
			c.creditConnLocked(int64(k))
			s.creditLocked(int64(k))
			p = p[k:]
		}
		if len(p) == 0 {
			return
		}
	}
	s.in.write(p)
	c.queuedLocked(int64(len(p)))
	s.cond.Broadcast()
	s.wakeInterceptLocked()
	s.kickUpLocked()
}

// consumedLocked accounts for n queued bytes done with: written upstream
// (and counted by the caller) or given up.
func (s *stream) consumedLocked(n int) {
	s.in.consume(n)
	s.c.dequeuedLocked(int64(n))
	s.creditLocked(int64(n))
}

// kickUpLocked moves a tunnel's queued client bytes on: a pump goroutine
// writes them, and once the client has ended its side and everything is
// written, the upstream's write half is shut down.
func (s *stream) kickUpLocked() {
	if !s.tunnel || s.pumping || s.reset {
		return
	}
	if s.in.n > 0 {
		s.pumping = true
		s.c.wg.Add(1)
		go s.pumpUp()
		return
	}
	if s.remoteDone && !s.upShut {
		s.upShut = true
		s.up.(*net.TCPConn).CloseWrite() // a tunnel's upstream is TCP
		s.cond.Broadcast()
	}
}

// pumpUp writes a tunnel's queued client bytes upstream, blocking as the
// upstream needs, and ends when the queue is empty.
func (s *stream) pumpUp() {
	c := s.c
	defer c.wg.Done()
	c.mu.Lock()
	for !s.reset && !s.discard && s.in.n > 0 {
		p := s.in.front()
		up := s.up // not detached before the reset this loop checks for
		c.mu.Unlock()
		k := s.take(len(p))
		var n int
		var err error
		if k > 0 {
			up.SetWriteDeadline(gate.Deadline(time.Now(), c.cfg.TunnelIdleTimeout))
			n, err = up.Write(p[:k])
		}
		c.mu.Lock()
		if n > 0 {
			s.touch()
		}
		s.countUpLocked(n)
		s.consumedLocked(n)
		if err != nil && !s.reset {
			c.resetLocked(s, http2.ErrCodeConnect, true)
		}
		if k < len(p) {
			// The quota is reached: nothing more goes upstream; taken,
			// here or in the other direction, ends the stream.
			s.discard = true
		}
		c.mu.Unlock()
		s.taken()
		c.mu.Lock()
	}
	s.pumping = false
	if s.discard && !s.reset {
		n := s.in.n
		s.in.drop()
		c.dequeuedLocked(int64(n))
		s.creditLocked(int64(n))
	}
	if s.reset {
		c.dequeuedLocked(int64(s.in.n))
		s.in.drop()
	}
	s.kickUpLocked()
	s.cond.Broadcast()
	c.flushLocked()
	c.mu.Unlock()
}

// touch notes tunnel activity.
func (s *stream) touch() {
	s.last.Store(int64(time.Since(s.c.s.start)))
}

// idleDeadline returns when a tunnel with no more activity becomes idle
// for the tunnel idle timeout; zero when there is no limit.
func (s *stream) idleDeadline() time.Time {
	idle := s.c.cfg.TunnelIdleTimeout
	if idle <= 0 {
		return time.Time{}
	}
	return s.c.s.start.Add(time.Duration(s.last.Load()) + idle)
}

// chunkQueue is a byte queue in pooled bufSize chunks; it holds no
// memory when empty.
type chunkQueue struct {
	chunks []*[bufSize]byte
	r      int // read offset in chunks[0]
	w      int // write offset in the last chunk
	n      int // bytes queued
}

func (q *chunkQueue) write(p []byte) {
	for len(p) > 0 {
		if len(q.chunks) == 0 || q.w == bufSize {
			q.chunks = append(q.chunks, bufPool.Get().(*[bufSize]byte))
			q.w = 0
		}
		k := copy(q.chunks[len(q.chunks)-1][q.w:], p)
		q.w += k
		q.n += k
		p = p[k:]
	}
}

// front returns the first queued bytes (at most one chunk's worth). They
// stay valid until consume or drop; bytes written meanwhile do not
// overlap them.
func (q *chunkQueue) front() []byte {
	if q.n == 0 {
		return nil
	}
	end := bufSize
	if len(q.chunks) == 1 {
		end = q.w
	}
	return q.chunks[0][q.r:end]
}

// appendTo appends to dst the queued bytes from len(dst) up to the
// n-th: dst holds the first len(dst) of them already.
func (q *chunkQueue) appendTo(dst []byte, n int) []byte {
	pos := q.r + len(dst) // offset in the chunks, counting from the first's start
	for len(dst) < n {
		ci, off := pos/bufSize, pos%bufSize
		end := bufSize
		if ci == len(q.chunks)-1 {
			end = q.w
		}
		k := min(end-off, n-len(dst))
		dst = append(dst, q.chunks[ci][off:off+k]...)
		pos += k
	}
	return dst
}

// consume removes the first k bytes, which front returned.
func (q *chunkQueue) consume(k int) {
	if k <= 0 {
		return
	}
	q.r += k
	q.n -= k
	if len(q.chunks) == 1 && q.r == q.w || q.r == bufSize {
		bufPool.Put(q.chunks[0])
		q.chunks[0] = nil
		q.chunks = q.chunks[1:]
		q.r = 0
		if len(q.chunks) == 0 {
			q.chunks, q.w = nil, 0
		}
	}
}

// drop empties the queue; its chunks are left to the garbage collector,
// as a writer may still be reading the first one.
func (q *chunkQueue) drop() {
	*q = chunkQueue{}
}

// rawWriter writes to a socket without waiting, through its RawConn.
type rawWriter struct {
	rc  syscall.RawConn
	fn  func(uintptr) bool // write, bound once so that writes do not allocate
	p   []byte
	n   int
	err error
}

func (w *rawWriter) init(c *net.TCPConn) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	w.rc = rc
	w.fn = w.writeFD
	return nil
}

// write writes as much of p as the socket takes now and returns how much
// that was (0 on any error: the pump finds the error when it writes the
// rest).
func (w *rawWriter) write(p []byte) int {
	if w.rc == nil {
		return 0
	}
	w.p = p
	w.rc.Write(w.fn)
	w.p = nil
	if w.err != nil || w.n < 0 {
		return 0
	}
	return w.n
}

// countUpLocked counts n bytes of the client's written upstream.
func (s *stream) countUpLocked(n int) {
	if n > 0 {
		s.upBytes += int64(n)
	}
}

// answered notes the status sent to the client.
func (s *stream) answered(status int) {
	s.grant.Answer(status, 0)
}

// hopLimit applies a TRACE's or OPTIONS's Max-Forwards (see
// origin.MaxForwards): a malformed one is answered 400; at 0 rustle answers
// the request itself (an echo of a TRACE without its credentials, the
// methods it serves for OPTIONS); otherwise the forwarded request carries
// one less (limitHops, maxFwd). It reports whether it answered the
// stream.
func (s *stream) hopLimit() bool {
	r := &s.req
	v, present := "", false
	for _, f := range r.fields {
		if f.Name == "max-forwards" {
			v, present = f.Value, true
			break
		}
	}
	next, here, ok := origin.MaxForwards(v, present)
	switch {
	case !ok:
		s.grant.SetReason(accesslog.ReasonBadRequest)
		s.answerLocal(400, "malformed Max-Forwards")
		return true
	case !here:
		s.limitHops, s.maxFwd = present, next
		return false
	}
	s.waitRemote()
	fields := []hpack.HeaderField{{Name: ":status", Value: "200"}}
	var body []byte
	if r.method == "TRACE" {
		body = origin.AppendTraceLine(body, r.method, r.scheme+"://"+r.authority+r.path, "HTTP/2")
		for _, f := range r.fields {
			body = origin.AppendTraceField(body, f.Name, f.Value)
		}
		body = append(body, "\r\n"...)
		fields = append(fields, hpack.HeaderField{Name: "content-type", Value: origin.TraceContentType})
	} else {
		fields = append(fields, hpack.HeaderField{Name: "allow", Value: origin.ProxyAllow})
	}
	fields = append(fields, hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))})
	s.answered(200)
	if len(body) == 0 {
		s.sendHeaders(fields, true)
	} else if s.sendHeaders(fields, false) == nil {
		s.sendData(body, true)
	}
	s.stopBody()
	return true
}
