package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/route"
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
	client http1.Conn
	idle   atomic.Bool // waiting for the next request head; read by wake

	// up is the current upstream; up.C is nil when there is none. Between
	// requests it may be kept, without its buffer (up.Buf nil), for the
	// next request to the same origin: see getUpstream.
	up       http1.Conn
	upKey    string        // pool key of up
	upOwner  string        // who may reuse up (gate.Grant.PoolOwner of its dial)
	fwd      *route.Parent // the HTTP parent the request goes to in absolute form; nil = none
	maxFwd   int           // the Max-Forwards the forwarded TRACE or OPTIONS carries; -1 = the client's fields as they are
	upReused bool          // up served an earlier request

	req, resp http1.Head
	tgt       target
	reqChunk  http1.ChunkedScanner
	respChunk http1.ChunkedScanner

	out     []byte // a head under construction
	key     []byte // the pool key under construction
	via     []byte // the request's Via values, joined
	vec     vec    // writes of the serving goroutine
	bodyVec vec    // writes of the sendBody goroutine

	bodyErr chan error         // the sendBody goroutine's result
	rw      http1.ResponseWait // the wait for the response head while sendBody runs
	waitRW  bool               // readResponseHead waits through rw
	nreq    int
	isHead  bool // the request being served is a HEAD: answers carry no body
	metered bool // the request's bytes count against its user's byte quota as they move (gate.Grant.Meter)
	upgrade bool // the request being served is a WebSocket handshake
	interim bool // a 1xx answer of the request's upstream went to the client

	g         gate.Grant   // the current request's passage through the policy
	gr        gate.Request // what g was asked for
	hostStr   string       // the last target host as a string, reused while it repeats
	methodStr string       // the last method as a string, reused while it repeats

	obs observation // what the metrics and access log learn of the current request
}

