package origin

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/route"
)

// Request is what an [Exchange] asks of the front-end whose request it
// carries. The front-end's per-connection or per-stream state implements
// it (a pointer: passing it allocates nothing).
type Request interface {
	// AppendHead appends the request's HTTP/1.1 head as the upstream
	// gets it: in absolute form with the parent's Proxy-Authorization
	// when parent (an http parent, see [gate.Grant.ForwardParent]) is not
	// nil, in origin form otherwise (see AppendRequestTarget and
	// AppendParentAuthorization). It is called again for another parent
	// when the request is retried on one.
	AppendHead(dst []byte, parent *route.Parent) []byte
	// DialContext returns the context a dial for the request runs under,
	// and a function to call once the dial is over (nil = none): an
	// HTTP/2 stream's reset cancels its dial.
	DialContext() (context.Context, func())
	// Attach is told of each upstream connection before the request goes
	// out on it, so that the front-end can interrupt it; false ends the
	// exchange with ErrClientGone (the client went away).
	Attach(up net.Conn) bool
	// Interim passes on the informational (1xx) response in x.Resp, and
	// reports whether it went to the client (an HTTP/1.0 client gets
	// none). An error is the client's (the exchange ends with it).
	Interim(x *Exchange) (passed bool, err error)
}

// Body is what a front-end has of a request body when it sends the
// request.
type Body struct {
	// Buffered is the part of the body at hand, sent right behind the
	// head; nil = none.
	Buffered []byte
	// Done says that Buffered is the whole body: the request is complete
	// once it is written. Otherwise the front-end sends the rest (see
	// StartBody).
	Done bool
	// Empty says that the request has no body at all (Done then holds
	// too).
	Empty bool
}

// Errors of an exchange that a front-end may meet. Each is answered as
// Failure says.
var (
	// ErrClientGone ends an exchange whose client went away (Attach
	// refused the upstream); there is no one to answer.
	ErrClientGone = errors.New("origin: the client went away")
	// ErrParentAuth is an http parent answering 407: it refused rustle's
	// own credentials, which no answer of the client's can mend.
	ErrParentAuth = errors.New("origin: the parent proxy refused rustle's credentials")
	// ErrResponseTooLarge is a response head over MaxHeaderBytes.
	ErrResponseTooLarge = errors.New("origin: upstream response head too large")
	// ErrUnexpected101 is a 101 to a request that asked for no upgrade
	// (or not to WebSocket).
	ErrUnexpected101 = errors.New("origin: upstream switched protocols without an upgrade request")
	// ErrTLSUpgrade is a WebSocket handshake whose front-end relays TCP
	// sockets only (UpgradeTCP) to a TLS origin.
	ErrTLSUpgrade = errors.New("origin: a WebSocket tunnel of this front-end cannot run over TLS to the origin")
	// errUpstreamClosed is the upstream closing before a byte of its
	// response: a pooled connection it had given up on, maybe.
	errUpstreamClosed = errors.New("origin: upstream closed the connection without a response")
	// errUpstreamCut is the upstream closing in the middle of a small
	// response nothing of which went to the client yet.
	errUpstreamCut = errors.New("origin: upstream closed the connection before its response was complete")
)

// Mode says what a request expects of its upstream.
type Mode uint8

// The modes of a request.
const (
	// Plain is a request and its response.
	Plain Mode = iota
	// Upgrade is a WebSocket handshake: a 101 to WebSocket is the answer
	// it asks for, after which the upstream is the tunnel's (Detach).
	Upgrade
	// UpgradeTCP is Upgrade for a front-end whose tunnel relays a TCP
	// socket only (HTTP/2's): an upstream that is not one (TLS to an
	// https parent) is not used, and a dial to an https parent refused.
	UpgradeTCP
)

