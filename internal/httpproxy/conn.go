package httpproxy

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/route"
	"github.com/rustle-proxy/rustle/internal/sni"
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
	p      *Proxy
	sess   *gate.Session
	ctx    context.Context // sess's
	pool   *dialer.Pool    // the policy's upstream pool; nil = none
	client http1.Conn
	idle   atomic.Bool // waiting for the next request head; read by wake

	// *work is what the requests are served with; nil while the
	// connection is parked (see notify).
	*work
	// kept is the upstream the last request left for the next, held
	// here while the connection is parked without its work (see
	// notify); nil otherwise.
	kept *origin.Kept

	maxFwd  int       // the Max-Forwards the forwarded TRACE or OPTIONS carries; -1 = the client's fields as they are
	vec     http1.Vec // writes of the serving goroutine
	bodyVec http1.Vec // writes of the sendBody goroutine

	bodyErr chan error // the sendBody goroutine's result
	nreq    int
	isHead  bool // the request being served is a HEAD: answers carry no body
	metered bool // the request's bytes count against its user's byte quota as they move (gate.Grant.Meter)
	upgrade bool // the request being served is a WebSocket handshake

	hostStr   string // the last target host as a string, reused while it repeats
	methodStr string // the last method as a string, reused while it repeats

	obs observation // what the metrics and access log learn of the current request

	// icept is the intercepted tunnel whose requests the connection
	// serves (see intercept.go); nil = a client connection of its own.
	icept *gate.Intercepted
	// authSame is the last authority of a request inside icept found
	// the same as the tunnel's (sameAuthority); empty = none yet.
	authSame []byte
	// park waits for an intercepted connection's next request on its
	// socket, or on the HTTP/2 stream its tunnel came by (see
	// awaitRequest); nil until its first wait, or when it cannot.
	park tunnel.Waiter
	// looker is park where it can read the client's TLS connection
	// without waiting (tunnel.Looker: on its socket), so that records
	// with no plaintext in them (a KeyUpdate) leave the connection to
	// park; nil otherwise.
	looker tunnel.Looker
	one    [1]byte // what awaitRequest reads
	// The wait for an intercepted connection's next request
	// (awaitRequest): when it ends (idleEnd) and when the upstream goes
	// (upEnd), MonoNow readings (0: never); drained says that the wait
	// is on the socket (park).
	idleEnd, upEnd time.Duration
	drained        bool
	// then is what ServeConnReadThen was given: called once the
	// connection has ended when it went on without the goroutine that
	// served it (connParked, connHeld); nil = it is served on the
	// caller's goroutine throughout.
	then func()
	// stop ends the wake registered on the session's context.
	stop func() bool
	// mu guards notice and gen, which wake reads.
	mu sync.Mutex
	// notice is the wait of a connection parked with no goroutine
	// (notify); nil when none.
	notice tunnel.Waker
	// gen counts the connections the conn has served, so that a wake
	// that comes late leaves the next one alone.
	gen uint64
	// held says the tunnel the connection became is intercepted and
	// goes on without the goroutine that served it, and without the
	// conn (intercept).
	held bool
	// resumeFn is resume, lookFn look, bound once.
	resumeFn func(error)
	lookFn   func() bool
	// A transparent connection's (see ServeTransparent): its original
	// destination (invalid on a proxy port), that destination as
	// host:port, and the access log's target of the current request.
	orig      netip.AddrPort
	origBuf   []byte
	logTarget []byte
}

// work is the bulk of a conn (3.3 KiB of its 3.9): what serves its
// requests, with the buffers they grow. A conn takes one from works when
// it starts serving and gives it back when it ends, and an intercepted
// connection parked between requests lends it back meanwhile, holding
// only the upstream kept for its next request, if any (see notify), so
// that an idle intercepted connection keeps only the rest.
type work struct {
	// x is the exchange with the upstream of the request being served;
	// between requests it may keep the last one's upstream for the next
	// request to the same origin (see origin.Exchange.Keep).
	x origin.Exchange

	req       http1.Head
	tgt       target
	reqChunk  http1.ChunkedScanner
	respChunk http1.ChunkedScanner

	out []byte // a head under construction
	via []byte // the request's Via values, joined

	g  gate.Grant   // the current request's passage through the policy
	gr gate.Request // what g was asked for

	logTgt  []byte // the access log's target of a request inside an intercepted tunnel: its https URL
	scratch []byte // the Host value made for a request without one
}

// works holds the work of the conns that are not serving requests.
var works = sync.Pool{New: func() any { return new(work) }}

// takeWork gives the conn a work to serve requests with, unless it has
// one.
func (cn *conn) takeWork() {
	if cn.work == nil {
		cn.work = works.Get().(*work)
		if cn.kept != nil {
			cn.x.PutKept(cn.kept)
			cn.kept = nil
		}
	}
}

// lendWork gives the conn's work back to works: it must hold nothing of
// the connection's but the upstream kept for the next request, which
// the conn holds meanwhile (kept; takeWork gives it back), no grant
// unfinished, no request being served.
func (cn *conn) lendWork() {
	cn.kept = cn.x.TakeKept()
	w := cn.work
	cn.work = nil
	w.gr = gate.Request{}
	w.req.Buf = nil
	w.tgt = target{}
	if cap(w.out) > 64<<10 {
		w.out = nil
	}
	works.Put(w)
}

