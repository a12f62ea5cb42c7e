package httpproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/limits"
)

// spliceMin is the body remainder from which bytes are moved with splice
// rather than copied through the upstream buffer.
const spliceMin = 64 << 10

// spliceSegment bounds one splice call so that write deadlines are
// refreshed as a long body flows.
const spliceSegment = 4 << 20

// body framing of a response.
const (
	bodyNone = iota
	bodyLength
	bodyChunked
	bodyClose
)

// conn is the state of one client connection. It is owned by the
// goroutine running ServeConn, except that while a request body streams,
// the client's reads and the upstream's writes belong to the sendBody
// goroutine until it is joined.
type conn struct {
	p      *Proxy
	sess   *gate.Session
	ctx    context.Context // sess's
	pool   *dialer.Pool    // the policy's upstream pool; nil = none
	client bufConn
	idle   atomic.Bool // waiting for the next request head; read by wake

	// up is the current upstream; up.c is nil when there is none. Between
	// requests it may be kept, without its buffer (up.buf nil), for the
	// next request to the same origin: see getUpstream.
	up       bufConn
	upKey    string // pool key of up
	upReused bool   // up served an earlier request

	req, resp head
	tgt       target
	reqChunk  chunkedScanner
	respChunk chunkedScanner

	out     []byte // a head under construction
	key     []byte // the pool key under construction
	vec     vec    // writes of the serving goroutine
	bodyVec vec    // writes of the sendBody goroutine

	bodyErr chan error // the sendBody goroutine's result
	nreq    int
	isHead  bool // the request being served is a HEAD: answers carry no body
	upgrade bool // the request being served is a WebSocket handshake

	g         gate.Grant   // the current request's passage through the policy
	gr        gate.Request // what g was asked for
	throttle  *limits.Bucket
	hostStr   string // the last target host as a string, reused while it repeats
	methodStr string // the last method as a string, reused while it repeats

	obs observation // what the metrics and access log learn of the current request
}

func (cn *conn) reset() {
	cn.p, cn.sess, cn.ctx, cn.pool = nil, nil, nil, nil
	cn.throttle = nil
	cn.gr = gate.Request{}
	cn.up = bufConn{}
	cn.upKey = ""
	cn.req.buf, cn.resp.buf = nil, nil
	cn.tgt = target{}
	cn.nreq = 0
	if cap(cn.out) > 64<<10 {
		cn.out = nil
	}
}

// serve runs the request loop. It reports whether the connection was
// handed to a tunnel (and so must not be closed by the caller).
func (cn *conn) serve() bool {
	p := cn.p
	for {
		if cn.ctx.Err() != nil {
			return false
		}
		wait := p.cfg.IdleTimeout
		if cn.nreq == 0 {
			wait = p.cfg.ReadHeaderTimeout
		}
		cn.isHead = false
		cn.idle.Store(true)
		cn.client.setReadDeadline(monoNow(), wait)
		if cn.ctx.Err() != nil { // a wake may have run before idle was set or the deadline armed
			return false
		}
		n, err := cn.client.readHead(p.cfg.MaxHeaderBytes, p.cfg.ReadHeaderTimeout)
		cn.idle.Store(false)
		if err != nil {
			var pe *parseError
			var ne net.Error
			switch {
			case err == errIdle, err == errIdleTimeout:
			case errors.As(err, &pe):
				cn.writeError(pe.status, pe.reason, false)
			case errors.As(err, &ne) && ne.Timeout() && cn.ctx.Err() == nil:
				cn.writeError(408, "request head not received in time", false)
			}
			return false
		}
		cn.nreq++
		if err := cn.req.parseRequest(cn.client.buf[cn.client.r : cn.client.r+n]); err != nil {
			var pe *parseError
			if errors.As(err, &pe) {
				cn.writeError(pe.status, pe.reason, false)
			}
			return false
		}
		cn.client.r += n
		cn.isHead = string(cn.req.method.of(cn.req.buf)) == "HEAD"
		cn.begin()
		keep, handedOff := cn.handle()
		if handedOff {
			return true
		}
		cn.finish()
		if !keep {
			return false
		}
	}
}