// Exchange is one forwarded request's exchange with its upstream: the
// origin server, or the http parent its route picked. An HTTP/1.1
// front-end keeps one per client connection (and with it an upstream
// between requests, see Keep); HTTP/2 and HTTP/3 take one per request
// from [Get]. The zero Exchange is ready for Begin. It is used by one
// goroutine at a time, but for the body writer that a streamed request
// body has (see StartBody).
type Exchange struct {
	c *Client
	g *gate.Grant

	// Up is the upstream connection with its read buffer; Up.C is nil
	// when there is none. Between the requests of an HTTP/1.1 client
	// connection it may be kept without its buffer (Up.Buf nil): see Keep.
	Up http1.Conn
	// Resp is the response head, parsed in Up's buffer by ReadResponse:
	// the final one once it returned nil, an informational one while
	// Request.Interim runs.
	Resp http1.Head
	// Trailer is the trailer section of a chunked response body that
	// NextBody read to its end (see HasTrailer).
	Trailer http1.Head

	dest       []byte         // the destination, host:port (gate.Grant.AppendDest)
	key        []byte         // the pool key of the request's upstream: dest, or its http parent's ForwardKey
	parent     *route.Parent  // the http parent that takes the request in absolute form; nil = none
	head       []byte         // the request head, built by Request.AppendHead
	isHead     bool           // the request is a HEAD: its response has no body
	idempotent bool           // the request may be sent again (see Idempotent)
	upgrade    bool           // a 101 to WebSocket is the answer asked for
	tcpOnly    bool           // the upstream must be a *net.TCPConn
	upH2       bool           // the last upstream was an origin's HTTP/2 connection (see h2Conn)
	upKey      string         // the pool key Up was made for; "" = none, or a tunnel through a parent, which is pooled for no one
	upOwner    dialer.Owner   // who may reuse Up (the PoolOwner of its dial)
	upAddr     netip.AddrPort // the address Up.C is connected to (gate.RemoteAddrPort), read once when it became Up
	upPool     *dialer.Pool   // the pool Up goes back to (its grant's Pool); nil = none
	reused     bool           // Up served an earlier request
	interim    bool           // a 1xx answer went to the client
	sent       time.Time      // when the request head went out, for the first-byte metric; zero when not observed
	vec        http1.Vec      // writes of Send

	// rw arms the wait for the response head while the front-end sends
	// the request body (see StartBody); bodyPending: ReadResponse waits
	// through it.
	rw          http1.ResponseWait
	bodyPending bool

	body bodyReader // the response body's framing, for NextBody

	tlsName string  // the name a TLS upstream is for (Config.TLS); "" = plain HTTP
	hdr     Headers // the header rules that apply to the request (see Headers)
	hdrOn   bool    // some do
}

// Begin starts the exchange of a request that g granted, with method to
// the request's destination (see [gate.Grant.AppendDest]), as mode says.
// Begin asks the grant whether the request goes to an http parent in
// absolute form (see [gate.Grant.ForwardParent]) and notes the
// upstream's pool key: the destination, or the parent's ForwardKey; an
// error (the destination refused, every parent down) is answered as
// Failure says. c is the listener's Client.
func (x *Exchange) Begin(c *Client, g *gate.Grant, method string, mode Mode) error {
	x.c, x.g = c, g
	x.isHead = method == "HEAD"
	x.idempotent = Idempotent(method)
	x.upgrade = mode != Plain
	x.tcpOnly = mode == UpgradeTCP
	x.interim = false
	x.sent = time.Time{}
	x.body.started = false
	x.dest = g.AppendDest(x.dest[:0])
	x.tlsName = ""
	if c.cfg.TLS != nil {
		x.tlsName = tlsName(g)
	}
	x.hdrOn = x.hdr.choose(c.cfg.Headers, c.cfg.Edits, g, method == "TRACE")
	return x.forwardParent()
}

// tlsName returns the name a TLS upstream of g's request is for: the
// intercepted tunnel's, else the destination's host.
func tlsName(g *gate.Grant) string {
	if in := g.Session().Intercepted(); in != nil {
		return in.Name
	}
	host, _, _, _ := gate.ParseAuthority(string(g.AppendDest(nil)), 0)
	return host
}

// Headers returns the header rules that apply to the request (its
// route's, the [[header_rules]] entries it matches, the Client's Edits),
// nil when none do: the head builders leave out the client's fields it
// drops and append its fields (see AppendFieldHead); a response head
// ReadResponse returns has the fields it drops marked (http1.Field.Drop),
// and the front-end appends its response fields.
func (x *Exchange) Headers() *Headers {
	if !x.hdrOn {
		return nil
	}
	return &x.hdr
}

