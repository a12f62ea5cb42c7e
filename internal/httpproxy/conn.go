package httpproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/tunnel"
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
	p          *Proxy
	eng        *tunnel.Engine
	ctx        context.Context
	client     bufConn
	clientAddr netip.Addr
	idle       atomic.Bool // waiting for the next request head; read by wake

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

	certAuth bool   // a verified TLS client certificate authenticated the connection
	certUser string // its subject's common name

	user       string         // the user the current request authenticated as; "" none
	authMemo   []byte         // the Proxy-Authorization value last accepted on this connection
	authUser   string         // the user authMemo authenticated
	authAt     time.Duration  // monoNow when authMemo was accepted
	authSet    bool           // authMemo, authUser and authAt hold a verdict
	limUser    string         // the user the connection is counted for (Limiter.UserConn); "" none
	throttle   *limits.Bucket // limUser's byte bucket; nil = not paced
	decision   acl.Decision   // the current request's access decision (with Access set)
	hostStr    string         // the last target host as a string, reused while it repeats
	methodStr  string         // the last method as a string, reused while it repeats
	retryAfter time.Duration  // Retry-After of the next 429 answer

	clientAddrPort netip.AddrPort // the client's address and port, for the access log
	obs            observation    // what the metrics and access log learn of the current request
}