func (cn *conn) reset() {
	cn.p, cn.sess, cn.ctx, cn.pool = nil, nil, nil, nil
	cn.icept, cn.park, cn.looker = nil, nil, nil
	cn.authSame = cn.authSame[:0]
	cn.then, cn.stop, cn.held = nil, nil, false
	cn.idleEnd, cn.upEnd, cn.drained = 0, 0, false
	cn.orig = netip.AddrPort{}
	cn.nreq = 0
	if cn.work != nil {
		cn.lendWork()
	}
}

// What serving a connection did with it (serve, step).
const (
	connNext      = iota // a request was served; the connection waits for the next (step only)
	connServed           // the connection has been served: the caller closes it
	connHandedOff        // the connection became a tunnel, which owns it
	connParked           // the connection waits for its client with no goroutine: it is no longer the caller's to touch (awaitRequest)
	connHeld             // the connection's tunnel is intercepted and goes on without this goroutine and the conn (intercept)
)

// errParked is what awaitRequest returns when the connection has been
// parked (notify): it goes on from resume, on another goroutine.
var errParked = errors.New("httpproxy: parked")

// serve runs the request loop. It reports what became of the
// connection: connServed, connHandedOff, connParked or connHeld.
func (cn *conn) serve() int {
	p := cn.p
	for {
		if cn.ctx.Err() != nil {
			return connServed
		}
		wait := p.cfg.IdleTimeout
		if cn.nreq == 0 {
			wait = p.cfg.ReadHeaderTimeout
		}
		cn.isHead = false
		cn.idle.Store(true)
		var err error
		if cn.icept != nil && cn.nreq > 0 && cn.client.R == cn.client.W {
			if err = cn.awaitRequest(wait); err == errParked {
				return connParked
			}
		} else {
			cn.client.ArmReadDeadline(http1.MonoNow(), wait)
		}
		if r := cn.step(err); r != connNext {
			return r
		}
	}
}

// step serves the next request once the wait for its first byte has
// ended with err (nil: the head is to be read), and reports what became
// of the connection (connNext: it waits for the next request).
func (cn *conn) step(err error) int {
	p := cn.p
	if cn.ctx.Err() != nil { // a wake may have run before idle was set or the deadline armed
		return connServed
	}
	var n int
	if err == nil {
		n, err = cn.client.ReadHead(p.o.MaxHeaderBytes, p.cfg.ReadHeaderTimeout)
	}
	cn.idle.Store(false)
	if err != nil {
		// Nothing of a request (a close or an idle timeout) is no
		// refusal; a head begun and not finished is.
		var pe *http1.ParseError
		var ne net.Error
		switch {
		case err == http1.ErrIdle, err == http1.ErrIdleTimeout:
		case err == http1.ErrTLSHandshake:
			cn.refuseTLS(err)
		case errors.As(err, &pe):
			cn.req.ParseRequestLine(cn.client.Buffered())
			cn.rejectHead(pe.Status, pe.Reason, headReason(pe), err)
		case errors.As(err, &ne) && ne.Timeout() && cn.ctx.Err() == nil:
			cn.req.ParseRequestLine(cn.client.Buffered())
			cn.rejectHead(408, "request head not received in time", accesslog.ReasonHeadTimeout, err)
		}
		return connServed
	}
	cn.nreq++
	if err := cn.req.ParseRequest(cn.client.Buf[cn.client.R : cn.client.R+n]); err != nil {
		var pe *http1.ParseError
		if errors.As(err, &pe) {
			cn.rejectHead(pe.Status, pe.Reason, headReason(pe), err)
		}
		return connServed
	}
	cn.client.R += n
	cn.isHead = string(cn.req.Method.Of(cn.req.Buf)) == "HEAD"
	cn.begin()
	keep, handedOff := cn.handle()
	if handedOff {
		if cn.held {
			return connHeld
		}
		return connHandedOff
	}
	cn.finish()
	if !keep {
		return connServed
	}
	return connNext
}

// awaitRequest waits, for at most wait (0: no limit), for the first
// byte of the next request on an intercepted connection, idle between
// requests with nothing of one read: it holds no read buffer meanwhile,
// and closes the upstream the last request left for the next once the
// client has sent nothing for the Proxy's UpstreamIdle. It returns what
// ReadHead returns for a connection that ends before a byte of a
// request, ErrIdle or ErrIdleTimeout, and otherwise nil with the byte in
// the connection's buffer; or errParked, when the connection waits with
// no goroutine (see notify).
//
// When crypto/tls holds nothing of the client's (it reads no further
// than the record it reads, see tunnel.TLSParker, and the last read
// took less than it asked for, so it left no plaintext), the wait is on
// the socket (or on the HTTP/2 CONNECT stream the tunnel came by, see
// tunnel.TLSWaiter), without the deep stack of a TLS read: where the platform
// allows and the connection is served with a continuation
// (ServeConnReadThen), no goroutine waits (Parker.Notify, see notify);
// otherwise the goroutine waits in Parker.WaitRead, which borrows a
// buffer only once there are bytes, and its stack, grown by the
// requests, can shrink while it waits. Either way the client's bytes
// are then read into the connection's buffer (see awaitFirst).
//
// The upstream is closed, not pooled: idle in the pool (for the same
// identity's next tunnel to the name) it would cost as much as here, its
// socket and TLS state, for as long as upstream.idle_timeout.
func (cn *conn) awaitRequest(wait time.Duration) error {
	c := &cn.client
	drained := c.W < len(c.Buf)
	c.Release()
	if drained && cn.park == nil {
		if tc, ok := c.C.(*tls.Conn); ok {
			// Under the TLS connection, the interceptor's wrapper.
			cn.park, _ = tunnel.TLSWaiter(tc)
			cn.looker, _ = cn.park.(tunnel.Looker)
		}
	}
	now := http1.MonoNow()
	cn.idleEnd, cn.upEnd = 0, 0
	if wait > 0 {
		cn.idleEnd = now + wait
	}
	if up := cn.p.cfg.UpstreamIdle; up > 0 && cn.x.Up.C != nil && (wait <= 0 || up < wait) {
		cn.upEnd = now + up
	}
	cn.drained = drained
	if drained && cn.park != nil && cn.then != nil {
		if cn.sentSoon(now) {
			return cn.awaitSent()
		}
		if err := cn.notify(); err != errNoNotify {
			if err == nil { // readable already
				return cn.awaitByte()
			}
			return err
		}
	}
	return cn.awaitByte()
}