// forwardParent asks the grant for an http parent that takes the
// request, and sets the pool key to its key or the destination.
func (x *Exchange) forwardParent() error {
	x.parent = nil
	if x.tlsName != "" {
		// TLS to the origin, for one name: never mixed with the
		// destination's plain connections, nor with another name's, and
		// never sent to an http parent in absolute form (the dial
		// tunnels through the route's parent instead).
		x.key = append(append(append(append(x.key[:0], "tls "...), x.tlsName...), ' '), x.dest...)
		return nil
	}
	x.key = append(x.key[:0], x.dest...)
	if x.g.Route().Direct() {
		return nil
	}
	p, err := x.g.ForwardParent()
	if err != nil {
		return err
	}
	if p != nil {
		x.parent = p
		x.key = gate.ForwardKey(x.key[:0], p)
	}
	return nil
}

// Client returns the Client the exchange began with.
func (x *Exchange) Client() *Client { return x.c }

// Parent returns the http parent the request goes to in absolute form,
// nil when it goes to the origin (directly, or tunnelled through a
// parent).
func (x *Exchange) Parent() *route.Parent { return x.parent }

// Reused reports whether the upstream served an earlier request.
func (x *Exchange) Reused() bool { return x.reused }

// Interimed reports whether an informational answer went to the client:
// the request can then not be sent again.
func (x *Exchange) Interimed() bool { return x.interim }

// Target names the upstream for an answer: the destination, or the
// parent it went through (never the parent's address).
func (x *Exchange) Target() string {
	if x.parent != nil {
		return "through parent proxy " + x.parent.Name()
	}
	return string(x.dest)
}

// Send sends the request on a kept, pooled or new upstream: its head,
// built by r for where it goes, and the part of its body at hand. For a
// request that is then complete (body.Done) it reads the response head
// too (see ReadResponse). It retries, each once: an idempotent, complete
// request whose kept or pooled connection turns out dead (closed before
// a byte of the response), on a fresh connection; and one without a body
// whose parent fails before the response is whole, through the route's
// next parent (see [gate.Grant.RetryParent]), the head built anew.
//
// It returns how many bytes of body.Buffered were written, and nil when
// the request went out (for a complete one, when its response head is
// in Resp). An error is answered as Failure says: nothing of a response
// went to the client but, maybe, an interim answer (Interimed). The
// upstream is closed on an error.
func (x *Exchange) Send(r Request, body Body) (int64, error) {
	canRetry := x.idempotent && body.Done
	x.head = r.AppendHead(x.head[:0], x.parent)
	fresh, h1Retried := false, false
	for {
		if err := x.get(r, fresh, canRetry); err != nil {
			if canRetry {
				if ok, ferr := x.retryParent(r, err); ok {
					continue
				} else if ferr != nil {
					err = ferr
				}
			}
			return 0, err
		}
		_, x.upH2 = x.Up.C.(*h2Conn)
		if !r.Attach(x.Up.C) {
			x.Drop()
			return 0, ErrClientGone
		}
		x.Up.ArmWriteDeadline(http1.MonoNow(), x.c.cfg.WriteTimeout)
		w, err := x.vec.WriteConn(&x.Up, x.head, body.Buffered)
		n := max(0, w-int64(len(x.head)))
		if x.g.Observing() {
			x.sent = time.Now()
		}
		if err == nil && body.Done {
			err = x.ReadResponse(r)
			if err == nil && canRetry && body.Empty && x.g.Parent() != nil {
				// Nothing of the answer goes to the client before
				// its small body is in, so that a parent dying in the
				// middle of it can still be retried.
				err = x.awaitSmallBody()
			}
		}
		if err == nil {
			return n, nil
		}
		x.Drop()
		if errors.Is(err, ErrHTTP11Required) {
			// The origin's HTTP/2 stream was reset asking for
			// HTTP/1.1 (ReadResponse noted it): a request that can be
			// sent again is, once, on a new connection, which offers
			// http/1.1 alone.
			if !canRetry || x.interim || h1Retried {
				return n, err
			}
			h1Retried, fresh = true, true
			continue
		}
		if !canRetry || x.interim || !deadConn(err) {
			return n, err
		}
		if x.reused && !fresh {
			fresh = true // a pooled connection the origin had closed
			continue
		}
		if body.Empty {
			// The route's parent (a fresh connection to it) closed
			// before the response was whole: once more through its
			// next parent.
			if ok, ferr := x.retryParent(r, err); ok {
				continue
			} else if ferr != nil {
				return n, ferr
			}
		}
		return n, err
	}
}