func (cn *conn) reset() {
	cn.p, cn.sess, cn.ctx, cn.pool = nil, nil, nil, nil
	cn.gr = gate.Request{}
	cn.up = http1.Conn{}
	cn.upKey, cn.upOwner = "", ""
	cn.req.Buf, cn.resp.Buf = nil, nil
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
		cn.client.ArmReadDeadline(http1.MonoNow(), wait)
		if cn.ctx.Err() != nil { // a wake may have run before idle was set or the deadline armed
			return false
		}
		n, err := cn.client.ReadHead(p.cfg.MaxHeaderBytes, p.cfg.ReadHeaderTimeout)
		cn.idle.Store(false)
		if err != nil {
			// Nothing of a request (a close or an idle timeout) is no
			// refusal; a head begun and not finished is.
			var pe *http1.ParseError
			var ne net.Error
			switch {
			case err == http1.ErrIdle, err == http1.ErrIdleTimeout:
			case errors.As(err, &pe):
				cn.req.ParseRequestLine(cn.client.Buffered())
				cn.rejectHead(pe.Status, pe.Reason, headReason(pe), err)
			case errors.As(err, &ne) && ne.Timeout() && cn.ctx.Err() == nil:
				cn.req.ParseRequestLine(cn.client.Buffered())
				cn.rejectHead(408, "request head not received in time", accesslog.ReasonHeadTimeout, err)
			}
			return false
		}
		cn.nreq++
		if err := cn.req.ParseRequest(cn.client.Buf[cn.client.R : cn.client.R+n]); err != nil {
			var pe *http1.ParseError
			if errors.As(err, &pe) {
				cn.rejectHead(pe.Status, pe.Reason, headReason(pe), err)
			}
			return false
		}
		cn.client.R += n
		cn.isHead = string(cn.req.Method.Of(cn.req.Buf)) == "HEAD"
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

// rejectHead refuses a request head that was not whole or did not parse:
// it is logged with what cn.req holds of its request line (nothing
// unless the line parsed: never a header's value), and answered status
// with why.
func (cn *conn) rejectHead(status int, why, reason string, cause error) {
	r := gate.Request{Log: accesslog.ProtoHTTP}
	if req := &cn.req; !req.Method.Empty() {
		m := req.Method.Of(req.Buf)
		if string(m) == "CONNECT" {
			r.Log = accesslog.ProtoConnect
		}
		r.Method = cn.internMethod(m)
		r.Target = req.Target.Of(req.Buf)
	}
	cn.sess.Reject(&r, &cn.g, status, reason, cause)
	cn.writeError(status, why, false)
}

// headReason returns the access log's reason for a refused request head.
func headReason(pe *http1.ParseError) string {
	switch {
	case pe.Status == 431:
		return accesslog.ReasonHeadTooLarge
	case pe.Framing:
		return accesslog.ReasonSmuggling
	}
	return accesslog.ReasonBadRequest
}

// handle serves one parsed request. It reports whether the client
// connection stays open for another request, and whether it became a
// tunnel.
func (cn *conn) handle() (keep, handedOff bool) {
	p := cn.p
	req := &cn.req
	method := req.Method.Of(req.Buf)
	hasBody := req.Chunked || req.ContentLength > 0

	isConnect := string(method) == "CONNECT"
	clientKeep := !req.ConnClose && (req.Minor == 1 || req.ConnKeepAlive)
	r := &cn.gr
	r.Method = cn.internMethod(method)
	r.Target = req.Target.Of(req.Buf)
	r.Authorization = nil
	if !req.ProxyAuth.Empty() {
		r.Authorization = req.ProxyAuth.Of(req.Buf)
	}
	r.Via = nil
	if req.HasVia {
		// Checked for rustle's own element (a loop); a CONNECT's goes
		// on to an HTTP parent.
		v := req.AppendValues(cn.via[:0], "via")
		cn.via = v
		r.Via = v[:max(len(v)-len(", "), 0)]
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
		var pe *http1.ParseError
		errors.As(err, &pe)
		cn.sess.Reject(r, &cn.g, pe.Status, accesslog.ReasonBadRequest, err)
		cn.writeError(pe.Status, pe.Reason, false)
		return false, false
	}
	// A WebSocket handshake keeps its Upgrade field; the connection becomes
	// a tunnel if the origin switches protocols.
	cn.interim = false
	cn.upgrade = !isConnect && req.Minor == 1 && string(method) == "GET" && !hasBody && req.UpgradesTo("websocket")
	if cn.upgrade {
		req.Fields[req.UpgradeIdx].Drop = false
		r.Protocol = acl.WebSocket
	}
	r.Host = cn.internHost()
	r.Port = uint16(cn.tgt.port)
	switch k := cn.sess.Authorize(r, &cn.g); k {
	case gate.OK:
	case gate.NeedAuth:
		keep := !hasBody && req.Minor == 1 && !req.ConnClose
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
	if isConnect {
		return false, cn.connect()
	}
	cn.maxFwd = -1
	if gate.HopLimited(method) {
		if answered, keep := cn.hopLimit(hasBody, clientKeep); answered {
			return keep, false
		}
	}
	cn.metered = cn.g.Meter()

	isHead := cn.isHead
	idempotent := gate.Idempotent(method)
	clientMinor := req.Minor
	req.DropConnectionListed()
	cn.key = appendHostPort(cn.key[:0], &cn.tgt)
	cn.fwd = nil
	if !cn.g.Route().Direct() {
		// An HTTP parent takes the request itself, in absolute form; the
		// pool keeps connections to it under its key. So does a
		// WebSocket handshake: a parent that forwards upgrades (Squid's
		// http_upgrade_request_protocols) switches protocols and the
		// connection to it becomes the tunnel, where a CONNECT to the
		// origin's port might be refused.
		if cn.fwd, err = cn.g.ForwardParent(cn.key); err != nil {
			cn.writeDialError(err)
			return false, false
		}
		if cn.fwd != nil {
			cn.key = gate.ForwardKey(cn.key[:0], cn.fwd)
		}
	}
	cn.buildRequestHead()

	// The part of the request body already buffered goes out with the head.
	var inBuf []byte
	inData := 0         // the content of inBuf
	var remaining int64 // Content-Length bytes not yet buffered
	bodyDone := true
	switch {
	case req.Chunked:
		cn.reqChunk = http1.ChunkedScanner{}
		avail := cn.client.Buffered()
		m, out, data, err := http1.ScanChunkedNoTrailers(&cn.reqChunk, avail)
		if err != nil {
			cn.g.SetReason(accesslog.ReasonBadRequest)
			cn.writeError(400, "malformed chunked request body", false)
			return false, false
		}
		inBuf, inData = out, data
		cn.client.R += m
		bodyDone = cn.reqChunk.Done()
	case req.ContentLength > 0:
		avail := cn.client.Buffered()
		n := int64(len(avail))
		if n > req.ContentLength {
			n = req.ContentLength
		}
		inBuf, inData = avail[:n], int(n)
		cn.client.R += int(n)
		remaining = req.ContentLength - n
		bodyDone = remaining == 0
	}

	// Send the request, retrying once on a fresh connection when a pooled
	// one turns out dead and the request can be replayed, and once on the
	// route's next parent when its parent fails before a response byte
	// (an idempotent request of which no body byte went to it).
	canRetry := idempotent && bodyDone
	fresh := false
	for {
		if err = cn.getUpstream(fresh, canRetry); err != nil {
			if canRetry && cn.retryParent(&err) {
				continue
			}
			cn.writeDialError(err)
			return false, false
		}
		cn.up.ArmWriteDeadline(http1.MonoNow(), p.cfg.WriteTimeout)
		var w int64
		w, err = cn.vec.write(cn.up.C, cn.out, inBuf)
		cn.obs.up = int64(inData)
		if err != nil {
			cn.obs.up = content(http1.ChunkedScanner{}, inBuf, w-int64(len(cn.out)), req.Chunked)
		}
		if err == nil && bodyDone {
			cn.sent()
			err = cn.readResponseHead(clientMinor)
			if err == nil && canRetry && !hasBody && cn.g.Parent() != nil {
				// Nothing of the response goes to the client before
				// its small body is in, so that a parent dying in the
				// middle of it can still be retried.
				err = cn.awaitSmallBody()
			}
		}
		if err == nil || !canRetry || !isDeadConnErr(err) || cn.interim {
			break
		}
		if cn.upReused && !fresh {
			cn.dropUpstream()
			fresh = true
			continue
		}
		if !hasBody && cn.retryParent(&err) {
			// The route's parent (a fresh connection to it) closed
			// before a byte of the response.
			cn.dropUpstream()
			continue
		}
		break
	}
	if err != nil {
		cn.dropUpstream()
		cn.writeUpstreamError(err)
		return false, false
	}

	streaming := false
	if !bodyDone {
		// The response-header timeout starts once the body is sent;
		// an early answer is read at once, and a body that fails on
		// the client's side ends the wait (see http1.ResponseWait).
		streaming = true
		cn.sent()
		cn.rw.Start(&cn.up, p.cfg.ResponseHeaderTimeout)
		cn.waitRW = true
		go cn.sendBody(remaining, req.Chunked)
		err := cn.readResponseHead(clientMinor)
		cn.waitRW = false
		if err != nil {
			berr := cn.finishBody()
			cn.dropUpstream()
			if cn.rw.WasCut() {
				cn.writeBodyError(berr)
			} else {
				cn.writeUpstreamError(err)
			}
			return false, false
		}
	}

	if cn.fwd != nil && cn.resp.Status == 407 {
		// The HTTP parent refused rustle's own credentials: no answer
		// the client could give would help, so it is no 407 of its own.
		if streaming {
			cn.finishBody()
		}
		cn.dropUpstream()
		cn.fwd.Health().Failed(time.Now())
		cn.g.SetReason(accesslog.ReasonParentAuth)
		cn.writeError(502, "parent proxy "+cn.fwd.Name()+" refused rustle's credentials", false)
		return false, false
	}
	if cn.resp.Status == 101 {
		return false, cn.switchProtocols()
	}

	// Frame and forward the response.
	resp := &cn.resp
	mode := bodyClose
	switch {
	case isHead || resp.Status == 204 || resp.Status == 304:
		mode = bodyNone
	case resp.Chunked:
		mode = bodyChunked
	case resp.ContentLength >= 0:
		mode = bodyLength
	}
	dechunk := mode == bodyChunked && clientMinor == 0
	if mode == bodyClose || dechunk || cn.ctx.Err() != nil {
		// These bodies end with the connection; and once a shutdown
		// has begun, this is the connection's last answer.
		clientKeep = false
	}
	upKeep := resp.Minor == 1 && !resp.ConnClose && mode != bodyClose
	if streaming && !upKeep {
		// The upstream closes after this response and the request body
		// may still be coming: if so it is cut off and the client
		// connection closed, so say so in any case.
		clientKeep = false
	}
	resp.DropConnectionListed()
	cn.buildResponseHead(clientKeep, clientMinor, dechunk)

	cn.client.ArmWriteDeadline(http1.MonoNow(), p.cfg.WriteTimeout)
	cn.g.Answer(resp.Status, 0)
	cn.obs.down, err = cn.forwardResponseBody(mode, dechunk)
	if streaming && cn.finishBody() != nil {
		// The response ended before the request body did: neither
		// connection is at a message boundary.
		clientKeep, upKeep = false, false
	}
	if err != nil {
		cn.dropUpstream()
		return false, false
	}
	if upKeep && cn.up.R == cn.up.W && clientKeep && cn.pool != nil {
		// Kept for the client's next request, which most often goes to
		// the same origin: no pool round trip, no shared lock, and its
		// deadlines stay armed. Its buffer goes back meanwhile; the
		// connection goes to the pool when the client's next request
		// is for another origin or the client connection ends.
		cn.up.Release()
	} else if upKeep && cn.up.R == cn.up.W {
		cn.putUpstream()
	} else {
		cn.dropUpstream()
	}
	return clientKeep, false
}

// retryParent moves the request, whose parent failed (err) before any
// byte of the response, to the route's next parent (see
// gate.Grant.RetryParent): the pool key and the request head are made
// for it. It reports false when the request stays where it is, *err
// then being what to answer (the next parent's refusal of the
// destination, if it came to that).
func (cn *conn) retryParent(err *error) bool {
	if cn.g.Parent() == nil {
		return false
	}
	cn.key = appendHostPort(cn.key[:0], &cn.tgt)
	if !cn.g.RetryParent(string(cn.key), *err) {
		if cn.fwd != nil {
			cn.key = gate.ForwardKey(cn.key[:0], cn.fwd)
		}
		return false
	}
	fwd, ferr := cn.g.ForwardParent(cn.key)
	if ferr != nil {
		*err = ferr
		return false
	}
	cn.fwd = fwd
	if fwd != nil {
		cn.key = gate.ForwardKey(cn.key[:0], fwd)
	}
	cn.buildRequestHead()
	return true
}

// errUpstreamCut is an upstream closing the connection in the middle of
// a response that nothing of has gone to the client yet.
var errUpstreamCut = fmt.Errorf("httpproxy: upstream closed the connection before its response was complete: %w", io.EOF)

// awaitSmallBody reads, after the response head, the rest of a
// Content-Length body that fits in the upstream buffer behind the head
// (see http1.Conn.ReadRest). A body that does not fit, or a response
// without a body of known length, is left to the forwarding. It returns
// errUpstreamCut when the upstream closes first.
func (cn *conn) awaitSmallBody() error {
	resp := &cn.resp
	if cn.isHead || resp.Status < 200 || resp.Status == 204 || resp.Status == 304 || resp.Chunked {
		return nil
	}
	if err := cn.up.ReadRest(resp.ContentLength, cn.p.cfg.WriteTimeout); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return errUpstreamCut
		}
		return err
	}
	return nil
}