// parkAfter is how long an idle connection that may park (notify)
// first waits for its client's next request on its goroutine: a client
// that sends its requests one after another is served on with no
// epoll registration, goroutine and timer started per request (on
// loopback, about a third of rustle's system calls per intercepted
// request); one idle for longer parks. The deadline of that wait is
// kept from request to request while it falls within parkSlack of
// parkAfter from now (the wait may end up to parkSlack sooner), so that
// a connection whose requests come a few milliseconds apart, as each of
// many busy connections' do, moves its timer once every few requests,
// not once each.
const (
	parkAfter = 50 * time.Millisecond
	parkSlack = parkAfter / 2
)

// sentSoon is awaitRequest's wait of parkAfter on this goroutine, at
// now (a MonoNow reading), for a connection that may park: it reports
// whether the client has sent (or its socket failed: awaitSent finds
// out), false when parkAfter passed first, the connection was woken or
// its own deadline comes sooner. Its deadline, armed with parkSlack,
// stays armed while the request is read
// (awaitSent), so that a client sending its requests one after another
// has it armed about once every parkSlack, not three deadlines per
// request (this one, the idle one for the first byte and the head's).
func (cn *conn) sentSoon(now time.Duration) bool {
	end := cn.idleEnd
	if cn.upEnd > 0 {
		end = cn.upEnd
	}
	if end > 0 && end-now <= parkAfter {
		return false
	}
	cn.client.ArmReadDeadlineSlack(now, parkAfter, parkSlack)
	if cn.ctx.Err() != nil { // a wake may have run before the deadline was armed
		return false
	}
	return !errors.Is(cn.park.WaitRead(), os.ErrDeadlineExceeded)
}

// awaitByte is awaitRequest's wait on this goroutine, until cn.idleEnd,
// the upstream going at cn.upEnd (MonoNow readings; 0: none).
func (cn *conn) awaitByte() error { return cn.awaitFirst(false) }

// awaitSent is awaitByte once sentSoon has seen the client send: the
// read deadline sentSoon armed, sooner than awaitByte's, is kept for the
// bytes that are coming; only if it passes before they are read (a
// record cut short) is awaitByte's armed, and the read tried again.
func (cn *conn) awaitSent() error { return cn.awaitFirst(true) }

// awaitFirst is awaitByte, and awaitSent when sent. Where the client's
// bytes are known to be there, crypto/tls holding plaintext or
// Parker.WaitRead having seen the socket readable, they are read
// straight into the connection's buffer: the head of a request sent in
// one record is then whole in it, and ReadHead arms no deadline of its
// own. Otherwise (no Parker) the read waits for the first byte alone,
// holding no buffer meanwhile.
//
// A connection that may park (looker, then) reads without waiting
// (tunnel.Looker.ReadNow) once the socket is readable: records with no
// plaintext in them (a TLS 1.3 KeyUpdate, an empty record, of its TLS
// or of the one it runs inside) or a record cut short leave it holding
// no buffer, waiting on for sentSoon's deadline (a few times at most),
// then parked (parkNow), as a connection whose client sent nothing is;
// crypto/tls keeps a record cut short for the next read.
func (cn *conn) awaitFirst(sent bool) error {
	c := &cn.client
	lookNow := cn.drained && cn.looker != nil && cn.then != nil
	read := func() (int, error) {
		if cn.ctx.Err() != nil {
			return 0, http1.ErrIdle
		}
		if cn.drained && cn.park == nil {
			return c.Read(cn.one[:])
		}
		if cn.drained {
			if err := cn.park.WaitRead(); err != nil {
				return 0, err
			}
		}
		if c.Buf == nil {
			c.TakeBuf(&http1.ClientBufs)
		}
		if lookNow {
			return cn.looker.ReadNow(c.C, c.Buf)
		}
		return c.Read(c.Buf)
	}
	var n int
	var err error
	for passes := 0; ; {
		now := http1.MonoNow()
		end := cn.idleEnd
		if cn.upEnd > 0 {
			end = cn.upEnd
		}
		if rdl := c.ReadDeadline(); !sent || rdl <= now || (end > 0 && rdl > end) {
			if sent && passes > 0 {
				// sentSoon's deadline passed with no request come.
				return cn.parkLooked()
			}
			// Not sentSoon's deadline, sooner, to keep: awaitByte's.
			sent = false
			if end > 0 {
				c.ArmReadDeadline(now, max(end-now, 1))
			} else {
				c.ArmReadDeadline(now, 0)
			}
		}
		n, err = read()
		if n == 0 && lookNow && cn.ctx.Err() == nil && (errors.Is(err, tunnel.ErrNoPlaintext) || sent && timedOut(err)) {
			// No request yet: the client's records held no plaintext,
			// or one was cut short.
			c.Release()
			if passes++; sent && passes < lookPasses && !timedOut(err) {
				continue
			}
			return cn.parkLooked()
		}
		if n == 0 && sent && timedOut(err) && cn.ctx.Err() == nil {
			sent = false // sentSoon's deadline passed first: awaitByte's now
			continue
		}
		if n == 0 && cn.upEnd > 0 && timedOut(err) && cn.ctx.Err() == nil {
			// The client is idle: its upstream goes, and it gets the
			// rest of its idle time.
			cn.x.Drop()
			cn.upEnd = 0
			continue
		}
		break
	}
	if c.Buf == nil {
		c.TakeBuf(&http1.ClientBufs)
		if n > 0 {
			c.Buf[0] = cn.one[0]
			n = 1
		}
	}
	if n > 0 {
		c.W = n
		return nil
	}
	if timedOut(err) {
		return http1.ErrIdleTimeout
	}
	return http1.ErrIdle
}