// retryParent moves the request, whose parent failed (err) before any
// byte of the response, to the route's next parent (see
// gate.Grant.RetryParent): the pool key and the head are made for it. It
// reports false when the request stays where it is, with the next
// parent's refusal of the destination, if it came to that.
func (x *Exchange) retryParent(r Request, err error) (bool, error) {
	if x.g.Parent() == nil || !x.g.RetryParent(err) {
		return false, nil
	}
	if ferr := x.forwardParent(); ferr != nil {
		return false, ferr
	}
	x.head = r.AppendHead(x.head[:0], x.parent)
	return true, nil
}

// get makes Up the request's upstream: the one the client connection
// kept from its last request when it was for the same key and the grant
// admits it, else one from the pool that the grant admits, else a new
// one dialled through the grant. fresh forces a dial; canRetry says
// whether the request could be sent again should a reused connection
// turn out dead (see gate.Grant.Admits).
func (x *Exchange) get(r Request, fresh, canRetry bool) error {
	g := x.g
	x.reused = false
	owner := g.PoolOwner()
	if x.Up.C != nil && x.Up.Buf == nil {
		// The upstream the client's previous request left: reused for
		// the same key when this request's rule admits its address,
		// else offered to others (its owner's, when it is another
		// user's).
		if !fresh && x.upKey == string(x.key) && x.fits(x.Up.C) {
			if g.AdmitsAt(x.Up.C, x.upAddr, x.upOwner, canRetry) {
				x.reused = true
				x.Up.TakeBuf(&http1.UpstreamBufs)
				return nil
			}
			// Not for this request, maybe for another: when it is this
			// request's owner's, it is the pool's newest for the owner
			// to this origin, so dial.
			fresh = fresh || x.upOwner == owner
		}
		x.put()
	}
	var c net.Conn // TCP, or TLS to an https parent
	var addr netip.AddrPort
	if pool := g.Pool(); !fresh && pool != nil {
		if c = pool.Get(x.key, owner); c != nil {
			if _, tcp := c.(*net.TCPConn); x.tcpOnly && !tcp || !x.fits(c) {
				pool.Put(string(x.key), owner, c) // not for this request: left for others
				c = nil
			} else if addr = gate.RemoteAddrPort(c); g.AdmitsAt(c, addr, owner, canRetry) {
				x.reused, x.upOwner, x.upPool = true, owner, pool
				if x.upKey != string(x.key) {
					x.upKey = string(x.key)
				}
			} else {
				c.Close()
				c = nil
			}
		}
	}
	if c == nil {
		ctx, done := r.DialContext()
		var err error
		if x.tcpOnly && x.tlsName != "" {
			if done != nil {
				done()
			}
			return ErrTLSUpgrade
		}
		if x.tcpOnly {
			var tc *net.TCPConn
			if tc, err = g.Dial(ctx); err == nil {
				c = tc
			}
		} else {
			c, err = g.DialConn(ctx)
		}
		if err == nil && x.tlsName != "" {
			c, err = x.handshakeTLS(ctx, c, x.tlsName)
		}
		if done != nil {
			done()
		}
		if err != nil {
			return err
		}
		x.upKey, x.upOwner, x.upPool = string(x.key), owner, g.Pool()
		if g.ViaParent() {
			x.upKey = "" // a tunnel through a parent: for this request only, never pooled
		}
		addr = gate.RemoteAddrPort(c)
	}
	x.Up.Attach(c, &http1.UpstreamBufs)
	x.upAddr = addr
	return nil
}

// fits reports whether the request may go on c: a WebSocket handshake,
// and a request to an origin that asked for HTTP/1.1 lately, need an
// HTTP/1.1 connection, not an origin's HTTP/2 one.
func (x *Exchange) fits(c net.Conn) bool {
	_, h2 := c.(*h2Conn)
	return !h2 || !x.h1Only()
}