// isDeadConnErr reports whether err shows a pooled connection that the
// origin had already closed: nothing of a response arrived.
func isDeadConnErr(err error) bool {
	return errors.Is(err, errUpstreamClosed) || errors.Is(err, io.EOF) ||
		errors.Is(err, errConnReset) || errors.Is(err, errBrokenPipe)
}

// getUpstream takes an idle connection for cn.key from the pool or dials
// one. fresh forces a dial; canRetry says whether the request could be
// sent again should a reused connection turn out dead (see
// gate.Grant.Admits).
func (cn *conn) getUpstream(fresh, canRetry bool) error {
	var c net.Conn // TCP, or TLS to an https parent
	cn.upReused = false
	owner := cn.g.PoolOwner()
	if cn.up.C != nil && cn.up.Buf == nil {
		// The upstream the previous request left: reuse it for the same
		// origin if this request's rule admits its address, else offer
		// it to others (its owner's, when it is another user's).
		if !fresh && cn.upKey == string(cn.key) {
			if cn.g.Admits(cn.up.C, cn.upOwner, canRetry) {
				cn.upReused = true
				cn.up.TakeBuf(&http1.UpstreamBufs)
				return nil
			}
			// Not for this request, maybe for another: when it is this
			// request's owner's, it is the pool's newest for the owner
			// to this origin, so dial.
			fresh = fresh || cn.upOwner == owner
		}
		cn.putUpstream()
	}
	if !fresh && cn.pool != nil {
		if c = cn.pool.Get(cn.key, owner); c != nil {
			cn.upReused, cn.upOwner = true, owner
			if !cn.g.Admits(c, owner, canRetry) {
				c.Close()
				c, cn.upReused = nil, false
			}
		}
	}
	if c == nil {
		addr := string(cn.key)
		var err error
		c, err = cn.g.DialConn(context.WithoutCancel(cn.ctx), addr)
		if err != nil {
			return err
		}
		cn.upKey, cn.upOwner = addr, owner
		if cn.g.ViaParent() {
			cn.upKey = "" // a tunnel through a parent: reused by no other request, not pooled
		}
	} else if cn.upKey == "" || cn.upKey != string(cn.key) {
		cn.upKey = string(cn.key)
	}
	cn.up.Attach(c, &http1.UpstreamBufs)
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

// releaseUpstream hands on an upstream kept from the last request when
// the client connection ends: to the pool when it is idle at a message
// boundary, closed otherwise.
func (cn *conn) releaseUpstream() {
	if cn.up.C != nil && cn.up.Buf == nil {
		cn.putUpstream()
	} else {
		cn.dropUpstream()
	}
}

// putUpstream returns the current upstream to the pool.
func (cn *conn) putUpstream() {
	if cn.up.C == nil {
		return
	}
	c := cn.up.C
	cn.up.Release()
	cn.up.C, cn.up.TCP = nil, nil
	if cn.pool == nil || cn.upKey == "" {
		c.Close()
		return
	}
	// Its deadlines stay armed: whoever takes it from the pool arms its
	// own before reading or writing (attach forgets them), and an idle
	// pooled connection is neither read nor written.
	cn.pool.Put(cn.upKey, cn.upOwner, c)
}

// dropUpstream closes the current upstream.
func (cn *conn) dropUpstream() {
	if cn.up.C == nil {
		return
	}
	cn.up.C.Close()
	cn.up.Release()
	cn.up.C, cn.up.TCP = nil, nil
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
		var n int
		var err error
		if cn.waitRW {
			cn.rw.Arm()
			n, err = cn.up.ReadHead(p.cfg.MaxHeaderBytes, p.cfg.ResponseHeaderTimeout)
			cn.rw.End()
		} else {
			cn.up.ArmReadDeadline(http1.MonoNow(), p.cfg.ResponseHeaderTimeout)
			n, err = cn.up.ReadHead(p.cfg.MaxHeaderBytes, p.cfg.ResponseHeaderTimeout)
		}
		if err != nil {
			if err == http1.ErrIdle {
				return errUpstreamClosed
			}
			if err == http1.ErrHeadTooLarge {
				return errRespTooLarge
			}
			return err
		}
		if t := cn.obs.sent; !t.IsZero() {
			cn.g.FirstByte(t)
			cn.obs.sent = time.Time{}
		}
		if err := cn.resp.ParseResponse(cn.up.Buf[cn.up.R : cn.up.R+n]); err != nil {
			return err
		}
		cn.up.R += n
		if cn.resp.Status >= 200 {
			return nil
		}
		if cn.resp.Status == 101 {
			if cn.upgrade && cn.resp.UpgradesTo("websocket") {
				return nil
			}
			return errUnexpected101
		}
		if clientMinor == 1 {
			cn.interim = true
			cn.resp.DropConnectionListed()
			cn.buildInterimHead()
			cn.client.ArmWriteDeadline(http1.MonoNow(), p.cfg.WriteTimeout)
			if _, err := cn.client.C.Write(cn.out); err != nil {
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

// errQuotaSpent ends a response whose user's byte quota was spent while
// it was relayed: the client connection is closed, the access log says
// quota.
var errQuotaSpent = errors.New("httpproxy: the user's byte quota is spent")

// meteredSegment bounds a splice of a metered request's body, each
// counted before it moves: what a response can pass its user's quota by.
const meteredSegment = 1 << 20

// pace paces, and meters, n bytes about to be written to dst (see
// gate.Grant.Pace), and reports whether they may be: false when the
// user's byte quota is spent and dst is the client. A request body going
// upstream is not cut (its origin may be answering already); its bytes
// count all the same.
func (cn *conn) pace(dst *http1.Conn, n int) bool {
	return cn.g.Pace(cn.ctx, n) || dst != &cn.client
}

// forwardResponseBody writes the response head in cn.out and the body,
// and returns how much of the body's content was written to the client.
func (cn *conn) forwardResponseBody(mode int, dechunk bool) (int64, error) {
	up := &cn.up
	client := cn.client.C
	timeout := cn.p.cfg.WriteTimeout
	switch mode {
	case bodyNone:
		_, err := client.Write(cn.out)
		return 0, err
	case bodyLength:
		avail := up.Buffered()
		n := int64(len(avail))
		if n > cn.resp.ContentLength {
			n = cn.resp.ContentLength
		}
		if !cn.pace(&cn.client, int(n)) {
			return 0, errQuotaSpent
		}
		w, err := cn.vec.write(client, cn.out, avail[:n])
		down := max(0, w-int64(len(cn.out)))
		if err != nil {
			return down, err
		}
		up.R += int(n)
		m, err := cn.copyN(&cn.client, up, cn.resp.ContentLength-n)
		return down + m, err
	case bodyChunked:
		cn.respChunk = http1.ChunkedScanner{}
		return cn.copyChunked(&cn.vec, &cn.client, up, &cn.respChunk, cn.out, dechunk, false)
	default: // bodyClose
		avail := up.Buffered()
		if !cn.pace(&cn.client, len(avail)) {
			return 0, errQuotaSpent
		}
		w, err := cn.vec.write(client, cn.out, avail)
		down := max(0, w-int64(len(cn.out)))
		if err != nil {
			return down, err
		}
		up.R = up.W
		for {
			up.ArmReadDeadline(http1.MonoNow(), timeout)
			err := up.Fill(len(up.Buf))
			if err == io.EOF {
				return down, nil
			}
			if err != nil {
				return down, err
			}
			if !cn.pace(&cn.client, len(up.Buffered())) {
				return down, errQuotaSpent
			}
			cn.client.ArmWriteDeadline(http1.MonoNow(), timeout)
			k, err := client.Write(up.Buffered())
			down += int64(k)
			if err != nil {
				return down, err
			}
			up.R = up.W
		}
	}
}

// copyN moves n bytes from src to dst: with splice for large remainders
// between TCP sockets, through src's buffer otherwise. It returns how
// many were written to dst (n unless it fails). A failure known to be on
// src's side is a *readError; a failed splice may be on either.
func (cn *conn) copyN(dst, src *http1.Conn, n int64) (int64, error) {
	timeout := cn.p.cfg.WriteTimeout
	dstTCP := dst.TCP
	var moved int64
	for n > 0 {
		if n >= spliceMin && src.R == src.W && dstTCP != nil && src.TCP != nil {
			seg := n
			if seg > spliceSegment {
				seg = spliceSegment
			}
			if b := cn.g.Throttle(); b != nil {
				seg = min(seg, int64(max(b.Burst(), 16<<10)))
			}
			if cn.metered {
				seg = min(seg, meteredSegment)
			}
			// Each splice moves only what src holds now, so that the
			// read deadline bounds each wait for bytes (any progress
			// re-arms it, as Fill's reads do), not the whole segment.
			src.ArmReadDeadline(http1.MonoNow(), timeout)
			ready, err := http1.Readable(src.TCP)
			if err != nil {
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return moved, &readError{err, false}
			}
			seg = min(seg, int64(ready))
			if !cn.pace(dst, int(seg)) {
				return moved, errQuotaSpent
			}
			dst.ArmLowat()
			now := http1.MonoNow()
			// dst's deadline falls an eighth later than src's (more than
			// the slack either may be armed with), so that a timeout
			// before it passed is src's.
			dst.ArmWriteDeadline(now, timeout+timeout/8)
			src.ArmReadDeadline(now, timeout)
			// Spliced bytes are counted as written to dst: what was
			// read into the pipe and never written is not.
			lr := io.LimitedReader{R: src.TCP, N: seg}
			m, err := dstTCP.ReadFrom(&lr)
			n -= m
			moved += m
			if err != nil {
				if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() && timeout > 0 && !dst.WriteDeadlinePassed(http1.MonoNow()) {
					return moved, &readError{err, false}
				}
				return moved, err
			}
			if m < seg {
				return moved, &readError{io.ErrUnexpectedEOF, false}
			}
			continue
		}
		if src.R == src.W {
			src.ArmReadDeadline(http1.MonoNow(), timeout)
			if err := src.Fill(len(src.Buf)); err != nil {
				if err == io.EOF {
					return moved, &readError{io.ErrUnexpectedEOF, false}
				}
				return moved, &readError{err, false}
			}
		}
		b := src.Buffered()
		if int64(len(b)) > n {
			b = b[:n]
		}
		if !cn.pace(dst, len(b)) {
			return moved, errQuotaSpent
		}
		dst.ArmWriteDeadline(http1.MonoNow(), timeout)
		k, err := dst.C.Write(b)
		moved += int64(k)
		if err != nil {
			return moved, err
		}
		src.R += len(b)
		n -= int64(len(b))
	}
	return moved, nil
}

// copyChunked forwards a chunked body from src to dst, verbatim or, when
// dechunk is set, as its bare data, after first writing head (which may
// be nil); noTrailers drops the trailer fields of a verbatim body. It
// returns how much of the body's content (its chunk data) was written to
// dst. A failure on src's side (a read, the framing) is a *readError.
func (cn *conn) copyChunked(v *vec, dst, src *http1.Conn, cs *http1.ChunkedScanner, head []byte, dechunk, noTrailers bool) (int64, error) {
	timeout := cn.p.cfg.WriteTimeout
	var moved int64
	for {
		avail := src.Buffered()
		from := *cs // the framing state out starts in
		var out []byte
		data := 0
		if dechunk {
			// Gather the data runs of the buffered bytes in place.
			w, m := 0, 0
			for m < len(avail) && !cs.Done() {
				k, isData, err := cs.Step(avail[m:])
				if err != nil {
					return moved, &readError{err, true}
				}
				if isData {
					w += copy(avail[w:], avail[m:m+k])
				}
				m += k
			}
			out, data = avail[:w], w
			src.R += m
		} else if noTrailers {
			m, o, d, err := http1.ScanChunkedNoTrailers(cs, avail)
			if err != nil {
				return moved, &readError{err, true}
			}
			out, data = o, d
			src.R += m
		} else {
			m, d, err := http1.ScanChunked(cs, avail)
			if err != nil {
				return moved, &readError{err, true}
			}
			out, data = avail[:m], d
			src.R += m
		}
		if len(head) > 0 || len(out) > 0 {
			if !cn.pace(dst, len(out)) {
				return moved, errQuotaSpent
			}
			dst.ArmWriteDeadline(http1.MonoNow(), timeout)
			w, err := v.write(dst.C, head, out)
			if err != nil {
				return moved + content(from, out, w-int64(len(head)), !dechunk), err
			}
			moved += int64(data)
			head = nil
		}
		if cs.Done() {
			return moved, nil
		}
		src.ArmReadDeadline(http1.MonoNow(), timeout)
		if err := src.Fill(len(src.Buf)); err != nil {
			if err == io.EOF {
				return moved, &readError{io.ErrUnexpectedEOF, false}
			}
			return moved, &readError{err, false}
		}
	}
}

// readError marks a failure of a copy on its source's side: a read, or
// (framing) the chunked framing of what was read.
type readError struct {
	err     error
	framing bool
}

func (e *readError) Error() string { return e.err.Error() }
func (e *readError) Unwrap() error { return e.err }

// content returns how much body content the first k bytes of out carry
// (none when k <= 0): k itself, or when out is chunked framing, which cs
// (the scanner's state before out) follows, the chunk data among them.
func content(cs http1.ChunkedScanner, out []byte, k int64, chunked bool) int64 {
	if k <= 0 {
		return 0
	}
	if !chunked {
		return k
	}
	_, data, _ := http1.ScanChunked(&cs, out[:k])
	return int64(data)
}

// sendBody streams the rest of a request body from the client to the
// upstream; it runs on its own goroutine, joined by finishBody.
func (cn *conn) sendBody(remaining int64, chunked bool) {
	var n int64
	var err error
	if chunked {
		n, err = cn.copyChunked(&cn.bodyVec, &cn.up, &cn.client, &cn.reqChunk, nil, false, true)
	} else {
		n, err = cn.copyN(&cn.up, &cn.client, remaining)
	}
	cn.obs.up += n
	if re := (*readError)(nil); errors.As(err, &re) {
		cn.rw.Cut()
	} else {
		// Sent, or failed upstream: the origin may have answered.
		cn.rw.BodySent()
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
	cn.client.C.SetReadDeadline(past)
	cn.up.C.SetWriteDeadline(past)
	err := <-cn.bodyErr
	cn.client.ForgetReadDeadline()
	cn.up.ForgetWriteDeadline()
	return err
}

// vec writes two buffers with one writev; its fields are reused so that
// a write allocates nothing. A vec is used by one goroutine at a time.
type vec struct {
	iov  [2][]byte
	bufs net.Buffers
	join []byte // a and b joined, for connections without writev (TLS)
}

// maxJoin bounds what vec.write copies together for a connection without
// writev, so that head and a small body leave in one TLS record.
const maxJoin = 16 << 10

// write writes a and b with one system call where it can, and returns
// how many of their bytes were written: all unless it fails.
func (v *vec) write(c net.Conn, a, b []byte) (int64, error) {
	if len(b) == 0 {
		n, err := c.Write(a)
		return int64(n), err
	}
	if len(a) == 0 {
		n, err := c.Write(b)
		return int64(n), err
	}
	if _, ok := c.(*net.TCPConn); !ok {
		if len(a)+len(b) > maxJoin {
			n, err := c.Write(a)
			if err != nil {
				return int64(n), err
			}
			m, err := c.Write(b)
			return int64(n + m), err
		}
		v.join = append(append(v.join[:0], a...), b...)
		n, err := c.Write(v.join)
		return int64(n), err
	}
	v.iov[0], v.iov[1] = a, b
	v.bufs = v.iov[:]
	n, err := v.bufs.WriteTo(c)
	v.iov[0], v.iov[1] = nil, nil
	v.bufs = nil
	return n, err
}

// connect serves a CONNECT request: dial, answer 200, and hand both
// connections to the tunnel engine. It reports whether the client
// connection was handed off.
func (cn *conn) connect() bool {
	cn.key = appendHostPort(cn.key[:0], &cn.tgt)
	upc, err := cn.g.DialConn(context.WithoutCancel(cn.ctx), string(cn.key))
	if err != nil {
		cn.writeDialError(err)
		return false
	}
	cn.g.Answer(200, 0)
	client := cn.client.C
	client.SetWriteDeadline(gate.Deadline(time.Now(), cn.p.cfg.WriteTimeout))
	if _, err := client.Write(connectEstablished); err != nil {
		upc.Close()
		return false
	}
	if rest := cn.client.Buffered(); len(rest) > 0 {
		// Bytes the client sent right behind its CONNECT (a TLS
		// ClientHello, say) belong to the tunnel.
		upc.SetWriteDeadline(gate.Deadline(time.Now(), cn.p.cfg.WriteTimeout))
		n, err := upc.Write(rest)
		cn.g.AddBytes(int64(n), 0)
		if err != nil {
			upc.Close()
			return false
		}
		cn.client.R = cn.client.W
	}
	return cn.tunnel(upc)
}

// switchProtocols completes a WebSocket handshake the origin accepted:
// it passes the 101 on, with any bytes that came behind either head, and
// turns the connection into a tunnel. It reports whether the client
// connection was handed off.
func (cn *conn) switchProtocols() bool {
	cn.resp.Fields[cn.resp.UpgradeIdx].Drop = false
	cn.resp.DropConnectionListed()
	cn.buildSwitchHead()
	cn.g.SetProtocol(accesslog.ProtoWebSocket)
	cn.g.Answer(101, 0)
	upc := cn.up.C
	client := cn.client.C
	client.SetWriteDeadline(gate.Deadline(time.Now(), cn.p.cfg.WriteTimeout))
	// The bytes behind either head are the tunnel's first.
	w, err := cn.vec.write(client, cn.out, cn.up.Buffered())
	cn.g.AddBytes(0, max(0, w-int64(len(cn.out))))
	if err != nil {
		cn.dropUpstream()
		return false
	}
	// The upstream leaves the exchange: it belongs to the tunnel now.
	cn.up.Release()
	cn.up.C, cn.up.TCP = nil, nil
	if rest := cn.client.Buffered(); len(rest) > 0 {
		upc.SetWriteDeadline(gate.Deadline(time.Now(), cn.p.cfg.WriteTimeout))
		n, err := upc.Write(rest)
		cn.g.AddBytes(int64(n), 0)
		if err != nil {
			upc.Close()
			return false
		}
		cn.client.R = cn.client.W
	}
	return cn.tunnel(upc)
}

// tunnel relays the client connection and upc until both directions end
// (see gate.Grant.Tunnel): on the worker's engine for a plain client socket
// (spliced) or a TLS client (Engine.AddTLS; tunnel.RelayTLS without an
// engine), by goroutines for a paced user or elsewhere. It takes ownership of both connections and reports
// true.
func (cn *conn) tunnel(upc net.Conn) bool {
	if cn.client.Lowat() {
		// A tunnel is relayed best with the send queue the kernel
		// chooses: its relay is the busier side.
		http1.SetNotSentLowat(cn.client.TCP, 0)
	}
	// A parked TLS relay holds no buffer while idle: the connection's
	// read buffer (empty now) goes back to its pool first.
	cn.g.Tunnel(cn.client.C, upc, cn.client.Release)
	return true
}

var connectEstablished = []byte("HTTP/1.1 200 Connection established\r\n\r\n")