// lookPasses bounds the reads of awaitFirst that find no request in
// what the client's socket brought before its connection parks.
const lookPasses = 4

// errNoNotify is notify's answer where the platform has no wait without
// a goroutine: the caller waits on its own.
var errNoNotify = errors.New("httpproxy: no notify")

// notify parks an intercepted connection idle between requests until
// its client sends, its upstream is to go (cn.upEnd) or its idle time
// is over (cn.idleEnd), with no goroutine: tunnel.Parker.Notify calls
// resume, which serves on, on a goroutine of its own, as h2 parks an
// idle connection. It returns errParked then, after which the
// connection is no longer the caller's to touch; nil when the client
// has sent already (the byte is to be read); ErrIdle when the socket
// failed or the connection is shutting down; errNoNotify where the
// platform cannot park it so.
func (cn *conn) notify() error {
	switch ok, err := cn.park.Ready(); {
	case ok && err != nil:
		return http1.ErrIdle
	case ok:
		return nil
	}
	return cn.parkNow()
}

// parkLooked parks a connection whose client's socket has been found to
// bring no request (awaitFirst): errParked, or ErrIdle where it cannot
// (it can: looker's ReadNow finds no plaintext only where it can).
func (cn *conn) parkLooked() error {
	if err := cn.parkNow(); err != errNoNotify {
		return err
	}
	return http1.ErrIdle
}