// handle serves one parsed request. It reports whether the client
// connection stays open for another request, and whether it became a
// tunnel.
func (cn *conn) handle() (keep, handedOff bool) {
	p := cn.p
	req := &cn.req
	method := req.method.of(req.buf)
	hasBody := req.chunked || req.contentLength > 0

	isConnect := string(method) == "CONNECT"
	clientKeep := !req.connClose && (req.minor == 1 || req.connKeepAlive)
	r := &cn.gr
	r.Method = cn.internMethod(method)
	r.Target = req.target.of(req.buf)
	r.Authorization = nil
	if !req.proxyAuth.empty() {
		r.Authorization = req.proxyAuth.of(req.buf)
	}
	var err error
	if isConnect {
		r.Protocol, r.Log = acl.Connect, accesslog.ProtoConnect
		err = parseAuthorityForm(r.Target, &cn.tgt)
	} else {
		r.Protocol, r.Log = acl.HTTP, accesslog.ProtoHTTP
		err = parseAbsoluteTarget(r.Target, &cn.tgt)
	}
	if err != nil {
		var pe *parseError
		errors.As(err, &pe)
		cn.sess.Observe(r, &cn.g)
		cn.writeError(pe.status, pe.reason, false)
		return false, false
	}
	// A WebSocket handshake keeps its Upgrade field; the connection becomes
	// a tunnel if the origin switches protocols.
	cn.upgrade = !isConnect && req.minor == 1 && string(method) == "GET" && !hasBody && req.upgradesTo("websocket")
	if cn.upgrade {
		req.headers[req.upgradeIdx].drop = false
		r.Protocol = acl.WebSocket
	}
	r.Host = cn.internHost()
	r.Port = uint16(cn.tgt.port)
	switch k := cn.sess.Authorize(r, &cn.g); k {
	case gate.OK:
	case gate.NeedAuth:
		keep := !hasBody && req.minor == 1 && !req.connClose
		cn.writeError(407, k.Reason(), keep)
		return keep, false
	case gate.Denied:
		keep := !hasBody && clientKeep && !isConnect
		cn.writeError(403, k.Reason(), keep)
		return keep, false
	default:
		cn.writeError(k.Status(), k.Reason(), false)
		return false, false
	}
	cn.throttle = cn.g.Throttle()
	if isConnect {
		return false, cn.connect()
	}

	isHead := cn.isHead
	idempotent := isIdempotent(method)
	clientMinor := req.minor
	req.dropConnectionListed()
	cn.buildRequestHead()
	cn.key = appendHostPort(cn.key[:0], &cn.tgt)

	// The part of the request body already buffered goes out with the head.
	var inBuf []byte
	var remaining int64 // Content-Length bytes not yet buffered
	bodyDone := true
	switch {
	case req.chunked:
		cn.reqChunk = chunkedScanner{}
		avail := cn.client.buffered()
		m, err := scanChunked(&cn.reqChunk, avail)
		if err != nil {
			cn.writeError(400, "malformed chunked request body", false)
			return false, false
		}
		inBuf = avail[:m]
		cn.client.r += m
		bodyDone = cn.reqChunk.done()
	case req.contentLength > 0:
		avail := cn.client.buffered()
		n := int64(len(avail))
		if n > req.contentLength {
			n = req.contentLength
		}
		inBuf = avail[:n]
		cn.client.r += int(n)
		remaining = req.contentLength - n
		bodyDone = remaining == 0
	}

	cn.obs.up = int64(len(inBuf))

	// Send the request, retrying once on a fresh connection when a pooled
	// one turns out dead and the request can be replayed.
	canRetry := idempotent && bodyDone
	for attempt := 0; ; attempt++ {
		if err = cn.getUpstream(attempt > 0); err != nil {
			cn.writeDialError(err)
			return false, false
		}
		cn.up.setWriteDeadline(monoNow(), p.cfg.WriteTimeout)
		err = cn.vec.write(cn.up.tcp, cn.out, inBuf)
		if err == nil && bodyDone {
			cn.sent()
			err = cn.readResponseHead(clientMinor)
		}
		if err == nil || !(cn.upReused && canRetry && isDeadConnErr(err)) || attempt > 0 {
			break
		}
		cn.dropUpstream()
	}
	if err != nil {
		cn.dropUpstream()
		cn.writeUpstreamError(err)
		return false, false
	}

	streaming := false
	if !bodyDone {
		streaming = true
		cn.sent()
		go cn.sendBody(remaining, req.chunked)
		if err := cn.readResponseHead(clientMinor); err != nil {
			cn.finishBody()
			cn.dropUpstream()
			cn.writeUpstreamError(err)
			return false, false
		}
	}

	if cn.resp.status == 101 {
		return false, cn.switchProtocols()
	}

	// Frame and forward the response.
	resp := &cn.resp
	mode := bodyClose
	switch {
	case isHead || resp.status == 204 || resp.status == 304:
		mode = bodyNone
	case resp.chunked:
		mode = bodyChunked
	case resp.contentLength >= 0:
		mode = bodyLength
	}
	dechunk := mode == bodyChunked && clientMinor == 0
	if mode == bodyClose || dechunk || cn.ctx.Err() != nil {
		// These bodies end with the connection; and once a shutdown
		// has begun, this is the connection's last answer.
		clientKeep = false
	}
	upKeep := resp.minor == 1 && !resp.connClose && mode != bodyClose
	if streaming && !upKeep {
		// The upstream closes after this response and the request body
		// may still be coming: if so it is cut off and the client
		// connection closed, so say so in any case.
		clientKeep = false
	}
	resp.dropConnectionListed()
	cn.buildResponseHead(clientKeep, clientMinor, dechunk)

	cn.client.setWriteDeadline(monoNow(), p.cfg.WriteTimeout)
	cn.g.Answer(resp.status, 0)
	v0 := cn.vec.n
	err = cn.forwardResponseBody(mode, dechunk)
	cn.obs.down = cn.vec.n - v0 + cn.obs.down
	if mode != bodyNone {
		// The head went through vec: not counted. A chunked body found
		// malformed before anything was written sent no head either.
		cn.obs.down = max(0, cn.obs.down-int64(len(cn.out)))
	}
	if streaming && cn.finishBody() != nil {
		// The response ended before the request body did: neither
		// connection is at a message boundary.
		clientKeep, upKeep = false, false
	}
	if err != nil {
		cn.dropUpstream()
		return false, false
	}
	if upKeep && cn.up.r == cn.up.w && clientKeep && cn.pool != nil {
		// Kept for the client's next request, which most often goes to
		// the same origin: no pool round trip, no shared lock, and its
		// deadlines stay armed. Its buffer goes back meanwhile; the
		// connection goes to the pool when the client's next request
		// is for another origin or the client connection ends.
		cn.up.release()
	} else if upKeep && cn.up.r == cn.up.w {
		cn.putUpstream()
	} else {
		cn.dropUpstream()
	}
	return clientKeep, false
}

