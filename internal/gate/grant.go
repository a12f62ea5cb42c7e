package gate

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/authz"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/quota"
	"github.com/rustle-proxy/rustle/internal/route"
)

// Request is what a front-end read of one request: the protocol it came
// in, its method, its destination and its credentials.
type Request struct {
	// Protocol is the protocol as the access rules match it.
	Protocol acl.Protocol
	// Log is the protocol as the access log names it.
	Log accesslog.Protocol
	// Method is the request method ("GET", "CONNECT"; "CONNECT" for a
	// SOCKS CONNECT, "UDP ASSOCIATE" for a SOCKS association).
	Method string
	// Host is the destination host: a name, or an IP literal without
	// brackets; "" when the destination is Addr.
	Host string
	// Addr is the destination IP when the client sent one as an address
	// (SOCKS); the zero Addr otherwise.
	Addr netip.Addr
	// Port is the destination port.
	Port uint16
	// Target is the request target as the access log shows it: the
	// absolute URL, or host:port of a tunnel. Authorize copies it.
	Target []byte
	// Path is the request target's path and query, in origin form
	// ("/a/b?q"), which rules' paths match; "" for a tunnel. The decision
	// keeps it: its bytes must stay as they are until the request is
	// finished (a decision pending on the address reads it at the dial).
	Path string
	// Authorization is the Proxy-Authorization value; nil = none. It is
	// ignored when the session has an identity (a client certificate, a
	// SOCKS login).
	Authorization []byte
	// Via is the value of the request's Via fields, comma-separated; nil
	// = none. A request whose Via names this rustle came back through a
	// parent and is refused (Loop); a tunnel's is sent on in the Via of
	// the CONNECT to an HTTP parent (see route.Target). Authorize copies
	// it.
	Via []byte
	// Original is the destination a transparent listener's client
	// connected to before the kernel redirected the connection to rustle
	// (see transparent.go); the zero AddrPort for every other request.
	// When it is valid the grant dials it and nothing else, directly or
	// through a parent given its address ("pinned"): Host is then the
	// name the client gave (its TLS server name, its Host field; ""
	// none), which the rules, the routes and the access log see beside
	// Original's address but which is never resolved, and an IP literal
	// there other than Original's address is dropped. The access log
	// shows it (orig_dst).
	Original netip.AddrPort
	// HelloRead says the front-end read the connection's first bytes
	// before Authorize (a transparent connection): SNI is then the
	// server_name of its TLS ClientHello, "" when there is none (no
	// name, not TLS, plain HTTP), which rules on sni_hosts match at
	// once, never pending; false for every other request.
	HelloRead bool
	// SNI is the server_name the first bytes named, when HelloRead.
	SNI string
}