// ReadResponse reads the response head into Resp: the final one, each
// informational (1xx) one before it passed to r.Interim; a 101 only to a
// request Begin was told asks for an upgrade to WebSocket; a final one in
// a transfer coding other than chunked is http1.ErrTransferCoding. The
// wait for
// each head is bounded by ResponseHeaderTimeout, and its size by
// MaxHeaderBytes; while the front-end sends the body (StartBody), the
// timeout starts once it is sent and the wait ends when the body fails on
// the client's side. A parent's 407 is ErrParentAuth, noted as a failure
// of the parent's health.
func (x *Exchange) ReadResponse(r Request) error {
	cfg := &x.c.cfg
	up := &x.Up
	for {
		var n int
		var err error
		if x.bodyPending {
			x.rw.Arm()
			n, err = up.ReadHead(cfg.MaxHeaderBytes, cfg.ResponseHeaderTimeout)
			x.rw.End()
		} else {
			up.ArmReadDeadline(http1.MonoNow(), cfg.ResponseHeaderTimeout)
			n, err = up.ReadHead(cfg.MaxHeaderBytes, cfg.ResponseHeaderTimeout)
		}
		switch {
		case err == http1.ErrIdle:
			if h, ok := up.C.(*h2Conn); ok && h.http11Required() {
				// Offered http/1.1 alone from now on.
				x.c.h1.note(x.key, time.Now())
				return ErrHTTP11Required
			}
			return errUpstreamClosed
		case err == http1.ErrHeadTooLarge:
			return ErrResponseTooLarge
		case err != nil:
			return err
		}
		if !x.sent.IsZero() {
			x.g.FirstByte(x.sent)
			x.sent = time.Time{}
		}
		if err := x.Resp.ParseResponse(up.Buf[up.R : up.R+n]); err != nil {
			return err
		}
		up.R += n
		switch st := x.Resp.Status; {
		case st == 101:
			if x.upgrade && x.Resp.UpgradesTo("websocket") {
				x.editResponse()
				return nil
			}
			return ErrUnexpected101
		case st < 200:
			passed, err := r.Interim(x)
			x.interim = x.interim || passed
			if err != nil {
				return err
			}
			continue
		case st == 407 && x.parent != nil:
			x.parent.Health().Failed(time.Now())
			return ErrParentAuth
		case x.Resp.TEOther:
			// A transfer coding other than chunked, which rustle never
			// asks for (no request carries TE): refused, body or not, on
			// every front-end; HTTP/2 and HTTP/3 have no transfer
			// codings to pass it on in.
			return http1.ErrTransferCoding
		}
		x.editResponse()
		return nil
	}
}

// editResponse marks the fields of the final response head that the
// header rules drop.
func (x *Exchange) editResponse() {
	if x.hdrOn {
		x.hdr.editResponse(&x.Resp)
	}
}

// awaitSmallBody reads, behind the response head, the rest of a
// Content-Length body that fits in the upstream buffer behind it (see
// http1.Conn.ReadRest). A body that does not fit, or one without a length,
// is left to the relay. It returns errUpstreamCut when the upstream
// closes first.
func (x *Exchange) awaitSmallBody() error {
	h := &x.Resp
	if x.NoBody() || h.Chunked || h.TEOther {
		return nil
	}
	if err := x.Up.ReadRest(h.ContentLength, x.c.cfg.WriteTimeout); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return errUpstreamCut
		}
		return err
	}
	return nil
}

// StartBody readies the wait for the response head while the front-end
// sends the rest of the request body itself, to Up.C, on another
// goroutine, which then calls BodySent or BodyCut once (see
// http1.ResponseWait): the response-header timeout starts once the body
// is sent, an early answer is read at once, and a body that fails on the
// client's side ends the wait. The next ReadResponse waits so.
func (x *Exchange) StartBody() {
	x.rw.Start(&x.Up, x.c.cfg.ResponseHeaderTimeout)
	x.bodyPending = true
}

// EndBody ends what StartBody began, once ReadResponse has returned.
func (x *Exchange) EndBody() { x.bodyPending = false }

// BodySent tells the exchange that the request body was sent, or failed
// upstream (the origin may answer all the same).
func (x *Exchange) BodySent() { x.rw.BodySent() }

// BodyCut tells the exchange that the request body failed on the
// client's side: the wait for the response ends.
func (x *Exchange) BodyCut() { x.rw.Cut() }

// WasCut reports whether BodyCut was called since StartBody.
func (x *Exchange) WasCut() bool { return x.rw.WasCut() }

// NoBody reports whether the response in Resp has no body: to a HEAD, a
// 1xx, 204 or 304, or of length 0.
func (x *Exchange) NoBody() bool {
	h := &x.Resp
	return x.isHead || h.Status < 200 || h.Status == 204 || h.Status == 304 ||
		h.ContentLength == 0 && !h.Chunked && !h.TEOther
}

// KeepAlive reports whether Up may serve another request once the
// response in Resp has been read to its end (RFC 9112 §9.3): the upstream
// keeps the connection open and the body's end is known without its
// close.
func (x *Exchange) KeepAlive() bool {
	h := &x.Resp
	return !h.ConnClose && (h.Minor >= 1 || h.ConnKeepAlive) &&
		(x.NoBody() || h.Chunked || h.ContentLength >= 0 && !h.TEOther)
}

