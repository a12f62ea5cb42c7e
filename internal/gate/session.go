package gate

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/quota"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// ErrRevoked is the cause of a session's context when a reload removed
// its user.
var ErrRevoked = errors.New("gate: user removed by a reload")

// authMemoTTL is how long a session trusts a Proxy-Authorization value it
// has accepted before asking the authenticator again.
const authMemoTTL = time.Second

// authMemoMax bounds the value a session memoises; longer ones are
// checked on every request. It is the longest value the authenticator
// considers: a bearer token.
const authMemoMax = auth.MaxValueLen

// Session is one client connection's standing with its listener's
// Policy. It is made by [Policy.NewSession] and ended by Close. Its
// methods are safe for concurrent use (HTTP/2 streams share one).
type Session struct {
	p      *Policy
	client netip.AddrPort // the client's address, for the access log and Forwarded
	ip     netip.Addr     // client's IP, unmapped: rules, cool-downs
	eng    *tunnel.Engine // the worker's engine; nil = relay tunnels by goroutines
	// ctx is the connection's context, done on shutdown or revocation;
	// rctx, which tunnels run under, only on revocation (a drain lets
	// tunnels run until it ends).
	ctx     context.Context
	cancel  context.CancelCauseFunc
	rctx    context.Context
	rcancel context.CancelCauseFunc

	// revoked is set by Registry.Revoke, under the registry's lock,
	// before it ends the session: a tunnel handed to the engine and
	// registered after that lock was released is cut by toEngine.
	revoked atomic.Bool

	// loopState says whether the connection is one of rustle's own come
	// back (see returning): returnUnchecked, returnNo or returnYes.
	loopState atomic.Int32

	mu sync.Mutex
	// release gives back the connection's admission; nil once given back
	// or handed to a tunnel. Guarded by mu.
	release func()
	// conn is closed when the session's user is revoked; guarded by mu.
	conn net.Conn
	// local is the address the client connected to (a bind_same
	// source), set by Attach; guarded by mu.
	local netip.Addr
	// identity is the user a verified client certificate or a SOCKS
	// login named, identityGroups the groups its provider gave it;
	// identified (below, with the other flags) says there is one.
	// Guarded by mu.
	identity       string
	identityGroups []string
	// connUser is the connection's first user ("" none): counted with
	// the Limiter, when there is one, for the connection's life; throttle
	// is that user's byte bucket. Guarded by mu.
	connUser string
	throttle *limits.Bucket
	quota    *quota.User // connUser's quota counters; nil = none
	// memo is the Proxy-Authorization value last accepted, with its
	// verdict; nil = none (a connection without proxy credentials, an
	// intercepted tunnel's session: it takes no room of theirs). Guarded
	// by mu.
	memo *authMemo
	// icept describes the intercepted tunnel whose requests the session
	// serves (see Grant.InterceptSession); nil = a client connection's.
	icept *Intercepted
	// The flags, side by side (a Session stays in a size class of 288
	// bytes): identified, guarded by mu, says identity holds a user;
	// closed, guarded by mu, that Close has run; covered, guarded by
	// mu, that a grant holds the one upstream the connection's admission
	// covers (see Grant.Hold); borrowed that connUser, throttle and quota
	// are the intercepted tunnel's grant's, counted by it, and ctx and
	// rctx its client session's: Close gives nothing back and cancels
	// nothing.
	identified bool
	closed     bool
	covered    bool
	borrowed   bool

	// verifyMu serialises the checks of credentials the session has no
	// verdict on: HTTP/2 streams share the session, and a guess waits
	// for the one before it, whose failure may start the cool-down that
	// refuses it unchecked. Taken before mu, never under it.
	verifyMu sync.Mutex
}

// Policy returns the policy the session applies.
func (s *Session) Policy() *Policy { return s.p }

// Client returns the client's address.
func (s *Session) Client() netip.AddrPort { return s.client }

// ClientIP returns the client's IP, IPv4-mapped addresses unmapped.
func (s *Session) ClientIP() netip.Addr { return s.ip }

// Engine returns the worker's tunnel engine, nil when there is none.
func (s *Session) Engine() *tunnel.Engine { return s.eng }

// Context returns the session's context: done when the connection's
// context is (shutdown) or when the session's user is revoked, with
// ErrRevoked as its cause.
func (s *Session) Context() context.Context { return s.ctx }