// Grant is one request's passage through the policy: the outcome of
// Authorize, and on a grant what the request may do and what is learnt of
// it until Finish. The zero Grant is ready for Authorize; a front-end
// keeps one per connection (or stream) and reuses it, which keeps the
// request path free of allocations. A Grant is used by one goroutine at a
// time, except that Throttle and Pace, which read only what Authorize and
// Meter set, may be called from other goroutines until the next
// Authorize (a stream's relay directions pace concurrently).
type Grant struct {
	s *Session

	// User is the authenticated user; "" = anonymous, or not
	// authenticated (the access log then names the user tried). A name
	// with a session key ("alice-session-42") is whole here, as the
	// access log, the access rules, the routes and the egress source see
	// it; it may have authenticated as its base user (see account).
	User string
	// Rule names the access rule that decided (the last one asked, for an
	// address-dependent decision); "" when there are no rules.
	Rule string
	// RetryAfter is how long a CoolingDown client must wait.
	RetryAfter time.Duration

	decision acl.Decision   // the ACL verdict, when decided; it holds the request as the rules see it (see req) either way
	audited  string         // a rule in audit mode let one of an association's datagrams through past it ("" none; see wouldDeny)
	route    *route.Route   // the route Authorize chose; nil = direct (see route.go)
	parent   *route.Parent  // the parent Dial went through; nil = direct
	via      []byte         // a copy of Request.Via, sent on to an HTTP parent's CONNECT; its array is kept by reset
	dst      destination    // the request's destination, which the grant dials (see dest.go)
	throttle *limits.Bucket // the user's byte bucket; nil = not paced
	groups   []string       // the groups the user's identity provider gave it; shared, never modified
	account  string         // the account User authenticated as (Policy.account): what limits, quotas, metrics and revocation count
	quota    *quota.User    // the account's quota counters; nil = none
	meter    *quota.Meter   // counts the tunnel's bytes as they move; nil = not metered
	meterBuf *quota.Meter   // the meter Meter reuses request after request (kept by reset)
	counted  string         // the account counted for the grant's life (not the connection's); "" none

	// What the access log and the metrics learn of the request.
	start    time.Time
	method   string
	target   []byte // a copy of Request.Target
	upstream netip.AddrPort
	source   netip.AddrPort // the upstream's local address when an egress source chose it
	opts     dialer.Options // the dial's options, made by DialOptions
	reason   string         // the access log's Reason; "" = see the session
	// tried is the user name refused credentials named, which the access
	// log shows for a refusal; never a password, and never a user of the
	// metrics or the Limiter's user counts.
	tried []byte
	cause error    // what was wrong, for the debug line of a Reject; nil = nothing said
	added [2]int64 // payload bytes up and down the front-end wrote itself (AddBytes)

	// The SNI check (see sni.go).
	sni string // the access log's sni field: the server name, or why there is none ("[not-tls]")

	// Interception (see intercept.go).
	original netip.AddrPort // Request.Original: a transparent request's pinned destination
	ownDial  *addrPair      // its direct upstream connection's ends, in ownDials until the request or its tunnel ends; nil = none
	// The decision service (see authz.go).
	authzHeaders []authz.Header // the fields its answer adds to a forwarded request; nil = none

	// The fields of one to four bytes, together so that they share four
	// words instead of taking one each: every idle tunnel and flow keeps
	// a Grant (h3's in its reqStream), and a parked intercepted
	// connection its CONNECT's: 880 bytes, 888 with the header the
	// allocator puts on an object of over 512 bytes with pointers, in
	// the size class of 896 (beyond it, 1024).
	decided  bool     // decision holds an ACL verdict
	picked   bool     // parent was picked (by ForwardParent) before the dial
	forward  bool     // plain HTTP sent to parent (an http one) in absolute form
	plain    bool     // ForwardParent was asked: a plain HTTP request, which its front-end retries itself
	retried  bool     // RetryParent moved the request to another parent already
	hold     holdKind // what Hold counted, given back at Finish
	observe  bool     // the access log and the metrics learn of the request
	tunnel   bool     // a tunnel was opened: counted, its bytes reported at Finish
	finished bool
	proto    accesslog.Protocol
	// coolStarted: the credentials' failure started the cool-down
	// they were refused for (see AddressCooling).
	coolStarted bool
	// Of the SNI check (see sni.go).
	wantHello    bool       // the tunnel reads its ClientHello before it dials (NeedsHello)
	routePending bool       // the route depends on the hello's server name
	hello        helloState // what is known of the hello
	// Of interception (see intercept.go).
	interceptOn bool  // the policy's Interceptor considers the tunnel: Intercepts is asked once its hello is read
	intercepted bool  // the tunnel was intercepted (Intercept)
	icept       int32 // the interception rule that names the tunnel; -1 none
	status      int16 // the status (or SOCKS reply) sent; 0 = none
	// class is the HTTP status the metrics count status as; 0 = none,
	// classUnanswered = logged though nothing was answered (a Reject
	// with status 0, AnswerNothing), and not counted as a request.
	class int16
}

// Authorize decides r for the session and fills g: the user, its limits
// and the access rule's verdict. It returns OK for a grant, or why the
// request is refused; a refusal is counted in the metrics, and the front-
// end answers it and calls Finish with the status it sent.
//
// Credentials the session has a verdict on (its identity, the value it
// accepted last, within authMemoTTL) cost one lock. Others are checked
// one at a time per session (see Session.verifyMu), and refused
// unchecked while the client's address, or the user name they try at it,
// cools down, on every connection and stream. A request without
// credentials is counted as a challenge, wrong ones as a failure, which
// the access log names the user tried of; neither gets a per-user series
// or a user count.
func (s *Session) Authorize(r *Request, g *Grant) Kind {
	p := s.p
	s.Observe(r, g)
	g.setDest(r)
	if kind := s.checkLoop(r, g); kind != OK {
		return kind
	}

	k := s.lookup(r.Authorization)
	if !k.identified && !k.memo && p.Auth != nil {
		if r.Authorization == nil {
			p.Metrics.AuthChallenged()
			return g.refuse(NeedAuth)
		}
		var kind Kind
		if k, kind = s.verifyHeader(r.Authorization, g); kind != OK {
			return kind
		}
	}
	user := k.user
	g.groups = k.groups
	if k.counted {
		g.User, g.account, g.throttle, g.quota = user, user, k.throttle, k.quota
	} else if kind := s.admitUser(user, g); kind != OK {
		return g.refuse(kind)
	}

	g.decision = acl.Undecided(acl.Request{
		Client: s.ip, User: user, Groups: k.groups, Host: r.Host, Addr: r.Addr, Port: r.Port,
		Method: r.Method, Protocol: r.Protocol, Path: r.Path, HelloRead: r.HelloRead, SNI: r.SNI,
	})
	ar := g.req()
	if in := s.icept; in != nil {
		// A request inside an intercepted tunnel: the rules on sni_hosts
		// see the tunnel's hello.
		ar.HelloRead, ar.SNI = true, in.SNI
		g.sni = in.SNI
	}
	if g.original.IsValid() {
		g.pin(ar)
	}
	if p.ACL != nil {
		g.decision = p.ACL.Decide(*ar)
		g.decided = true
		g.Rule = g.decision.Rule
		if !g.decision.Allow {
			p.Metrics.ACLDenied()
			return g.refuse(Denied) // logged at Finish
		}
	}
	g.chooseRoute(ar)
	g.interceptOn = p.Intercept != nil && ar.Protocol&acl.HelloProtocols != 0 && p.Intercept.Considers(ar)
	g.wantHello = g.interceptOn || g.wantsHello(ar, g.routePending)
	if p.Authz != nil && !g.wantHello {
		// A tunnel that reads its ClientHello is decided with the
		// hello's server name, in CheckHello; a request inside an
		// intercepted tunnel with the tunnel's.
		if kind := g.askAuthz(ar.SNI); kind != OK {
			return kind
		}
	}
	if !g.quota.Begin() {
		s.debug("gate: quota exceeded", slog.String("user", user))
		return g.refuse(QuotaExceeded)
	}
	return OK
}