func (cn *conn) reset() {
	cn.p, cn.eng, cn.ctx = nil, nil, nil
	cn.certAuth, cn.certUser = false, ""
	cn.user, cn.limUser, cn.throttle = "", "", nil
	cn.authMemo, cn.authUser, cn.authSet = cn.authMemo[:0], "", false
	cn.decision = acl.Decision{}
	cn.retryAfter = 0
	cn.clientAddr = netip.Addr{}
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

	cn.user = cn.certUser
	if p.cfg.Auth != nil && !cn.certAuth {
		ok := false
		if !req.proxyAuth.empty() {
			cn.user, ok = cn.checkAuth(req.proxyAuth.of(req.buf))
			if !ok && p.cfg.Limiter != nil {
				if wait := p.cfg.Limiter.AuthFailed(cn.clientAddr); wait > 0 {
					cn.retryAfter = wait
					cn.writeError(429, "too many failed authentications from this address; try again later", false)
					return false, false
				}
			}
		}
		if !ok {
			keep := !hasBody && req.minor == 1 && !req.connClose
			cn.writeError(407, "proxy authentication required", keep)
			return keep, false
		}
	}
	if !cn.countUser(cn.user) {
		cn.writeError(429, "too many connections for this user", false)
		return false, false
	}

	if string(method) == "CONNECT" {
		return false, cn.connect()
	}
	if err := parseAbsoluteTarget(req.target.of(req.buf), &cn.tgt); err != nil {
		var pe *parseError
		errors.As(err, &pe)
		cn.writeError(pe.status, pe.reason, false)
		return false, false
	}

	clientKeep := !req.connClose && (req.minor == 1 || req.connKeepAlive)
	isHead := cn.isHead
	idempotent := isIdempotent(method)
	clientMinor := req.minor
	// A WebSocket handshake keeps its Upgrade field; the connection becomes
	// a tunnel if the origin switches protocols.
	cn.upgrade = clientMinor == 1 && string(method) == "GET" && !hasBody && req.upgradesTo("websocket")
	if cn.upgrade {
		req.headers[req.upgradeIdx].drop = false
	}
	proto := acl.HTTP
	if cn.upgrade {
		proto = acl.WebSocket
	}
	if !cn.decide(proto, method) {
		keep := !hasBody && clientKeep
		cn.writeError(403, "access denied by policy", keep)
		return keep, false
	}
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
	var err error
	for attempt := 0; ; attempt++ {
		if err = cn.getUpstream(attempt > 0); err != nil {
			cn.writeDialError(err)
			return false, false
		}
		cn.up.setWriteDeadline(monoNow(), p.cfg.WriteTimeout)
		err = cn.vec.write(cn.up.tcp, cn.out, inBuf)
		if err == nil && bodyDone {
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
	cn.obs.status = resp.status
	v0 := cn.vec.n
	err = cn.forwardResponseBody(mode, dechunk)
	cn.obs.down = cn.vec.n - v0 + cn.obs.down
	if streaming && cn.finishBody() != nil {
		// The response ended before the request body did: neither
		// connection is at a message boundary.
		clientKeep, upKeep = false, false
	}
	if err != nil {
		cn.dropUpstream()
		return false, false
	}
	if upKeep && cn.up.r == cn.up.w && clientKeep && p.cfg.Pool != nil {
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

// authMemoTTL is how long a connection reuses the verdict on the
// Proxy-Authorization value it last had accepted, without asking the
// Authenticator: a user removed or a password changed is refused on
// connections already open within this time.
const authMemoTTL = time.Second

// authMemoMax bounds the value a connection memoises; longer ones are
// checked on every request.
const authMemoMax = 1024

// checkAuth checks a Proxy-Authorization value. A client repeats the same
// value on every request of a connection: while it does, the verdict the
// Authenticator gave at most authMemoTTL ago stands, which saves hashing
// the value for the Authenticator's cache on every request.
func (cn *conn) checkAuth(value []byte) (string, bool) {
	now := monoNow()
	if cn.authSet && now-cn.authAt < authMemoTTL && string(value) == string(cn.authMemo) {
		return cn.authUser, true
	}
	user, ok := cn.p.cfg.Auth.Check(value)
	cn.authSet = ok && len(value) <= authMemoMax
	if cn.authSet {
		cn.authMemo = append(cn.authMemo[:0], value...)
		cn.authUser, cn.authAt = user, now
	}
	return user, ok
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
	p := cn.p
	var c *net.TCPConn
	cn.upReused = false
	if cn.up.c != nil && cn.up.buf == nil {
		// The upstream the previous request left: reuse it for the same
		// origin if this request's rule admits its address, else offer
		// it to others.
		if !fresh && cn.upKey == string(cn.key) {
			if cn.admits(cn.up.tcp) {
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
	if !fresh && p.cfg.Pool != nil {
		if c = p.cfg.Pool.Get(cn.key); c != nil {
			cn.upReused = true
			if !cn.admits(c) {
				c.Close()
				c, cn.upReused = nil, false
			}
		}
	}
	if c == nil {
		addr := string(cn.key)
		var err error
		var t0 time.Time
		if cn.obs.on {
			t0 = time.Now()
		}
		c, err = p.cfg.Dialer.DialPermit(context.WithoutCancel(cn.ctx), addr, cn.permitter())
		cn.dialed(t0, c, err)
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

// admits reports whether the current request may use c, an upstream
// connection made for an earlier request: one kept or pooled may have
// been made under another request's rule, so its address is checked
// against this one's.
func (cn *conn) admits(c *net.TCPConn) bool {
	return cn.p.cfg.Access == nil || cn.p.cfg.Dialer.Check(remoteAddrPort(c), &cn.decision) == nil
}

// remoteAddrPort returns the address c is connected to.
func remoteAddrPort(c *net.TCPConn) netip.AddrPort {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort()
	}
	return netip.AddrPort{}
}

// countUser counts the connection as user's with the Limiter when the
// user changes, and fetches the user's byte bucket. It reports false when
// the user has too many connections.
func (cn *conn) countUser(user string) bool {
	lim := cn.p.cfg.Limiter
	if lim == nil || user == cn.limUser {
		return true
	}
	if cn.limUser != "" {
		lim.UserDone(cn.limUser)
		cn.limUser, cn.throttle = "", nil
	}
	if user == "" {
		return true
	}
	if !lim.UserConn(user) {
		return false
	}
	cn.limUser = user
	cn.throttle = lim.Throttle(user)
	return true
}

// decide asks the Access policy about the request for cn.tgt and records
// the decision for the dial. It reports whether the request may proceed,
// logging a refusal at debug level with the rule that made it.
func (cn *conn) decide(proto acl.Protocol, method []byte) bool {
	a := cn.p.cfg.Access
	if a == nil {
		return true
	}
	if string(cn.tgt.host) != cn.hostStr {
		cn.hostStr = string(cn.tgt.host)
	}
	if string(method) != cn.methodStr {
		cn.methodStr = string(method)
	}
	cn.decision = a.Decide(acl.Request{
		Client:   cn.clientAddr,
		User:     cn.user,
		Host:     cn.hostStr,
		Port:     uint16(cn.tgt.port),
		Method:   cn.methodStr,
		Protocol: proto,
	})
	if cn.decision.Allow {
		return true
	}
	cn.logDenied(cn.decision.Rule, "")
	return false
}

// logDenied logs a refused request at debug level.
func (cn *conn) logDenied(rule, reason string) {
	log := cn.p.log
	if !log.Enabled(cn.ctx, slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{
		slog.String("client", cn.clientAddr.String()), slog.String("user", cn.user),
		slog.String("target", string(appendHostPort(nil, &cn.tgt))), slog.String("rule", rule),
	}
	if reason != "" {
		attrs = append(attrs, slog.String("reason", reason))
	}
	log.LogAttrs(cn.ctx, slog.LevelDebug, "httpproxy: access denied", attrs...)
}

// permitter returns what the dialer checks resolved addresses with: the
// request's decision, or nil without an Access policy.
func (cn *conn) permitter() dialer.Permitter {
	if cn.p.cfg.Access == nil {
		return nil
	}
	return &cn.decision
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
	if cn.p.cfg.Pool == nil {
		c.Close()
		return
	}
	// Its deadlines stay armed: whoever takes it from the pool arms its
	// own before reading or writing (attach forgets them), and an idle
	// pooled connection is neither read nor written.
	cn.p.cfg.Pool.Put(cn.upKey, c)
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
	req := &cn.req
	if err := parseAuthorityForm(req.target.of(req.buf), &cn.tgt); err != nil {
		var pe *parseError
		errors.As(err, &pe)
		cn.writeError(pe.status, pe.reason, false)
		return false
	}
	if !cn.decide(acl.Connect, req.method.of(req.buf)) {
		cn.writeError(403, "access denied by policy", false)
		return false
	}
	cn.key = appendHostPort(cn.key[:0], &cn.tgt)
	var t0 time.Time
	if cn.obs.on {
		t0 = time.Now()
	}
	upc, err := cn.p.cfg.Dialer.DialPermit(context.WithoutCancel(cn.ctx), string(cn.key), cn.permitter())
	cn.dialed(t0, upc, err)
	if err != nil {
		cn.writeDialError(err)
		return false
	}
	cn.obs.proto, cn.obs.status = accesslog.ProtoConnect, 200
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
	cn.obs.proto, cn.obs.status = accesslog.ProtoWebSocket, 101
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

// tunnel relays the client connection and upc until both directions end:
// on the worker's splice engine for a plain client socket, with
// tunnel.RelayTLS for a TLS client, by goroutines otherwise. It takes
// ownership of both connections and reports true.
func (cn *conn) tunnel(upc *net.TCPConn) bool {
	client := cn.client.c
	client.SetDeadline(time.Time{})
	upc.SetDeadline(time.Time{})
	if cn.client.lowat {
		// A tunnel is relayed best with the send queue the kernel
		// chooses: its relay is the busier side.
		setNotSentLowat(cn.client.tcp, 0)
	}
	report := cn.tunnelDone() // nil when nothing is observed
	if cn.throttle != nil {
		// A paced user's tunnel is relayed by goroutines that can wait.
		limits.RelayPaced(cn.ctx, client, upc, cn.throttle, cn.p.cfg.TunnelIdleTimeout)
		client.Close()
		upc.Close()
		if report != nil {
			report(0, 0, nil)
		}
		return true
	}
	if cn.eng != nil && cn.client.tcp != nil {
		var done func(tunnel.Result)
		if lim := cn.p.cfg.Limiter; lim != nil {
			// The tunnel outlives ServeConn: it carries the
			// connection's counts until it ends.
			release, user := lim.Handoff(client), cn.limUser
			cn.limUser = ""
			if release != nil || user != "" {
				done = func(tunnel.Result) {
					if user != "" {
						lim.UserDone(user)
					}
					if release != nil {
						release()
					}
				}
			}
		}
		done = engineDone(report, done)
		if err := cn.eng.Add(cn.client.tcp, upc, done); err != nil && done != nil {
			done(tunnel.Result{Err: err})
		}
		return true
	}
	if tc, ok := client.(*tls.Conn); ok {
		if raw, ok := tunnel.RawTCP(tc); ok {
			// Parked on socket readiness with no buffer while idle:
			// the connection's read buffer (empty now) goes back to
			// its pool first. Shutdown lets the relay run until the
			// drain ends and the server closes the socket.
			cn.client.release()
			up, down, err := tunnel.RelayTLS(context.WithoutCancel(cn.ctx), tc, raw, upc, cn.p.cfg.TunnelIdleTimeout)
			if report != nil {
				report(up, down, err)
			}
			return true
		}
	}
	relay(client, upc)
	client.Close()
	upc.Close()
	if report != nil {
		report(0, 0, nil)
	}
	return true
}

var connectEstablished = []byte("HTTP/1.1 200 Connection established\r\n\r\n")

// closeWriter is a connection whose write half can be shut down alone.
type closeWriter interface{ CloseWrite() error }

// relay copies both ways between a and b until both directions end,
// passing half-closes through. It serves when no tunnel engine is given
// or the client connection is not a plain TCP socket.
func relay(a net.Conn, b *net.TCPConn) {
	done := make(chan struct{})
	go func() {
		io.Copy(b, a)
		b.CloseWrite()
		close(done)
	}()
	io.Copy(a, b)
	if cw, ok := a.(closeWriter); ok {
		cw.CloseWrite()
	}
	<-done
}