// Release ends the request's use of Up: back to the pool when reuse is
// set, Up is at a message boundary (nothing read and unconsumed) and the
// pool may take it (a tunnel through a parent never goes there), closed
// otherwise.
func (x *Exchange) Release(reuse bool) {
	if x.Up.C == nil {
		return
	}
	if !reuse || x.Up.R != x.Up.W {
		x.Drop()
		return
	}
	x.Up.Release()
	x.put()
}

// Keep keeps Up, at a message boundary, for the client's next request,
// which most often goes to the same origin: no pool round trip, no
// shared lock, its deadlines armed. Its buffer goes back meanwhile. The
// next Send takes it when its request goes where it went and the grant
// admits it, or else hands it to the pool; Close hands it on when the
// client connection ends. Up not at a message boundary is closed.
func (x *Exchange) Keep() {
	if x.Up.C == nil {
		return
	}
	if x.Up.R != x.Up.W {
		x.Drop()
		return
	}
	x.Up.Release()
}

// put hands Up, without its buffer, to the pool (its deadlines stay
// armed: whoever takes it arms its own, as Attach forgets them), or
// closes it when the pool may not have it.
func (x *Exchange) put() {
	c := x.Up.C
	x.Up.C, x.Up.TCP = nil, nil
	if c == nil {
		return
	}
	pool := x.upPool
	if pool == nil || x.upKey == "" {
		c.Close()
		return
	}
	pool.Put(x.upKey, x.upOwner, c)
}

// Kept is an upstream an Exchange kept for its client's next request
// (see Keep), taken out of it by TakeKept, so that the Exchange, with
// the buffers and state of a request it is most of, can serve other
// client connections while this one is idle, and given back to one by
// PutKept.
type Kept struct {
	up    http1.Conn // without its buffer, its deadlines armed
	pool  *dialer.Pool
	key   string
	owner dialer.Owner
	addr  netip.AddrPort
}

// TakeKept takes out the upstream that Keep kept, nil when there is
// none: the Exchange then has no upstream, and may serve others.
func (x *Exchange) TakeKept() *Kept {
	if x.Up.C == nil || x.Up.Buf != nil {
		return nil
	}
	k := &Kept{up: x.Up, pool: x.upPool, key: x.upKey, owner: x.upOwner, addr: x.upAddr}
	x.Up = http1.Conn{}
	x.upPool = nil
	return k
}

// PutKept gives k, from TakeKept, to x, which has no upstream, as the
// upstream it keeps for the client's next request: Send reuses it as
// it would had Keep kept it in x, and Close hands it to the pool.
func (x *Exchange) PutKept(k *Kept) {
	x.Drop()
	x.Up = k.up
	x.upPool, x.upKey, x.upOwner, x.upAddr = k.pool, k.key, k.owner, k.addr
}

// Drop closes Up.
func (x *Exchange) Drop() {
	if x.Up.C == nil {
		return
	}
	x.Up.C.Close()
	x.Up.Release()
	x.Up.C, x.Up.TCP = nil, nil
}

// Detach hands Up over to the caller, which then owns it (a WebSocket
// tunnel after a 101): the exchange no longer has an upstream. The bytes
// read behind the response head are the caller's to take first.
func (x *Exchange) Detach() net.Conn {
	c := x.Up.C
	x.Up.Release()
	x.Up.C, x.Up.TCP = nil, nil
	return c
}

// Close ends the exchange when its client connection ends: an upstream
// kept by Keep goes to the pool, any other is closed.
func (x *Exchange) Close() {
	if x.Up.C != nil && x.Up.Buf == nil {
		x.put()
	} else {
		x.Drop()
	}
	x.c, x.g, x.parent, x.upPool = nil, nil, nil, nil // upKey stays: a string the next exchange may reuse
	x.hdr.forget()
	x.hdrOn = false
	x.Resp.Buf, x.Trailer.Buf = nil, nil
	x.body = bodyReader{}
	if cap(x.head) > 64<<10 {
		x.head = nil
	}
}

// deadConn reports whether err shows a connection the upstream had
// closed: nothing of a response arrived.
func deadConn(err error) bool {
	return errors.Is(err, errUpstreamClosed) || errors.Is(err, errUpstreamCut) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