// Matches appends to dst the indexes of the entries of m that the
// granted request matches, in order, as the access rules and the routes
// were asked of it (see [acl.Matcher.AppendMatches]): for the tables
// other packages choose by the same criteria (the header rules of
// forwarded requests). It allocates nothing beyond dst's growth. It is
// valid once Authorize returned OK.
func (g *Grant) Matches(m *acl.Matcher, dst []int) []int {
	return m.AppendMatches(dst, *g.req())
}

// req returns the request as the access rules see it, which the grant
// keeps in its decision (see acl.Undecided): what the rules decided, for
// a decision again with the hello's server name, the routes and the
// decision service.
func (g *Grant) req() *acl.Request { return g.decision.Request() }

// privateHint tells an operator how to let a private destination through.
const privateHint = `to allow it, list its range in allow_private (or a rule's allow_private) in the configuration, or start rustle with --allow-private CIDR`

// admitUser makes user the grant's user and counts it (see countUser):
// OK, or UserLimit past the user's connection limit.
func (s *Session) admitUser(user string, g *Grant) Kind {
	g.User = user
	g.account = s.p.account(user)
	g.quota = s.p.Quota.User(g.account)
	bucket, perGrant, ok := s.countUser(g.account)
	if !ok {
		s.debug("gate: too many connections for the user", slog.String("user", user))
		return UserLimit
	}
	g.throttle = bucket
	if perGrant {
		g.counted = g.account
	}
	return OK
}

// Observe starts observing r without authorizing it, for a request the
// front-end refuses before it can be decided (a malformed target): the
// front-end answers it, calls Answer and Finish, and it is logged and
// counted as any other.
func (s *Session) Observe(r *Request, g *Grant) {
	g.reset(s)
	g.observe = s.p.observing()
	if g.observe {
		g.start = time.Now()
	}
	// Kept even unobserved: a refusal's debug line names them.
	g.proto = r.Log
	g.method = internMethod(g.method, r.Method)
	g.target = append(g.target[:0], r.Target...)
}

// Reject reports what the front-end refused before it became a request
// the policy could decide, or a connection that failed before it carried
// one: a malformed, oversized or unfinished request head, ambiguous
// framing, an HTTP/2 protocol error, a failed TLS handshake, plain HTTP
// on a TLS port. r says what was read of it: Log, and Method and Target
// as far as they were parsed (nil and "" are logged as "-"; a target
// with userinfo is not logged: see LoggableTarget; the rest of r is
// ignored). status is what the client was answered, 0 = nothing;
// reason is one of the accesslog Reason constants; cause, when not nil,
// says what was wrong, in the debug line only (it must hold no byte of
// a header value or a body). The front-end writes its answer itself. g
// is finished on return: it was logged, and counted as a request when
// status is not 0, as any other refusal.
func (s *Session) Reject(r *Request, g *Grant, status int, reason string, cause error) {
	s.Observe(&Request{Log: r.Log, Method: r.Method, Target: LoggableTarget(r.Target)}, g)
	if s.icept != nil {
		g.User = s.identity // the intercepted tunnel's user, whom the log names
	}
	g.Answer(status, 0)
	if status == 0 {
		g.class = classUnanswered
	}
	g.reason, g.cause = reason, cause
	g.Finish(0, 0)
}

// Observing reports whether the request is observed (metrics or access
// log configured): a front-end skips taking times that would only feed
// them.
func (g *Grant) Observing() bool { return g.observe }

// SetProtocol changes the protocol the access log names, for a request
// that turned into another (an HTTP request upgraded to WebSocket).
func (g *Grant) SetProtocol(p accesslog.Protocol) { g.proto = p }

// internMethod returns m as a string, reusing prev when it is the same:
// a connection's requests repeat their method.
func internMethod(prev, m string) string {
	if prev == m {
		return prev
	}
	switch m {
	case "GET":
		return "GET"
	case "CONNECT":
		return "CONNECT"
	}
	return m
}