// Attach names the connection that revocation closes.
func (s *Session) Attach(c net.Conn) {
	local := localAddr(c)
	s.mu.Lock()
	s.conn = c
	s.local = local
	s.mu.Unlock()
}

// reached returns the address the client connected to, once Attach
// named its connection.
func (s *Session) reached() netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.local
}

// SetTLS takes the identity of a verified client certificate from cs: a
// certificate whose subject has a common name authenticates every request
// of the connection as that user, if the listener's authenticator allows
// the name (see [auth.Authenticator.Allows]: a listener restricted to some
// users takes a certificate of another as none); one without is no
// identity.
func (s *Session) SetTLS(cs tls.ConnectionState) {
	user, ok := clientCertUser(cs)
	if !ok {
		return
	}
	if !s.p.Auth.Allows(user) {
		s.debug("gate: the client certificate's user is not one of the listener's users", slog.String("user", user))
		return
	}
	s.mu.Lock()
	s.identity, s.identified = user, true
	s.mu.Unlock()
	s.track(user)
}

// Identity returns the user a client certificate or a SOCKS login named,
// and whether there is one.
func (s *Session) Identity() (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.identity, s.identified
}

// Login checks a SOCKS5 username and password (RFC 1929), observing the
// login in g as a SOCKS5 exchange without a method or target. On success
// the user (with the groups its provider gave it) is the session's
// identity for every later request, and g is left unanswered (not
// reported). On a failure the front-end answers, calls g.Answer with the
// status it sent and the class of the Kind's Status, and Finish:
// NeedAuth for wrong credentials (counted as a failed authentication),
// CoolingDown when the client's address, or the name at that address, is
// cooling down (the password is then not checked) or this failure started
// it, AuthUnavailable when an identity provider could not be asked (not a
// failure). Either way the access log names the user tried, and the
// Limiter does not count it as a user.
func (s *Session) Login(user, password []byte, g *Grant) (string, Kind) {
	p := s.p
	s.Observe(&Request{Protocol: acl.SOCKS5, Log: accesslog.ProtoSOCKS5}, g)
	if p.Auth == nil {
		return "", OK
	}
	s.verifyMu.Lock()
	defer s.verifyMu.Unlock()
	g.tried = append(g.tried[:0], user...)
	if kind := s.coolingDown(g); kind != OK {
		return "", kind
	}
	r := p.Auth.AuthenticateUserPassword(user, password)
	if r.Outcome == auth.Refused {
		if rr, ok := p.checkSessionUser(user, password); ok {
			r = rr
		}
	}
	switch r.Outcome {
	case auth.Unavailable:
		return "", s.unavailable(g)
	case auth.Refused:
		return "", s.failed(g)
	}
	g.tried = g.tried[:0]
	s.mu.Lock()
	s.identity, s.identityGroups, s.identified = r.User, r.Groups, true
	s.mu.Unlock()
	s.track(p.account(r.User))
	return r.User, OK
}

// unavailable refuses credentials that an identity provider could not
// check: AuthUnavailable, logged at debug, neither counted as a failure
// nor towards a cool-down.
func (s *Session) unavailable(g *Grant) Kind {
	s.debug("gate: an identity provider is unavailable", slog.String("user", bytesString(g.tried)))
	return g.refuse(AuthUnavailable)
}

// NoCredentials refuses r, on a listener that authenticates, for offering
// no credentials at all (a SOCKS5 greeting without username/password, a
// SOCKS4 request), as Authorize refuses a request without
// Proxy-Authorization: it observes r in g with the reason auth-missing and
// counts a challenge, not a failure, and nothing towards the client's
// cool-down. The front-end answers, calls g.Answer with the class of
// NeedAuth's Status, and Finish.
func (s *Session) NoCredentials(r *Request, g *Grant) {
	s.Observe(r, g)
	if s.p.Auth != nil {
		s.p.Metrics.AuthChallenged()
	}
	g.refuse(NeedAuth)
}