// isIdempotent reports whether a request of this method may be sent again
// after a connection failure (RFC 9110 §9.2.2).
func isIdempotent(m []byte) bool {
	switch string(m) {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}

// isDeadConnErr reports whether err shows a pooled connection that the
// origin had already closed: nothing of a response arrived.
func isDeadConnErr(err error) bool {
	return errors.Is(err, errUpstreamClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, errConnReset) || errors.Is(err, errBrokenPipe)
}

// getUpstream takes an idle connection for cn.key from the pool or dials
// one. fresh forces a dial.
func (cn *conn) getUpstream(fresh bool) error {
	var c *net.TCPConn
	cn.upReused = false
	if cn.up.c != nil && cn.up.buf == nil {
		// The upstream the previous request left: reuse it for the same
		// origin if this request's rule admits its address, else offer
		// it to others.
		if !fresh && cn.upKey == string(cn.key) {
			if cn.g.Admits(cn.up.tcp) {
				cn.upReused = true
				cn.up.takeBuf(&upstreamBufs)
				return nil
			}
			// Not for this request, maybe for another: the pool's
			// newest connection to this origin is this one, so dial.
			fresh = true
		}
		cn.putUpstream()
	}
	if !fresh && cn.pool != nil {
		if c = cn.pool.Get(cn.key); c != nil {
			cn.upReused = true
			if !cn.g.Admits(c) {
				c.Close()
				c, cn.upReused = nil, false
			}
		}
	}
	if c == nil {
		addr := string(cn.key)
		var err error
		c, err = cn.g.Dial(context.WithoutCancel(cn.ctx), addr)
		if err != nil {
			return err
		}
		cn.upKey = addr
	} else if cn.upKey == "" || cn.upKey != string(cn.key) {
		cn.upKey = string(cn.key)
	}
	cn.up.attach(c, &upstreamBufs)
	return nil
}

// internMethod returns the request method as a string, reusing the last
// one while it repeats, as it does on a connection.
func (cn *conn) internMethod(m []byte) string {
	if string(m) != cn.methodStr {
		cn.methodStr = string(m)
	}
	return cn.methodStr
}

// internHost returns the target host as a string, reusing the last one
// while it repeats.
func (cn *conn) internHost() string {
	if string(cn.tgt.host) != cn.hostStr {
		cn.hostStr = string(cn.tgt.host)
	}
	return cn.hostStr
}

// sent notes that the request is complete upstream: the wait for the
// response's first byte starts.
func (cn *conn) sent() {
	if cn.g.Observing() {
		cn.obs.sent = time.Now()
	}
}

// pace waits, for a user whose bytes are paced, until n more bytes may
// pass; it is called before the bytes are written.
func (cn *conn) pace(n int) {
	if cn.throttle != nil && n > 0 {
		cn.throttle.Wait(cn.ctx, n)
	}
}

// releaseUpstream hands on an upstream kept from the last request when
// the client connection ends: to the pool when it is idle at a message
// boundary, closed otherwise.
func (cn *conn) releaseUpstream() {
	if cn.up.c != nil && cn.up.buf == nil {
		cn.putUpstream()
	} else {
		cn.dropUpstream()
	}
}

// putUpstream returns the current upstream to the pool.
func (cn *conn) putUpstream() {
	if cn.up.c == nil {
		return
	}
	c := cn.up.tcp
	cn.up.release()
	cn.up.c, cn.up.tcp = nil, nil
	if cn.pool == nil {
		c.Close()
		return
	}
	// Its deadlines stay armed: whoever takes it from the pool arms its
	// own before reading or writing (attach forgets them), and an idle
	// pooled connection is neither read nor written.
	cn.pool.Put(cn.upKey, c)
}

// dropUpstream closes the current upstream.
func (cn *conn) dropUpstream() {
	if cn.up.c == nil {
		return
	}
	cn.up.c.Close()
	cn.up.release()
	cn.up.c, cn.up.tcp = nil, nil
}

var (
	errUpstreamClosed = errors.New("httpproxy: upstream closed the connection without a response")
	errConnReset      = syscall.ECONNRESET
	errBrokenPipe     = syscall.EPIPE
)

// readResponseHead reads the final response head into cn.resp, passing
// 1xx informational responses on to HTTP/1.1 clients.
func (cn *conn) readResponseHead(clientMinor int) error {
	p := cn.p
	for {
		cn.up.setReadDeadline(monoNow(), p.cfg.ResponseHeaderTimeout)
		n, err := cn.up.readHead(p.cfg.MaxHeaderBytes, p.cfg.ResponseHeaderTimeout)
		if err != nil {
			if err == errIdle {
				return errUpstreamClosed
			}
			if err == errHeadTooLarge {
				return errRespTooLarge
			}
			return err
		}
		if t := cn.obs.sent; !t.IsZero() {
			cn.g.FirstByte(t)
			cn.obs.sent = time.Time{}
		}
		if err := cn.resp.parseResponse(cn.up.buf[cn.up.r : cn.up.r+n]); err != nil {
			return err
		}
		cn.up.r += n
		if cn.resp.status >= 200 {
			return nil
		}
		if cn.resp.status == 101 {
			if cn.upgrade && cn.resp.upgradesTo("websocket") {
				return nil
			}
			return errUnexpected101
		}
		if clientMinor == 1 {
			cn.resp.dropConnectionListed()
			cn.buildInterimHead()
			cn.client.setWriteDeadline(monoNow(), p.cfg.WriteTimeout)
			if _, err := cn.client.c.Write(cn.out); err != nil {
				return &clientError{err}
			}
		}
	}
}

var (
	errRespTooLarge  = errors.New("httpproxy: response head too large")
	errUnexpected101 = errors.New("httpproxy: upstream switched protocols without an upgrade request")
)

// clientError marks a failure on the client side of an exchange.
type clientError struct{ err error }

func (e *clientError) Error() string { return "httpproxy: write to client: " + e.err.Error() }
func (e *clientError) Unwrap() error { return e.err }

// forwardResponseBody writes the response head in cn.out and the body.
func (cn *conn) forwardResponseBody(mode int, dechunk bool) error {
	up := &cn.up
	client := cn.client.c
	timeout := cn.p.cfg.WriteTimeout
	switch mode {
	case bodyNone:
		_, err := client.Write(cn.out)
		return err
	case bodyLength:
		avail := up.buffered()
		n := int64(len(avail))
		if n > cn.resp.contentLength {
			n = cn.resp.contentLength
		}
		cn.pace(int(n))
		if err := cn.vec.write(client, cn.out, avail[:n]); err != nil {
			return err
		}
		up.r += int(n)
		cn.obs.down = cn.resp.contentLength - n // moved by copyN, past the vec
		return cn.copyN(&cn.client, up, cn.resp.contentLength-n)
	case bodyChunked:
		cn.respChunk = chunkedScanner{}
		return cn.copyChunked(&cn.vec, &cn.client, up, &cn.respChunk, cn.out, dechunk)
	default: // bodyClose
		avail := up.buffered()
		cn.pace(len(avail))
		if err := cn.vec.write(client, cn.out, avail); err != nil {
			return err
		}
		up.r = up.w
		for {
			up.setReadDeadline(monoNow(), timeout)
			err := up.fill(len(up.buf))
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			cn.pace(len(up.buffered()))
			cn.client.setWriteDeadline(monoNow(), timeout)
			if _, err := client.Write(up.buffered()); err != nil {
				return err
			}
			cn.obs.down += int64(len(up.buffered()))
			up.r = up.w
		}
	}
}

// copyN moves n bytes from src to dst: with splice for large remainders
// between TCP sockets, through src's buffer otherwise.
func (cn *conn) copyN(dst, src *bufConn, n int64) error {
	timeout := cn.p.cfg.WriteTimeout
	dstTCP := dst.tcp
	for n > 0 {
		if n >= spliceMin && src.r == src.w && dstTCP != nil && src.tcp != nil {
			seg := n
			if seg > spliceSegment {
				seg = spliceSegment
			}
			if cn.throttle != nil {
				seg = min(seg, int64(max(cn.throttle.Burst(), 16<<10)))
				cn.pace(int(seg))
			}
			dst.armLowat()
			now := monoNow()
			dst.setWriteDeadline(now, timeout)
			src.setReadDeadline(now, timeout)
			lr := io.LimitedReader{R: src.tcp, N: seg}
			m, err := dstTCP.ReadFrom(&lr)
			n -= m
			if err != nil {
				return err
			}
			if m < seg {
				return io.ErrUnexpectedEOF
			}
			continue
		}
		if src.r == src.w {
			src.setReadDeadline(monoNow(), timeout)
			if err := src.fill(len(src.buf)); err != nil {
				if err == io.EOF {
					return io.ErrUnexpectedEOF
				}
				return err
			}
		}
		b := src.buffered()
		if int64(len(b)) > n {
			b = b[:n]
		}
		cn.pace(len(b))
		dst.setWriteDeadline(monoNow(), timeout)
		if _, err := dst.c.Write(b); err != nil {
			return err
		}
		src.r += len(b)
		n -= int64(len(b))
	}
	return nil
}

// copyChunked forwards a chunked body from src to dst, verbatim or, when
// dechunk is set, as its bare data, after first writing head (which may
// be nil).
func (cn *conn) copyChunked(v *vec, dst, src *bufConn, cs *chunkedScanner, head []byte, dechunk bool) error {
	timeout := cn.p.cfg.WriteTimeout
	for {
		avail := src.buffered()
		var out []byte
		if dechunk {
			// Gather the data runs of the buffered bytes in place.
			w, m := 0, 0
			for m < len(avail) && !cs.done() {
				k, data, err := cs.step(avail[m:])
				if err != nil {
					return err
				}
				if data {
					w += copy(avail[w:], avail[m:m+k])
				}
				m += k
			}
			out = avail[:w]
			src.r += m
		} else {
			m, err := scanChunked(cs, avail)
			if err != nil {
				return err
			}
			out = avail[:m]
			src.r += m
		}
		if len(head) > 0 || len(out) > 0 {
			cn.pace(len(out))
			dst.setWriteDeadline(monoNow(), timeout)
			if err := v.write(dst.c, head, out); err != nil {
				return err
			}
			head = nil
		}
		if cs.done() {
			return nil
		}
		src.setReadDeadline(monoNow(), timeout)
		if err := src.fill(len(src.buf)); err != nil {
			if err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
}

// scanChunked advances cs over as much of p as belongs to the body and
// returns how many bytes that is.
func scanChunked(cs *chunkedScanner, p []byte) (int, error) {
	m := 0
	for m < len(p) && !cs.done() {
		k, _, err := cs.step(p[m:])
		if err != nil {
			return m, err
		}
		m += k
	}
	return m, nil
}

// sendBody streams the rest of a request body from the client to the
// upstream; it runs on its own goroutine, joined by finishBody.
func (cn *conn) sendBody(remaining int64, chunked bool) {
	var err error
	if chunked {
		v0 := cn.bodyVec.n
		err = cn.copyChunked(&cn.bodyVec, &cn.up, &cn.client, &cn.reqChunk, nil, false)
		cn.obs.up += cn.bodyVec.n - v0
	} else {
		err = cn.copyN(&cn.up, &cn.client, remaining)
		if err == nil {
			cn.obs.up += remaining
		}
	}
	cn.bodyErr <- err
}

// finishBody joins sendBody once the response is over (or failed),
// cutting it short if it is still waiting on either side, and returns its
// error: nil only when the whole body was sent.
func (cn *conn) finishBody() error {
	select {
	case err := <-cn.bodyErr:
		return err
	default:
	}
	past := time.Unix(1, 0)
	cn.client.c.SetReadDeadline(past)
	cn.up.c.SetWriteDeadline(past)
	err := <-cn.bodyErr
	cn.client.rdl, cn.up.wdl = 0, 0
	return err
}

// vec writes two buffers with one writev; its fields are reused so that
// a write allocates nothing. A vec is used by one goroutine at a time.
type vec struct {
	n    int64 // bytes written so far, for the metrics
	iov  [2][]byte
	bufs net.Buffers
	join []byte // a and b joined, for connections without writev (TLS)
}

// maxJoin bounds what vec.write copies together for a connection without
// writev, so that head and a small body leave in one TLS record.
const maxJoin = 16 << 10

// write writes a and b with one system call where it can.
func (v *vec) write(c net.Conn, a, b []byte) error {
	v.n += int64(len(a) + len(b))
	if len(b) == 0 {
		_, err := c.Write(a)
		return err
	}
	if len(a) == 0 {
		_, err := c.Write(b)
		return err
	}
	if _, ok := c.(*net.TCPConn); !ok {
		if len(a)+len(b) > maxJoin {
			if _, err := c.Write(a); err != nil {
				return err
			}
			_, err := c.Write(b)
			return err
		}
		v.join = append(append(v.join[:0], a...), b...)
		_, err := c.Write(v.join)
		return err
	}
	v.iov[0], v.iov[1] = a, b
	v.bufs = v.iov[:]
	_, err := v.bufs.WriteTo(c)
	v.iov[0], v.iov[1] = nil, nil
	v.bufs = nil
	return err
}

// connect serves a CONNECT request: dial, answer 200, and hand both
// connections to the tunnel engine. It reports whether the client
// connection was handed off.
func (cn *conn) connect() bool {
	cn.key = appendHostPort(cn.key[:0], &cn.tgt)
	upc, err := cn.g.Dial(context.WithoutCancel(cn.ctx), string(cn.key))
	if err != nil {
		cn.writeDialError(err)
		return false
	}
	cn.g.Answer(200, 0)
	client := cn.client.c
	client.SetWriteDeadline(time.Now().Add(cn.p.cfg.WriteTimeout))
	if _, err := client.Write(connectEstablished); err != nil {
		upc.Close()
		return false
	}
	if rest := cn.client.buffered(); len(rest) > 0 {
		// Bytes the client sent right behind its CONNECT (a TLS
		// ClientHello, say) belong to the tunnel.
		upc.SetWriteDeadline(time.Now().Add(cn.p.cfg.WriteTimeout))
		if _, err := upc.Write(rest); err != nil {
			upc.Close()
			return false
		}
		cn.client.r = cn.client.w
	}
	return cn.tunnel(upc)
}

// switchProtocols completes a WebSocket handshake the origin accepted:
// it passes the 101 on, with any bytes that came behind either head, and
// turns the connection into a tunnel. It reports whether the client
// connection was handed off.
func (cn *conn) switchProtocols() bool {
	cn.resp.headers[cn.resp.upgradeIdx].drop = false
	cn.resp.dropConnectionListed()
	cn.buildSwitchHead()
	cn.g.SetProtocol(accesslog.ProtoWebSocket)
	cn.g.Answer(101, 0)
	upc := cn.up.tcp
	client := cn.client.c
	client.SetWriteDeadline(time.Now().Add(cn.p.cfg.WriteTimeout))
	if err := cn.vec.write(client, cn.out, cn.up.buffered()); err != nil {
		cn.dropUpstream()
		return false
	}
	// The upstream leaves the exchange: it belongs to the tunnel now.
	cn.up.release()
	cn.up.c, cn.up.tcp = nil, nil
	if rest := cn.client.buffered(); len(rest) > 0 {
		upc.SetWriteDeadline(time.Now().Add(cn.p.cfg.WriteTimeout))
		if _, err := upc.Write(rest); err != nil {
			upc.Close()
			return false
		}
		cn.client.r = cn.client.w
	}
	return cn.tunnel(upc)
}

// tunnel relays the client connection and upc until both directions end
// (see gate.Grant.Tunnel): on the worker's splice engine for a plain client
// socket, with tunnel.RelayTLS for a TLS client, by goroutines for a paced
// user or elsewhere. It takes ownership of both connections and reports
// true.
func (cn *conn) tunnel(upc *net.TCPConn) bool {
	if cn.client.lowat {
		// A tunnel is relayed best with the send queue the kernel
		// chooses: its relay is the busier side.
		setNotSentLowat(cn.client.tcp, 0)
	}
	// A parked TLS relay holds no buffer while idle: the connection's
	// read buffer (empty now) goes back to its pool first.
	cn.g.Tunnel(cn.client.c, upc, cn.client.release)
	return true
}

var connectEstablished = []byte("HTTP/1.1 200 Connection established\r\n\r\n")