// reset makes g ready for a new request of s, keeping its buffers.
func (g *Grant) reset(s *Session) {
	if g.s != nil && !g.finished {
		g.end()
	}
	target, method, tried, via, meterBuf := g.target[:0], g.method, g.tried[:0], g.via[:0], g.meterBuf
	*g = Grant{s: s, target: target, method: method, tried: tried, via: via, meterBuf: meterBuf, dst: g.dst.keep(), icept: -1}
}

// Session returns the session g belongs to.
func (g *Grant) Session() *Session { return g.s }

// Throttle returns the user's byte bucket: a paced user's bytes wait on it
// before they are written. nil = not paced.
func (g *Grant) Throttle() *limits.Bucket { return g.throttle }

// Pace waits, for a paced user, until n more bytes may pass (or ctx is
// done); it is called before the bytes are written. Once Meter started
// metering the request it also counts the n bytes against the user's
// byte quota, unless the quota is spent already: it then reports false,
// and the front-end ends the request without writing them (logged with
// the reason quota). The write that crosses the quota goes through.
func (g *Grant) Pace(ctx context.Context, n int) bool {
	if n <= 0 {
		return true
	}
	if g.throttle != nil {
		g.throttle.Wait(ctx, n)
	}
	return g.meter == nil || g.meter.Ahead(int64(n))
}

// Take is Pace for a tunnel that relays its bytes itself (an HTTP/2
// CONNECT stream): it waits, for a paced user, until n more bytes may
// pass (or ctx is done), and returns how many of the n bytes may be
// sent: all of them, unless Meter started metering the request and the
// user's byte quota allows fewer (see quota.Meter.Take). The tunnel
// sends those, and the direction that got fewer than it asked for moves
// nothing more. Each Take is followed by one Taken, once its bytes were
// sent or given up.
func (g *Grant) Take(ctx context.Context, n int) int {
	if g.throttle != nil && n > 0 {
		g.throttle.Wait(ctx, n)
	}
	if g.meter == nil {
		return n
	}
	return int(g.meter.Take(int64(n)))
}

// Taken ends a Take whose bytes were sent or given up, and reports
// whether the tunnel is to end now for its user's byte quota (Finish
// logs it with the reason quota): the quota is reached, and no bytes
// another Take allowed are still on their way (that Take's Taken then
// reports it). The tunnel thus ends once it moved exactly what the
// quota allowed, none of it cut.
func (g *Grant) Taken() bool { return g.meter != nil && g.meter.Done() }

// PaceDatagram is Pace for one datagram of n payload bytes that a flow
// (CONNECT-UDP on any front-end, a SOCKS5 UDP association) is about to
// send, either way: it waits, for a paced user, until the bytes may
// pass, and once Meter started metering the flow counts them against
// the user's byte quota a batch at a time (quota.Meter.Datagram). It
// reports false once the quota is spent: the datagram is not to be sent
// and the front-end ends the flow, which Finish logs with the reason
// quota; Finish also counts the bytes of the last, unfinished batch.
// PaceDatagram may be called from the flow's goroutines at once.
func (g *Grant) PaceDatagram(ctx context.Context, n int) bool {
	if g.throttle != nil && n > 0 {
		g.throttle.Wait(ctx, n)
	}
	return g.meter == nil || g.meter.Datagram(int64(n))
}

// Meter starts metering the request's bytes as Pace is told of them, for
// a front-end that relays them itself (HTTP/2 streams, HTTP/1.1
// forwarded bodies), when the user has a byte quota; it reports whether it did, and then every byte the
// request moves is to go through Pace (Take for a tunnel). Call it after Authorize, before
// the bytes move.
func (g *Grant) Meter() bool {
	if !g.quota.LimitsBytes() {
		return false
	}
	if g.meterBuf == nil {
		g.meterBuf = new(quota.Meter)
	}
	g.meterBuf.Reset(g.quota)
	g.meter = g.meterBuf
	return true
}

// permitter returns what the dialer checks resolved addresses with.
func (g *Grant) permitter() dialer.Permitter {
	if !g.decided {
		return nil
	}
	return &g.decision
}

// Decision returns the access decision, nil when there are no rules; a
// front-end that checks addresses itself (SOCKS UDP datagrams) asks it.
func (g *Grant) Decision() *acl.Decision {
	if !g.decided {
		return nil
	}
	return &g.decision
}

// DialOptions returns the options the grant's dials use: the source of
// the request's user (see [Egress]), else its route's, else the
// listener's; the route's resolver, if it has one; the session key (see
// sessionKey) and the address the client reached. The options live in g
// until the next Authorize.
func (g *Grant) DialOptions() *dialer.Options {
	s := g.s
	src := g.egressSource()
	g.opts = dialer.Options{Source: src, Resolver: g.route.Resolver()}
	if src != nil {
		g.opts.Key = sessionKey(g.User)
		g.opts.Reached = s.reached()
	}
	return &g.opts
}