// verifyHeader checks a Proxy-Authorization value the session has no
// verdict on, one check of the session at a time (see verifyMu): it takes
// the verdict another stream reached meanwhile, then refuses the value
// unchecked while the client's address, or the user name it tries there,
// cools down; then asks the authenticator. On a refusal g names the user
// tried.
func (s *Session) verifyHeader(value []byte, g *Grant) (known, Kind) {
	s.verifyMu.Lock()
	defer s.verifyMu.Unlock()
	if k := s.lookup(value); k.memo {
		return k, OK
	}
	g.tried = auth.AppendBasicUser(g.tried[:0], value)
	if kind := s.coolingDown(g); kind != OK {
		return known{}, kind
	}
	r := s.checkHeader(value, g.tried)
	switch r.Outcome {
	case auth.Unavailable:
		return known{}, s.unavailable(g)
	case auth.Refused:
		return known{}, s.failed(g)
	}
	g.tried = g.tried[:0]
	return known{user: r.User, groups: r.Groups}, OK
}

// coolingDown refuses, with CoolingDown and the time left in g, credentials
// naming g.tried while the client's address or that name at the address
// cools down; OK otherwise.
func (s *Session) coolingDown(g *Grant) Kind {
	lim := s.p.Limiter
	if lim == nil {
		return OK
	}
	if wait := lim.CoolingDownAs(s.ip, g.tried); wait > 0 {
		g.RetryAfter = wait
		return g.refuse(CoolingDown)
	}
	return OK
}

// failed counts wrong credentials that named g.tried: in the metrics, and
// towards the cool-down of the client's address and of that name there.
// It returns CoolingDown when the failure started one, NeedAuth otherwise.
func (s *Session) failed(g *Grant) Kind {
	p := s.p
	p.Metrics.AuthFailed()
	if p.Limiter != nil {
		if wait, started := p.Limiter.AuthFailed(s.ip, g.tried); wait > 0 {
			g.RetryAfter, g.coolStarted = wait, started
			return g.refuse(CoolingDown)
		}
	}
	g.reason = accesslog.ReasonAuthFailed
	return NeedAuth
}

// CoolingDown returns how long the client's address as a whole must still
// wait after too many failed authentications; 0 when it need not.
func (s *Session) CoolingDown() time.Duration {
	if s.p.Limiter == nil {
		return 0
	}
	return s.p.Limiter.CoolingDown(s.ip)
}

// authMemo is a session's memo of the Proxy-Authorization value it
// accepted last: the value, the user it named with its groups, and when
// (monotonic).
type authMemo struct {
	value  []byte
	user   string
	groups []string
	at     time.Duration
}

// known is what a session already knows of a request's user, read
// under one lock: a keep-alive request of the connection's user takes no
// other lock and asks neither the authenticator nor the limiter.
type known struct {
	user       string
	groups     []string       // the user's groups from its identity provider; shared, never modified
	identified bool           // user is the session's identity (certificate, SOCKS login)
	memo       bool           // user is the memoised verdict on the request's credentials
	counted    bool           // user is the connection's counted user, throttle its bucket
	throttle   *limits.Bucket // counted's byte bucket; nil = not paced
	quota      *quota.User    // counted's quota counters; nil = none
}