// parkNow is notify with no look at the socket first: the wait's own
// look (looker's NotifyLook, see look) reads what the socket brings, the
// connection staying parked while that is no plaintext.
func (cn *conn) parkNow() error {
	end := cn.idleEnd
	if cn.upEnd > 0 {
		end = cn.upEnd
	}
	var deadline time.Time
	if end > 0 {
		deadline = time.Now().Add(end - http1.MonoNow())
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.ctx.Err() != nil { // wake has run: it found no Notice to wake
		return http1.ErrIdle
	}
	// The work holds nothing of the connection's between requests but
	// the upstream kept for the next, which the conn holds meanwhile:
	// it goes back to its pool until resume.
	cn.lendWork()
	var n tunnel.Waker
	var ok bool
	if cn.looker != nil {
		n, ok = cn.looker.NotifyLook(deadline, cn.lookFn, cn.resumeFn)
	} else {
		n, ok = cn.park.Notify(deadline, cn.resumeFn)
	}
	if !ok {
		cn.takeWork()
		return errNoNotify
	}
	cn.notice = n
	return errParked
}

// resume is the end of notify's wait, on a goroutine of its own: the
// client has sent (err nil), a deadline has passed, the wait was woken
// by the connection's end (wake) or failed. It reads the request's
// first byte, or parks the connection again once its upstream is gone,
// and serves on.
func (cn *conn) resume(err error) {
	then := cn.then
	cn.mu.Lock()
	cn.notice = nil
	cn.mu.Unlock()
	cn.takeWork()
	switch {
	case err == nil && cn.looker != nil:
		// look has read the request's first bytes, or met the
		// connection's end.
		if cn.client.W == 0 {
			err = http1.ErrIdle
		}
	case err == nil:
		err = cn.awaitByte()
	case errors.Is(err, os.ErrDeadlineExceeded) && cn.upEnd > 0 && cn.ctx.Err() == nil:
		// The client is idle: its upstream goes, and it gets the rest
		// of its idle time.
		cn.x.Drop()
		cn.upEnd = 0
		switch err = cn.notify(); err {
		case errParked:
			return
		case nil:
			err = cn.awaitByte()
		case errNoNotify: // cannot be: it could before
			err = http1.ErrIdle
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = http1.ErrIdleTimeout
	default:
		err = http1.ErrIdle
	}
	if err == errParked { // parked again (awaitFirst)
		return
	}
	// then was read before serving on: once parked again the conn is no
	// longer this goroutine's.
	r := cn.step(err)
	if r == connNext {
		r = cn.serve()
	}
	if !cn.after(r) {
		then()
	}
}

// look is the parked connection's look at what its client's socket
// brought (looker's NotifyLook), on the wait's goroutine, before resume:
// it reads the client's TLS connection without waiting into a buffer,
// and reports true when that gave bytes of the next request (left in
// the buffer for resume) or met the connection's end or an error
// (resume ends it); false, holding no buffer, when the records held no
// plaintext (a KeyUpdate) or one was cut short: the connection stays
// parked.
func (cn *conn) look() bool {
	c := &cn.client
	c.TakeBuf(&http1.ClientBufs)
	n, err := cn.looker.ReadNow(c.C, c.Buf)
	if n > 0 {
		c.W = n
		return true
	}
	c.Release()
	return !errors.Is(err, tunnel.ErrNoPlaintext)
}

// timedOut reports whether err is a deadline's.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
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

// tlsAlertHandshakeFailure is a TLS record carrying a fatal
// handshake_failure alert (RFC 8446 §6): what a TLS client that began a
// handshake on a plain HTTP port is answered, since it could not read an
// HTTP answer. It reports it at once (Go: "remote error: tls: handshake
// failure"; OpenSSL: "sslv3 alert handshake failure").
var tlsAlertHandshakeFailure = []byte{
	0x15,       // content type: alert
	0x03, 0x03, // legacy record version: TLS 1.2
	0x00, 0x02, // length
	0x02, // level: fatal
	0x28, // description: handshake_failure (40)
}

// refuseTLS refuses a client that began a TLS handshake where plain HTTP
// was expected: logged (reason tls-to-plain-port), answered with a fatal
// TLS alert, and closed after a lingering close, so that the rest of its
// ClientHello does not reset the connection before the alert is read.
func (cn *conn) refuseTLS(cause error) {
	cn.sess.Reject(&gate.Request{}, &cn.g, 0, accesslog.ReasonTLSToPlainPort, cause)
	cn.client.ArmWriteDeadline(http1.MonoNow(), cn.p.o.WriteTimeout)
	if _, err := cn.client.C.Write(tlsAlertHandshakeFailure); err == nil {
		http1.LingerClose(cn.client.C, lingerTime)
	}
}

// lingerTime bounds how long a connection refused before a request is
// read from after the answer, for a lingering close.
const lingerTime = 250 * time.Millisecond

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
	req := &cn.req
	if cn.isPACRequest() {
		return cn.servePAC(), false
	}
	if keep, ok := cn.authorize(); !ok {
		return keep, false
	}
	if string(req.Method.Of(req.Buf)) == "CONNECT" {
		return false, cn.connect()
	}
	return cn.forward()
}

// authorize parses the request's target and asks the session's policy
// about the request. On a refusal it has answered the client, and keep
// says whether the connection serves another request.
func (cn *conn) authorize() (keep, ok bool) {
	req := &cn.req
	method := req.Method.Of(req.Buf)
	hasBody := req.Chunked || req.ContentLength > 0
	isConnect := string(method) == "CONNECT"
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
	r.Original, r.HelloRead, r.SNI = netip.AddrPort{}, false, ""
	switch {
	case cn.icept != nil:
		r.Protocol, r.Log = acl.HTTPS, accesslog.ProtoHTTP
		err = cn.interceptTarget(cn.icept, isConnect)
	case cn.orig.IsValid():
		err = cn.transparentTarget(r, isConnect)
	case isConnect:
		r.Protocol, r.Log = acl.Connect, accesslog.ProtoConnect
		err = parseAuthorityForm(r.Target, &cn.tgt)
	default:
		r.Protocol, r.Log = acl.HTTP, accesslog.ProtoHTTP
		err = parseAbsoluteTarget(r.Target, &cn.tgt)
	}
	if err != nil {
		var pe *http1.ParseError
		errors.As(err, &pe)
		reason := accesslog.ReasonBadRequest
		if pe.Status == 421 {
			reason = accesslog.ReasonMisdirected
		}
		cn.sess.Reject(r, &cn.g, pe.Status, reason, err)
		cn.writeError(pe.Status, pe.Reason, false)
		return false, false
	}
	// A WebSocket handshake keeps its Upgrade field; the connection becomes
	// a tunnel if the origin switches protocols.
	cn.upgrade = !isConnect && req.Minor == 1 && string(method) == "GET" && !hasBody && req.UpgradesTo("websocket")
	if cn.upgrade {
		req.Fields[req.UpgradeIdx].Drop = false
		if !cn.orig.IsValid() {
			r.Protocol = acl.WebSocket
		}
	}
	r.Path = ""
	if !isConnect {
		r.Path = bytesString(cn.tgt.path)
	}
	switch in := cn.icept; {
	case in != nil:
		// To the tunnel's destination, logged as the https URL.
		r.Host, r.Addr, r.Port = in.Host, in.Addr, in.Port
		r.Target = cn.logTgt
	case !cn.orig.IsValid():
		r.Host = cn.internHost()
		r.Port = uint16(cn.tgt.port)
		r.Addr = netip.Addr{}
	}
	switch k := cn.sess.Authorize(r, &cn.g); k {
	case gate.OK:
		return false, true
	case gate.NeedAuth:
		keep := !hasBody && req.Minor == 1 && !req.ConnClose
		cn.writeError(407, k.Reason(), keep)
		return keep, false
	case gate.Denied:
		keep := !hasBody && !req.ConnClose && (req.Minor == 1 || req.ConnKeepAlive) && !isConnect
		cn.writeError(403, k.Reason(), keep)
		return keep, false
	default:
		cn.writeError(k.Status(), k.Reason(), false)
		return false, false
	}
}

// forward serves a granted request for an origin: the exchange sends it
// (see origin.Exchange), the rest of a streamed body follows, and the
// response is relayed. It reports whether the client connection stays
// open for another request, and whether it became a tunnel (a
// WebSocket handshake the origin accepted).
func (cn *conn) forward() (keep, handedOff bool) {
	req := &cn.req
	cn.maxFwd = -1
	if method := req.Method.Of(req.Buf); origin.HopLimited(method) {
		hasBody := req.Chunked || req.ContentLength > 0
		clientKeep := !req.ConnClose && (req.Minor == 1 || req.ConnKeepAlive)
		if answered, keep := cn.hopLimit(hasBody, clientKeep); answered {
			return keep, false
		}
	}
	cn.metered = cn.g.Meter()
	req.DropConnectionListed()
	if err := cn.x.Begin(cn.p.oc, &cn.g, cn.gr.Method, cn.mode()); err != nil {
		cn.writeFailure(err)
		return false, false
	}
	body, remaining, ok := cn.bufferedBody()
	if !ok {
		return false, false
	}
	n, err := cn.x.Send(cn, body)
	cn.obs.up = n
	if req.Chunked {
		cn.obs.up = content(http1.ChunkedScanner{}, body.Buffered, n, true)
	}
	if err != nil {
		cn.writeFailure(err)
		return false, false
	}
	streaming := !body.Done
	if streaming && !cn.streamBody(remaining) {
		return false, false
	}
	if cn.x.Resp.Status == 101 {
		return false, cn.switchProtocols()
	}
	return cn.relayResponse(streaming), false
}

// mode is what the request expects of its upstream: a WebSocket
// handshake's tunnel is relayed whatever the connection (see
// gate.Grant.Tunnel).
func (cn *conn) mode() origin.Mode {
	if cn.upgrade {
		return origin.Upgrade
	}
	return origin.Plain
}

// bufferedBody returns the part of the request body already read behind
// its head, which goes out with the head, and how much of a
// Content-Length body is still to come. On a malformed chunked body it
// has answered 400 and reports false.
func (cn *conn) bufferedBody() (body origin.Body, remaining int64, ok bool) {
	req := &cn.req
	switch {
	case req.Chunked:
		cn.reqChunk = http1.ChunkedScanner{}
		m, out, _, err := http1.ScanChunkedNoTrailers(&cn.reqChunk, cn.client.Buffered())
		if err != nil {
			cn.g.SetReason(accesslog.ReasonBadRequest)
			cn.writeError(400, "malformed chunked request body", false)
			return body, 0, false
		}
		cn.client.R += m
		return origin.Body{Buffered: out, Done: cn.reqChunk.Done()}, 0, true
	case req.ContentLength > 0:
		avail := cn.client.Buffered()
		n := min(int64(len(avail)), req.ContentLength)
		cn.client.R += int(n)
		remaining = req.ContentLength - n
		return origin.Body{Buffered: avail[:n], Done: remaining == 0}, remaining, true
	}
	return origin.Body{Done: true, Empty: true}, 0, true
}

// streamBody sends the rest of the request body on its own goroutine
// while the response head is awaited (the response-header timeout starts
// once the body is sent; an early answer is read at once, and a body
// that fails on the client's side ends the wait). It reports false when
// it has answered the client and the exchange is over.
func (cn *conn) streamBody(remaining int64) bool {
	cn.x.StartBody()
	go cn.sendBody(remaining, cn.req.Chunked)
	err := cn.x.ReadResponse(cn)
	cn.x.EndBody()
	if err != nil {
		berr := cn.finishBody()
		cn.x.Drop()
		if cn.x.WasCut() {
			cn.writeBodyError(berr)
		} else {
			cn.writeFailure(err)
		}
		return false
	}
	return true
}

// relayResponse frames and forwards the response whose head the exchange
// read, then keeps, pools or drops the upstream. It reports whether the
// client connection stays open for another request.
func (cn *conn) relayResponse(streaming bool) (keep bool) {
	req := &cn.req
	resp := &cn.x.Resp
	clientKeep := !req.ConnClose && (req.Minor == 1 || req.ConnKeepAlive)
	mode := bodyClose
	switch {
	case cn.x.NoBody():
		mode = bodyNone
	case resp.Chunked:
		mode = bodyChunked
	case resp.ContentLength >= 0:
		mode = bodyLength
	}
	dechunk := mode == bodyChunked && req.Minor == 0
	if mode == bodyClose || dechunk || cn.ctx.Err() != nil {
		// These bodies end with the connection; and once a shutdown
		// has begun, this is the connection's last answer.
		clientKeep = false
	}
	upKeep := cn.x.KeepAlive()
	if streaming && !upKeep {
		// The upstream closes after this response and the request body
		// may still be coming: if so it is cut off and the client
		// connection closed, so say so in any case.
		clientKeep = false
	}
	resp.DropConnectionListed()
	cn.buildResponseHead(clientKeep, req.Minor, dechunk)

	cn.client.ArmWriteDeadline(http1.MonoNow(), cn.p.o.WriteTimeout)
	cn.g.Answer(resp.Status, 0)
	var err error
	cn.obs.down, err = cn.forwardResponseBody(mode, dechunk)
	if streaming && cn.finishBody() != nil {
		// The response ended before the request body did: neither
		// connection is at a message boundary.
		clientKeep, upKeep = false, false
	}
	switch {
	case err != nil:
		cn.x.Drop()
		return false
	case upKeep && clientKeep && cn.pool != nil:
		// Kept for the client's next request, which most often goes to
		// the same origin (see origin.Exchange.Keep).
		cn.x.Keep()
	default:
		cn.x.Release(upKeep)
	}
	return clientKeep
}

// AppendHead appends the head forwarded upstream (see buildRequestHead);
// the exchange asks for it. It is part of conn's origin.Request.
func (cn *conn) AppendHead(dst []byte, parent *route.Parent) []byte {
	return cn.appendRequestHead(dst, parent)
}

// DialContext is the context of the exchange's dials: the session's,
// which a shutdown does not cancel (a request in progress finishes). It
// is part of conn's origin.Request.
func (cn *conn) DialContext() (context.Context, func()) {
	return context.WithoutCancel(cn.ctx), nil
}

// Attach accepts every upstream: the serving goroutine does all the
// waiting itself. It is part of conn's origin.Request.
func (cn *conn) Attach(net.Conn) bool { return true }

// Interim passes an informational response on to an HTTP/1.1 client
// (an HTTP/1.0 one gets none). It is part of conn's origin.Request.
func (cn *conn) Interim(x *origin.Exchange) (bool, error) {
	if cn.req.Minor != 1 {
		return false, nil
	}
	x.Resp.DropConnectionListed()
	cn.buildInterimHead()
	cn.client.ArmWriteDeadline(http1.MonoNow(), cn.p.o.WriteTimeout)
	if _, err := cn.client.Write(cn.out); err != nil {
		return true, &clientError{err}
	}
	return true, nil
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
	up := &cn.x.Up
	timeout := cn.p.o.WriteTimeout
	switch mode {
	case bodyNone:
		_, err := cn.client.Write(cn.out)
		return 0, err
	case bodyLength:
		avail := up.Buffered()
		n := int64(len(avail))
		if n > cn.x.Resp.ContentLength {
			n = cn.x.Resp.ContentLength
		}
		if !cn.pace(&cn.client, int(n)) {
			return 0, errQuotaSpent
		}
		w, err := cn.vec.WriteConn(&cn.client, cn.out, avail[:n])
		down := max(0, w-int64(len(cn.out)))
		if err != nil {
			return down, err
		}
		up.R += int(n)
		m, err := cn.copyN(&cn.client, up, cn.x.Resp.ContentLength-n)
		return down + m, err
	case bodyChunked:
		cn.respChunk = http1.ChunkedScanner{}
		return cn.copyChunked(&cn.vec, &cn.client, up, &cn.respChunk, cn.out, dechunk, false)
	default: // bodyClose
		avail := up.Buffered()
		if !cn.pace(&cn.client, len(avail)) {
			return 0, errQuotaSpent
		}
		w, err := cn.vec.WriteConn(&cn.client, cn.out, avail)
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
			k, err := cn.client.Write(up.Buffered())
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
	timeout := cn.p.o.WriteTimeout
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
		k, err := dst.Write(b)
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
func (cn *conn) copyChunked(v *http1.Vec, dst, src *http1.Conn, cs *http1.ChunkedScanner, head []byte, dechunk, noTrailers bool) (int64, error) {
	timeout := cn.p.o.WriteTimeout
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
			w, err := v.WriteConn(dst, head, out)
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
		n, err = cn.copyChunked(&cn.bodyVec, &cn.x.Up, &cn.client, &cn.reqChunk, nil, false, true)
	} else {
		n, err = cn.copyN(&cn.x.Up, &cn.client, remaining)
	}
	cn.obs.up += n
	if re := (*readError)(nil); errors.As(err, &re) {
		cn.x.BodyCut()
	} else {
		// Sent, or failed upstream: the origin may have answered.
		cn.x.BodySent()
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
	// The writer re-arms its deadlines as it goes: one it armed after
	// these would let it wait out a whole timeout, so they are set
	// again until it has returned.
	past := time.Unix(1, 0)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		cn.client.C.SetReadDeadline(past)
		cn.x.Up.C.SetWriteDeadline(past)
		select {
		case err := <-cn.bodyErr:
			cn.client.ForgetReadDeadline()
			cn.x.Up.ForgetWriteDeadline()
			return err
		case <-tick.C:
		}
	}
}

// connect serves a CONNECT request: dial, answer 200, and hand both
// connections to the tunnel engine. It reports whether the client
// connection was handed off.
//
// A tunnel whose ClientHello the SNI check reads (gate.Grant.NeedsHello)
// is answered first, as its client sends the hello only then: the hello
// is read and decided, and only then dialled (see helloFirst). A hello
// the client sent behind its CONNECT without waiting for the answer is
// decided before it: a refusal is then a 403, a failed dial a 502.
func (cn *conn) connect() bool {
	g := &cn.g
	if g.NeedsHello() {
		h, _, err := sni.Parse(cn.client.Buffered())
		if err == sni.ErrShort {
			return cn.helloFirst()
		}
		if k := g.CheckHello(h, err); k != gate.OK {
			cn.writeError(k.Status(), k.Reason(), false)
			return false
		}
		if g.Intercepting() {
			if !cn.answerConnect() {
				return false
			}
			return cn.intercept()
		}
	}
	upc, err := g.DialConn(context.WithoutCancel(cn.ctx))
	if err != nil {
		cn.writeFailure(err)
		return false
	}
	if !cn.answerConnect() {
		upc.Close()
		return false
	}
	return cn.tunnel(upc)
}

// answerConnect answers a CONNECT 200; false when the write failed.
func (cn *conn) answerConnect() bool {
	cn.g.Answer(200, 0)
	client := cn.client.C
	client.SetWriteDeadline(gate.Deadline(time.Now(), cn.p.o.WriteTimeout))
	_, err := client.Write(connectEstablished)
	return err == nil
}

// helloFirst serves a CONNECT whose ClientHello the SNI check reads
// before the dial: answer 200, read the hello into the client's buffer
// (at most sni.MaxBytes, within the grant's HelloTimeout), decide it
// (gate.Grant.CheckHello), then dial and tunnel, the hello going to the
// origin first. A refusal, or a dial that fails, closes the connection:
// the client had its 200, and learns no more; the access log has the
// reason.
func (cn *conn) helloFirst() bool {
	g := &cn.g
	if !cn.answerConnect() {
		return false
	}
	c := &cn.client
	if t := g.HelloTimeout(); t > 0 {
		c.C.SetReadDeadline(time.Now().Add(t))
	}
	var sc sni.Scanner
	var h sni.Hello
	var err error
	for {
		if h, _, err = sc.Scan(c.Buffered()); err != sni.ErrShort {
			break
		}
		if err = c.Fill(sni.MaxBytes); err != nil {
			break
		}
	}
	c.C.SetReadDeadline(time.Time{})
	c.ForgetReadDeadline()
	if g.CheckHello(h, err) != gate.OK {
		return false
	}
	if g.Intercepting() {
		return cn.intercept()
	}
	upc, err := g.DialConn(context.WithoutCancel(cn.ctx))
	if err != nil {
		return false
	}
	return cn.tunnel(upc)
}

// intercept hands an answered CONNECT whose tunnel is to be intercepted
// (gate.Grant.Intercepting) to the policy's Interceptor, with the bytes
// the client sent into it so far (its ClientHello): the connection's
// read buffer goes back to its pool first, the hello copied out of it.
// It returns once the intercepted connection has ended, having closed
// it: handed off.
//
// A connection served with a continuation (ServeConnReadThen) lets the
// interception go on without this goroutine (gate.Grant.InterceptThen),
// and without the conn: the interception takes the client connection,
// then, and the grant, moved out of the conn, which it finishes; the
// conn goes back to its pool once this goroutine has let go of it
// (connHeld), so that an intercepted connection keeps no conn of its
// CONNECT's.
func (cn *conn) intercept() bool {
	first := append([]byte(nil), cn.client.Buffered()...)
	cn.client.R = cn.client.W
	cn.client.Release()
	if cn.then == nil {
		cn.g.Intercept(cn.client.C, first)
		return true
	}
	g := new(gate.Grant)
	*g, cn.g = cn.g, gate.Grant{}
	cn.held = g.InterceptThen(cn.client.C, first, cn.then)
	return true
}

// switchProtocols completes a WebSocket handshake the origin accepted:
// it passes the 101 on, with any bytes that came behind either head, and
// turns the connection into a tunnel. It reports whether the client
// connection was handed off.
func (cn *conn) switchProtocols() bool {
	cn.x.Resp.Fields[cn.x.Resp.UpgradeIdx].Drop = false
	cn.x.Resp.DropConnectionListed()
	cn.buildSwitchHead()
	cn.g.SetProtocol(accesslog.ProtoWebSocket)
	cn.g.Answer(101, 0)
	upc := cn.x.Up.C
	client := cn.client.C
	client.SetWriteDeadline(gate.Deadline(time.Now(), cn.p.o.WriteTimeout))
	// The bytes behind either head are the tunnel's first.
	w, err := cn.vec.Write(client, cn.out, cn.x.Up.Buffered())
	cn.g.AddBytes(0, max(0, w-int64(len(cn.out))))
	if err != nil {
		cn.x.Drop()
		return false
	}
	// The upstream leaves the exchange: it belongs to the tunnel now.
	cn.x.Detach()
	return cn.tunnel(upc)
}

// tunnel relays the client connection and upc until both directions end
// (see gate.Grant.Tunnel): on the worker's engine for a plain client socket
// (spliced) or a TLS client (Engine.AddTLS; tunnel.RelayTLS without an
// engine), by goroutines for a paced user or elsewhere, after the bytes
// the client sent right behind its request (a TLS ClientHello behind a
// CONNECT, a first frame behind a WebSocket handshake), which are the
// tunnel's first. It takes ownership of both connections and reports
// whether the client connection was handed off.
func (cn *conn) tunnel(upc net.Conn) bool {
	if rest := cn.client.Buffered(); len(rest) > 0 {
		upc.SetWriteDeadline(gate.Deadline(time.Now(), cn.p.o.WriteTimeout))
		n, err := upc.Write(rest)
		cn.g.AddBytes(int64(n), 0)
		if err != nil {
			upc.Close()
			return false
		}
		cn.client.R = cn.client.W
	}
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

// bytesString views b as a string without copying: for a value read only
// while b's bytes stay as they are (the request's, in the head buffer,
// until the next request).
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}