// egressSource returns the source of the grant's direct connections:
// the user's own, else the route's, else the listener's (see [Egress]);
// nil = the kernel's choice.
func (g *Grant) egressSource() *dialer.Source {
	src, own := g.s.p.Egress.forUser(g.User, g.groups, g.helloInfo())
	if rs := g.route.Source(); rs != nil && !own {
		return rs
	}
	return src
}

// sessionKey returns the dialer's session key for user: the whole name
// when it carries a session key ([auth.SessionKey]: "alice-session-42"),
// so that alice's session 42 and bob's are apart; "" otherwise.
func sessionKey(user string) string {
	if auth.SessionKey(user) == "" {
		return ""
	}
	return user
}

// Dial connects to the request's destination (Request.Host or
// Request.Addr, and Request.Port, as Authorize was given them; see
// AppendDest) under the request's decision, the
// private-destination guard and the grant's dial options (see
// DialOptions), directly or through the parent its route picks (see
// route.go), and feeds the dial histogram. On an error, DialKind tells
// how to answer it, and the *dialer.Error's Reason what to say; the
// access log's reason says dns-failed for a name that could not be
// resolved, no-source for a destination of an address family the egress
// source has no address of, and which parent failed how. The connection
// is TCP to the destination, or a tunnel to it through a plain (http,
// socks5) parent; an https parent is refused here (its connection is
// TLS): a front-end that can relay one uses DialConn. A request that did
// not ask ForwardParent (a tunnel: CONNECT, SOCKS, WebSocket) whose
// parent fails to connect or to hand over the tunnel is dialled once
// more through the route's next parent (see RetryParent): nothing was
// sent yet.
func (g *Grant) Dial(ctx context.Context) (*net.TCPConn, error) {
	c, err := g.dial(ctx, true)
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// DialConn is Dial for a front-end that relays any connection (a tunnel
// handed to Tunnel, a forwarded request's exchange): the result is a
// *net.TCPConn, or the *tls.Conn of an https parent.
func (g *Grant) DialConn(ctx context.Context) (net.Conn, error) {
	return g.dial(ctx, false)
}

// dial is Dial (tcpOnly) or DialConn.
func (g *Grant) dial(ctx context.Context, tcpOnly bool) (net.Conn, error) {
	p := g.s.p
	t0 := time.Now()
	o := g.DialOptions()
	c, err := g.dialRoute(ctx, tcpOnly, o)
	if err != nil && !g.plain && g.RetryParent(err) {
		// A tunnel (CONNECT, SOCKS, WebSocket) whose parent failed
		// before the client had an answer: nothing was sent, so the
		// next parent is dialled.
		c, err = g.dialRoute(ctx, tcpOnly, o)
	}
	p.Metrics.Dialed(time.Since(t0), err == nil)
	if d := g.decision; g.decided {
		g.Rule = d.Rule
	}
	if err != nil {
		g.dialFailed(err)
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok && g.parent == nil {
		g.upstream = remoteAddrPort(tc)
		if o.Source != nil {
			g.source = localAddrPort(tc)
		}
		if g.original.IsValid() {
			// A redirect rule that catches it brings it back: see
			// ComesBack. A retried request's earlier upstream is
			// closed.
			forgetOwnDial(g.ownDial)
			g.ownDial = noteOwnDial(tc)
		}
	}
	return c, nil
}

// dialFailed notes err, a failed dial (or a destination refused before
// one) of the request's destination: the access log's reason, the
// metrics and the debug line.
func (g *Grant) dialFailed(err error) {
	p := g.s.p
	addr, _ := g.dest()
	reason := g.reason // a parent's failure says which
	kind := g.refuse(DialKind(err))
	var de *dialer.Error
	switch {
	case errors.Is(err, dialer.ErrNoSource):
		g.reason = accesslog.ReasonNoSource
	case errors.As(err, &de) && de.DNS:
		g.reason = accesslog.ReasonDNSFailed
	case kind != Forbidden && reason != "":
		g.reason = reason
	}
	if kind == Forbidden {
		p.Metrics.ACLDenied()
		attrs := []slog.Attr{slog.String("user", g.User), slog.String("target", addr),
			slog.String("rule", g.Rule), slog.Any("err", err)}
		if errors.Is(err, dialer.ErrPrivate) {
			// The way out is the operator's, not the client's: it
			// is named here, never in the answer.
			attrs = append(attrs, slog.String("hint", privateHint))
		}
		g.s.debug("gate: destination refused", attrs...)
	}
}

// Pool returns the upstream pool; nil = none.
func (g *Grant) Pool() *dialer.Pool { return g.s.p.Pool }

// PoolOwner returns the owner of the upstream connections the request
// dials, under which the front-end keeps them (see [dialer.Pool]), and
// which a connection made earlier must have for the request to reuse it
// (see Admits): the request's identity, its user (the whole name with
// its session key), or its client's address when it has no user. So a
// connection that carried one identity's requests, to an origin or to an
// http parent, is never reused for another's: an origin (or a parent's
// pinned connection to one) that ties authentication to the connection
// (NTLM, Negotiate) never serves one user, or one client, as another.
func (g *Grant) PoolOwner() dialer.Owner {
	if g.User != "" {
		return dialer.Owner{User: g.User}
	}
	return dialer.Owner{Client: g.s.ip}
}

// Admits reports whether the request may use c, an upstream connection
// made for an earlier request (kept by its client, or pooled) whose
// owner is owner (the PoolOwner of the request that dialed it): the
// owner must be this request's PoolOwner, and c's address is checked
// against this request's rule, the current private-destination guard and
// the egress source, as a dial to it would be. A request that
// cannot be sent again on a fresh connection if c turns out dead
// (canRetry false: it has a body, or is not idempotent) is admitted only
// while c is still open: origins close idle connections after their
// keep-alive timeout, and an upload must not meet one. On true c is the
// request's upstream in the access log.
func (g *Grant) Admits(c net.Conn, owner dialer.Owner, canRetry bool) bool {
	return g.AdmitsAt(c, RemoteAddrPort(c), owner, canRetry)
}

// AdmitsAt is Admits for a connection whose address, RemoteAddrPort(c),
// the caller keeps: a client connection's upstream, kept from request to
// request, has it read once, not for every request.
func (g *Grant) AdmitsAt(c net.Conn, remote netip.AddrPort, owner dialer.Owner, canRetry bool) bool {
	if owner != g.PoolOwner() {
		return false // another identity's: not this request's to reuse
	}
	if g.forward {
		// A connection to the request's HTTP parent (TLS for an https
		// one), pooled under its key: the destination was checked by
		// ForwardParent.
		if !canRetry && !alive(c) {
			return false
		}
		g.upstream = remote
		return true
	}
	if g.ViaParent() {
		return false // a tunnel through a parent is for its own request only
	}
	src := g.egressSource()
	ap := remote
	if g.s.p.Dialer.Check(ap, g.permitter()) != nil {
		return false
	}
	var local netip.AddrPort
	if src != nil {
		// A connection made from a source this request's would not
		// choose (a reload changed it) is not its to reuse either.
		local = localAddrPort(c)
		if !src.Owns(local.Addr(), ap.Addr(), sessionKey(g.User), g.s.reached()) {
			return false
		}
	}
	if !canRetry && !alive(c) {
		return false
	}
	g.upstream, g.source = ap, local
	return true
}

// FirstByte observes the wait for a response: from sent, when the request
// was complete upstream, to its first byte.
func (g *Grant) FirstByte(sent time.Time) {
	g.s.p.Metrics.FirstByte(time.Since(sent))
}

// classUnanswered is a Grant's class when it answered nothing.
const classUnanswered = -1

// Answer notes the status sent to the client: an HTTP status, or a SOCKS
// reply code with the HTTP status whose class the metrics count it in
// (class 0 = status itself).
func (g *Grant) Answer(status, class int) {
	if class == 0 {
		class = status
	}
	g.status, g.class = int16(status), int16(class) // HTTP statuses and SOCKS reply codes
}

// AnswerNothing notes that the front-end answered the refusal with
// nothing but the connection's close: it is logged with status 0 and not
// counted as a request.
func (g *Grant) AnswerNothing() {
	g.status, g.class = 0, classUnanswered
}

// AddressCooling reports, for credentials refused CoolingDown, whether
// they met the cool-down of the client's whole address begun before they
// were counted: refused unchecked, or checked while another connection's
// failure started it. False for the failure that started a cool-down,
// and for the cool-down of a user name alone. A SOCKS5 front-end, which
// has no status that says "cooling down", closes the former unanswered,
// as it does the address's new connections, so that a client is
// answered exactly limits.auth_failures_per_address failed logins
// however many it sends at once.
func (g *Grant) AddressCooling() bool {
	return g.reason == accesslog.ReasonCoolingDown && !g.coolStarted && g.s.CoolingDown() > 0
}

// AddBytes counts payload bytes the front-end wrote itself outside the
// relay that reports the rest: the bytes that came behind a CONNECT, a
// SOCKS request or an origin's 101, written before Tunnel. Finish reports
// them with the bytes it is given.
func (g *Grant) AddBytes(up, down int64) {
	g.added[0] += up
	g.added[1] += down
}

// Finish reports the request: its payload bytes each way (see the
// package documentation: the request and response content, or a
// tunnel's payload, written to the upstream and to the client), with
// those AddBytes counted, to the access log and the metrics, and ends
// the grant's hold on the user's connection count. A grant that
// answered nothing (Answer never called) is not reported (a SOCKS
// success is reply code 0: the class it is counted in tells), but for a
// Reject with status 0, which is logged and not counted. Finish is
// idempotent; the next Authorize finishes a grant left open.
func (g *Grant) Finish(up, down int64) {
	if g.s == nil || g.finished {
		return
	}
	g.finished = true
	up += g.added[0]
	down += g.added[1]
	if g.quota != nil {
		// What the meter counted as the bytes moved is counted already.
		g.quota.AddBytes(up + down - g.meter.Charged())
	}
	if g.reason == "" && g.meter.Stopped() {
		g.reason = accesslog.ReasonQuota
	}
	if g.reason != "" {
		g.debugRefusal()
	}
	g.noteAudit()
	if g.observe && g.class != 0 {
		p := g.s.p
		if g.class > 0 { // a Reject that answered nothing is no request to count
			if g.tunnel {
				p.Metrics.Bytes(up, down)
			} else {
				p.Metrics.Request(int(g.class), up, down)
			}
			g.userMetrics().Request(up, down)
		}
		if p.AccessLog != nil {
			rec := g.record(up, down)
			p.AccessLog.Log(&rec)
		}
	}
	g.end()
}

// holdKind is what Grant.Hold counted.
type holdKind uint8

const (
	holdNone    holdKind = iota
	holdCovered          // the session's one upstream its admission covers
	holdExtra            // a further upstream, counted with the Limiter
)

// Hold counts the upstream the request is about to hold (dialled, or
// taken from the pool) for a front-end that serves requests of one client
// connection at once (HTTP/2 streams), until Finish. A client
// connection's admission covers one upstream at a time, as it does on
// HTTP/1.1 and SOCKS; each further one counts with the Limiter (see
// [limits.Limiter.Extra]) as one connection against max_connections and,
// for an authenticated user, one of the user's against
// max_connections_per_user (unless the grant's user, not the
// connection's, is counted for the grant already). It returns OK, or
// UserLimit or Overloaded, which the front-end answers (429, 503) and
// Finishes. Hold is called at most once per grant.
func (g *Grant) Hold() Kind {
	s := g.s
	s.mu.Lock()
	if !s.covered {
		s.covered = true
		s.mu.Unlock()
		g.hold = holdCovered
		return OK
	}
	s.mu.Unlock()
	lim := s.p.Limiter
	if lim == nil {
		return OK
	}
	user := g.account
	if g.counted != "" {
		user = ""
	}
	switch lim.Extra(user) {
	case limits.OK:
	case limits.TooManyForUser:
		s.debug("gate: too many upstreams for the user", slog.String("user", g.User))
		return g.refuse(UserLimit)
	default:
		return g.refuse(Overloaded)
	}
	g.hold = holdExtra
	return OK
}

// extraFor returns the user an extra upstream (Hold, holdExtra) counts
// as: the account, unless the grant counts it already for its life
// (counted), "" then, as Hold asked the Limiter.
func (g *Grant) extraFor() string {
	if g.counted != "" {
		return ""
	}
	return g.account
}

// end gives back what the grant holds.
func (g *Grant) end() {
	g.finished = true
	forgetOwnDial(g.ownDial)
	g.ownDial = nil
	switch g.hold {
	case holdCovered:
		g.s.mu.Lock()
		g.s.covered = false
		g.s.mu.Unlock()
	case holdExtra:
		g.s.p.Limiter.ExtraDone(g.extraFor())
	}
	g.hold = holdNone
	if g.counted != "" {
		g.s.p.Limiter.UserDone(g.counted)
		g.counted = ""
	}
}

// record returns the access log record of the request. Its strings alias
// g's buffers: Log copies them at once.
func (g *Grant) record(up, down int64) accesslog.Record {
	s := g.s
	return accesslog.Record{
		Time:     g.start,
		Listener: s.p.Listener,
		Client:   s.client,
		User:     g.logUser(),
		Protocol: g.proto,
		Method:   g.method,
		Target:   bytesString(g.target),
		Status:   int(g.status),
		// What a SOCKS reply stands for, in the NCSA and Squid formats.
		HTTPStatus:  int(max(g.class, 0)),
		BytesUp:     up,
		BytesDown:   down,
		Duration:    time.Since(g.start),
		Upstream:    g.upstream,
		Rule:        g.Rule,
		Reason:      g.endReason(),
		Source:      g.source,
		Route:       g.route.Name(),
		Parent:      g.parent.Name(),
		WouldDeny:   g.wouldDeny(),
		SNI:         g.sni,
		Intercepted: g.Intercepted(),
		Original:    g.original,
	}
}

// wouldDeny returns the rule in audit mode that let the request through
// though it would have refused it (see acl.Decision.WouldDeny): its
// decision's, for the address it connected to last; for an association,
// one that let any of its datagrams through. "" when none.
func (g *Grant) wouldDeny() string {
	if g.audited != "" {
		return g.audited
	}
	if g.decided {
		return g.decision.WouldDeny
	}
	return ""
}

// noteAudit counts a request that a rule in audit mode let through, and
// says so at debug level: what its rule would have refused, the rollout
// of a rule reads here and in the access log's would_deny.
func (g *Grant) noteAudit() {
	rule := g.wouldDeny()
	if rule == "" {
		return
	}
	p := g.s.p
	p.Metrics.WouldDeny(rule)
	g.s.debug("gate: request let through by a rule in audit mode", slog.String("would_deny", rule),
		slog.Int("status", int(g.status)), slog.String("protocol", g.proto.String()), slog.String("user", g.logUser()),
		slog.String("method", g.method), slog.String("target", string(g.target)))
}

// debugRefusal logs, at debug level, a request that was refused or ended
// early, with what its access log record says of it.
func (g *Grant) debugRefusal() {
	if !g.s.p.logger().Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	rec := g.record(0, 0)
	g.s.p.debugRefusal(&rec, g.cause)
}

// debugRefusal logs, at debug level, the refusal or early end rec
// records (its Reason is not ""), and what was wrong (cause; nil =
// nothing said).
func (p *Policy) debugRefusal(rec *accesslog.Record, cause error) {
	log := p.logger()
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs := []slog.Attr{slog.String("reason", rec.Reason), slog.Int("status", rec.Status),
		slog.String("protocol", rec.Protocol.String()), slog.String("user", rec.User),
		slog.String("method", rec.Method), slog.String("target", rec.Target), slog.String("rule", rec.Rule)}
	if cause != nil {
		attrs = append(attrs, slog.Any("err", cause))
	}
	attrs = append(attrs, slog.String("client", rec.Client.String()))
	log.LogAttrs(context.Background(), slog.LevelDebug, "gate: request refused", attrs...)
}

// logUser returns the user the access log names: the authenticated user,
// or the name refused credentials tried.
func (g *Grant) logUser() string {
	if g.User != "" {
		return g.User
	}
	return bytesString(g.tried)
}

// refuse notes k, a refusal, as the request's reason in the access log,
// and returns it.
func (g *Grant) refuse(k Kind) Kind {
	g.reason = k.logReason()
	return k
}

// SetReason sets the request's Reason in the access log (one of the
// accesslog Reason constants), for a refusal or an early end the front-
// end decided: a malformed request, a protocol error.
func (g *Grant) SetReason(reason string) { g.reason = reason }

// logReason returns the access log's Reason for k; "" for OK.
func (k Kind) logReason() string {
	switch k {
	case NeedAuth:
		return accesslog.ReasonAuthMissing
	case CoolingDown:
		return accesslog.ReasonCoolingDown
	case UserLimit:
		return accesslog.ReasonUserLimit
	case Denied:
		return accesslog.ReasonDenied
	case Forbidden:
		return accesslog.ReasonForbidden
	case Unreachable:
		return accesslog.ReasonUnreachable
	case TimedOut:
		return accesslog.ReasonTimedOut
	case Overloaded:
		return accesslog.ReasonOverloaded
	case AuthUnavailable:
		return accesslog.ReasonAuthUnavailable
	case QuotaExceeded:
		return accesslog.ReasonQuota
	case Loop:
		return accesslog.ReasonLoop
	case SNIMismatch:
		return accesslog.ReasonSNIMismatch
	case NotInterceptable:
		return accesslog.ReasonNotInterceptable
	case AuthzUnavailable:
		return accesslog.ReasonAuthzUnavailable
	}
	return ""
}

// endReason returns why rustle refused the request or ended it before
// its time: the grant's own reason, or the session's revocation.
func (g *Grant) endReason() string {
	if g.reason != "" {
		return g.reason
	}
	if context.Cause(g.s.rctx) == ErrRevoked {
		return accesslog.ReasonRevoked
	}
	if cut := g.s.p.Cut; cut != nil && cut.Err() != nil {
		return accesslog.ReasonDrained
	}
	return ""
}

// userMetrics returns the user's series, or nil (whose methods do
// nothing).
func (g *Grant) userMetrics() *metrics.UserMetrics {
	if g.s.p.UserMetrics == nil || g.account == "" {
		return nil
	}
	return g.s.p.UserMetrics(g.account)
}

// alive is dialer.Alive for a TCP connection or a TLS one over TCP; a
// connection with an Alive method (an origin's HTTP/2 one, whose reader
// owns the socket) says itself.
func alive(c net.Conn) bool {
	if a, ok := c.(interface{ Alive() bool }); ok {
		return a.Alive() // a connection that knows (an origin's HTTP/2 one)
	}
	tc := dialer.TCPOf(c)
	return tc != nil && dialer.Alive(tc)
}

// localAddrPort returns c's local address, unmapped.
func localAddrPort(c net.Conn) netip.AddrPort {
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// RemoteAddrPort returns the address c is connected to, unmapped (the
// zero AddrPort when c is not over TCP).
func RemoteAddrPort(c net.Conn) netip.AddrPort { return remoteAddrPort(c) }

// remoteAddrPort returns the address c is connected to, unmapped.
func remoteAddrPort(c net.Conn) netip.AddrPort {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ap := a.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}