// lookup returns what s knows of the user of a request with the
// Proxy-Authorization value (nil = none). A client repeats the same value
// on every request of a connection: while it does, the verdict given at
// most authMemoTTL ago stands, which saves hashing the value for the
// authenticator's cache on every request.
func (s *Session) lookup(value []byte) known {
	var now time.Duration
	if value != nil {
		now = monoNow()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var k known
	switch {
	case s.identified:
		k.user, k.groups, k.identified = s.identity, s.identityGroups, true
	case value != nil && s.memo != nil && now-s.memo.at < authMemoTTL && string(value) == string(s.memo.value):
		k.user, k.groups, k.memo = s.memo.user, s.memo.groups, true
	default:
		return k
	}
	if k.user != "" && k.user == s.connUser {
		k.counted, k.throttle, k.quota = true, s.throttle, s.quota
	}
	return k
}

// checkHeader asks the authenticator about a Proxy-Authorization value
// the session has no verdict on, which tries the user name tried as its
// base user when it carries a session key (see Policy.checkSessionUser),
// and memoises an accepted one.
func (s *Session) checkHeader(value, tried []byte) auth.Result {
	now := monoNow()
	r := s.p.Auth.Authenticate(value)
	if r.Outcome == auth.Refused && auth.SessionKey(bytesString(tried)) != "" {
		if pass, found := auth.BasicPassword(value); found {
			if rr, ok := s.p.checkSessionUser(tried, pass); ok {
				r = rr
			}
			clear(pass)
		}
	}
	if r.Outcome == auth.Accepted && len(value) <= authMemoMax {
		s.mu.Lock()
		m := s.memo
		if m == nil {
			m = new(authMemo)
			s.memo = m
		}
		m.value = append(m.value[:0], value...)
		m.user, m.groups, m.at = r.User, r.Groups, now
		s.mu.Unlock()
	}
	return r
}

// countUser counts a request of user with the Limiter: the first user
// admitted on the connection is counted for the connection's life (and
// its tunnel's, if it becomes one), any other user for the grant's life,
// released by Grant.Finish. It reports false when the user has too many
// connections, and returns the user's byte bucket (nil = not paced) and
// whether the count belongs to the grant.
func (s *Session) countUser(user string) (bucket *limits.Bucket, perGrant, ok bool) {
	if user == "" {
		return nil, false, true
	}
	lim := s.p.Limiter
	s.mu.Lock()
	if user == s.connUser {
		b := s.throttle
		s.mu.Unlock()
		return b, false, true
	}
	if s.connUser == "" && !s.closed {
		if lim != nil && !lim.UserConn(user) {
			s.mu.Unlock()
			return nil, false, false
		}
		s.connUser = user // tracked for revocation even without a Limiter
		s.quota = s.p.Quota.User(user)
		if lim != nil {
			s.throttle = lim.Throttle(user)
		}
		b := s.throttle
		s.mu.Unlock()
		s.track(user)
		return b, false, true
	}
	s.mu.Unlock()
	s.track(user)
	if lim == nil {
		return nil, false, true
	}
	if !lim.UserConn(user) {
		return nil, false, false
	}
	return lim.Throttle(user), true, true
}

// handed is what a tunnel that outlives the serving goroutine took over
// from its session (handoff).
type handed struct {
	release  func()
	user     string
	throttle *limits.Bucket
	quota    *quota.User
}

// handoff moves the connection's admission and user count to a tunnel
// that outlives the serving goroutine; the tunnel gives them back with
// handed.back when it ends.
func (s *Session) handoff() handed {
	s.mu.Lock()
	h := handed{s.release, s.connUser, s.throttle, s.quota}
	s.release, s.connUser, s.throttle, s.quota = nil, "", nil, nil
	s.mu.Unlock()
	return h
}

// undo returns to s what handoff took, when the tunnel did not take it on
// after all.
func (h handed) undo(s *Session) {
	s.mu.Lock()
	s.release, s.connUser, s.throttle, s.quota = h.release, h.user, h.throttle, h.quota
	s.mu.Unlock()
}

// back gives the admission and user count back as the tunnel ends.
func (h handed) back(lim *limits.Limiter) {
	if h.user != "" && lim != nil {
		lim.UserDone(h.user)
	}
	if h.release != nil {
		h.release()
	}
}

// Close ends the session: the connection's user count and admission are
// given back unless a tunnel took them on. It is idempotent.
func (s *Session) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	release, user := s.release, s.connUser
	if s.borrowed {
		user = ""
	}
	s.release, s.connUser, s.throttle, s.quota, s.conn = nil, "", nil, nil, nil
	s.mu.Unlock()
	if user != "" && s.p.Limiter != nil {
		s.p.Limiter.UserDone(user)
	}
	if release != nil {
		release()
	}
	s.p.Revoked.forget(s)
	if !s.borrowed { // an intercepted tunnel's session has its client's contexts
		s.cancel(context.Canceled)
		s.rcancel(context.Canceled)
	}
}

// track registers the session under user for revocation.
// user is an account (see Policy.account): revoking alice ends the
// sessions of alice-session-42.
func (s *Session) track(user string) {
	if user != "" {
		s.p.Revoked.add(s, user)
	}
}

// revoke ends the session: its context is cancelled with ErrRevoked and
// its connection closed, which ends a request in progress.
func (s *Session) revoke() {
	s.rcancel(ErrRevoked) // first: what ctx's end wakes logs rctx's cause
	s.cancel(ErrRevoked)
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// debug logs a refusal or failure at debug level.
func (s *Session) debug(msg string, attrs ...slog.Attr) {
	log := s.p.logger()
	if !log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	attrs = append(attrs, slog.String("client", s.client.String()))
	log.LogAttrs(context.Background(), slog.LevelDebug, msg, attrs...)
}

// epoch is the origin of monoNow.
var epoch = time.Now()

// monoNow returns the monotonic time since the process started.
func monoNow() time.Duration { return time.Since(epoch) }
