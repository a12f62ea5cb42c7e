package gate

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"syscall"
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
	"github.com/rustle-proxy/rustle/internal/sni"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// Policy is what one listener applies to its requests under one
// configuration. Its fields are set before the first session opens and
// not changed after; it is safe for concurrent use.
type Policy struct {
	// Listener names the listener in access log records; "" = none.
	Listener string
	// Auth checks credentials: the listener's users and identity
	// providers (a view made by [auth.Authenticator.Only] for a listener
	// restricted to some users, whose client certificates it restricts
	// too). nil = no
	// authentication (a request is anonymous unless a client certificate
	// names its user).
	Auth *auth.Authenticator
	// ACL decides each request before it is dialed, and each address it
	// resolves to; nil allows every request (the dialer's
	// private-destination guard still applies).
	ACL *acl.Policy
	// Limiter enforces the authentication cool-downs (of an address, and
	// of a user name at an address), connections per user
	// and users' byte rates, and takes back connection admissions; nil =
	// no limits.
	Limiter *limits.Limiter
	// Dialer dials upstreams; required.
	Dialer *dialer.Dialer
	// Egress chooses the source address (and interface) of upstream
	// connections, per user; nil = the kernel's choice.
	Egress *Egress
	// Pool keeps idle upstream connections; nil = no upstream keep-alive.
	Pool *dialer.Pool
	// Routes chooses, for each authorized request, how its upstream is
	// reached: direct or through a parent proxy (see route.go); nil =
	// every request direct.
	Routes *route.Table
	// Metrics counts the listener's requests, bytes, tunnels, refusals,
	// dials and first bytes; nil = none.
	Metrics *metrics.ListenerMetrics
	// UserMetrics returns an authenticated user's series, nil when there
	// are none; nil = no per-user series.
	UserMetrics func(user string) *metrics.UserMetrics
	// AccessLog receives one record per request or tunnel; nil = none.
	AccessLog *accesslog.Logger
	// TunnelIdle ends a tunnel relayed by goroutines (a TLS client's, a
	// paced user's, one on a platform without the splice engine) that
	// moved no byte either way for this long; the engine's tunnels follow
	// the engine's own setting. 0 = no idle limit.
	TunnelIdle time.Duration
	// Logger receives refusals at debug level; nil = discard.
	Logger *slog.Logger
	// Cut is done once rustle's shutdown cuts what still runs (the end
	// of the drain): what ends after it is logged with the reason
	// drained. nil = never.
	Cut context.Context
	// Revoked tracks the sessions and tunnels of each user so that a
	// reload that removes the user can end them; nil = not tracked.
	Revoked *Registry
	// Quota counts users' requests and bytes against their quotas,
	// refuses the requests of a user whose quota is spent and ends its
	// tunnels as they cross it; nil = no quotas.
	Quota *quota.Tracker
	// SNI is the listener's SNI check (see NeedsHello and CheckHello):
	// sni.Log or sni.Match read the ClientHello of every tunnel before
	// it is dialled; a rule's sni, when set, replaces it for the tunnels
	// the rule allows. sni.Unset and sni.Off read none (unless a rule,
	// route or egress rule on sni_hosts needs it).
	SNI sni.Mode
	// HelloTimeout bounds the wait for a tunnel's ClientHello, from the
	// tunnel's answer to the hello's last byte, when the SNI check reads
	// it; 0 = no limit.
	HelloTimeout time.Duration
	// Authz is the external decision service ([authz]), asked about
	// each request the access rules allow (see authz.go); nil = none.
	Authz *authz.Client
	// Instance is the rustle in loop detection: the Via element every
	// request sent to a parent carries, which a request that came back
	// names (see route.Instance). A server gives all its listeners one;
	// nil = the process's default instance.
	Instance *route.Instance
}

// observing reports whether the metrics or the access log learn of
// requests.
func (p *Policy) observing() bool { return p.Metrics != nil || p.AccessLog != nil }

// logger returns p.Logger or a discarding one.
func (p *Policy) logger() *slog.Logger {
	if p.Logger == nil {
		return discard
	}
	return p.Logger
}

var discard = slog.New(slog.DiscardHandler)

// Challenge returns the Proxy-Authenticate value of a 407 answer, or ""
// when p authenticates nobody.
func (p *Policy) Challenge() string {
	if p.Auth == nil {
		return ""
	}
	return p.Auth.Challenge()
}

// RequiresAuth reports whether requests need credentials (or a client
// certificate) on this listener.
func (p *Policy) RequiresAuth() bool { return p.Auth != nil }

// Kind is the outcome of [Session.Authorize] or of a dial: OK, or why the
// request is refused.
type Kind uint8

// The outcomes of a request.
const (
	// OK grants the request.
	OK Kind = iota
	// NeedAuth refuses a request without valid credentials: 407, or a
	// failed SOCKS authentication. The access log's reason tells missing
	// credentials (auth-missing, counted as a challenge) from wrong ones
	// (auth-failed, counted as a failure).
	NeedAuth
	// CoolingDown refuses credentials from a client address, or naming a
	// user name at that address, that failed to authenticate too often:
	// 429 with Retry-After (Grant.RetryAfter). The credentials are not
	// checked.
	CoolingDown
	// UserLimit refuses a user with too many connections: 429.
	UserLimit
	// Denied refuses a request by an access rule (Grant.Rule), or by
	// the decision service (the access log's reason is then
	// authz-denied, and Grant.Rule the rule that allowed it): 403.
	Denied
	// Forbidden refuses a destination address: a private or the proxy's
	// own address (the guard), or one a rule refuses once resolved: 403.
	Forbidden
	// Unreachable is a dial that failed: 502.
	Unreachable
	// TimedOut is a dial or an upstream that did not answer in time: 504.
	TimedOut
	// Overloaded refuses a further upstream (see [Grant.Hold]) while
	// rustle holds as many connections as limits.max_connections allows:
	// 503.
	Overloaded
	// AuthUnavailable refuses credentials that no identity provider
	// accepted while one that might have could not be asked (a directory
	// down): 503, a failed SOCKS authentication. It is not counted as a
	// failed authentication, nor towards a cool-down.
	AuthUnavailable
	// QuotaExceeded refuses a request of a user whose quota of bytes or
	// requests for the period is spent: 429 (SOCKS: not allowed).
	QuotaExceeded
	// Loop refuses a request that came back to this rustle through a
	// parent (see [route.NamesSelf] and [route.Returning]), and is a
	// tunnel's dial that a parent answered 508: 508 Loop Detected (SOCKS:
	// not allowed).
	Loop
	// SNIMismatch refuses a tunnel whose ClientHello does not name the
	// host it was asked for (see CheckHello), under sni = "match". The
	// tunnel was answered before its hello came: the front-end closes it
	// (an HTTP/2 or HTTP/3 stream is reset), with no byte sent to the
	// origin. Its Status, 403, is for the log's class only.
	SNIMismatch
	// AuthzUnavailable refuses a request the decision service could not
	// decide (down, too slow, every call busy, an answer that is none)
	// under authz.on_error = "deny": 503. Decided after the ClientHello
	// (see authz.go), it closes the tunnel as SNIMismatch does, its
	// Status for the log's class only.
	AuthzUnavailable
)

// Status returns the HTTP status a front-end answers k with; 200 for OK.
func (k Kind) Status() int {
	switch k {
	case NeedAuth:
		return 407
	case CoolingDown, UserLimit, QuotaExceeded:
		return 429
	case Denied, Forbidden, SNIMismatch:
		return 403
	case Unreachable:
		return 502
	case TimedOut:
		return 504
	case Overloaded, AuthUnavailable, AuthzUnavailable:
		return 503
	case Loop:
		return 508
	}
	return 200
}

// Reason returns the one-line reason a front-end answers k with.
func (k Kind) Reason() string {
	switch k {
	case NeedAuth:
		return "proxy authentication required"
	case CoolingDown:
		return "too many failed authentications; try again later"
	case UserLimit:
		return "too many connections for this user"
	case Denied:
		return "access denied by policy"
	case Forbidden:
		return "destination address not allowed"
	case Unreachable:
		return "upstream unreachable"
	case TimedOut:
		return "upstream timed out"
	case Overloaded:
		return "too many connections"
	case AuthUnavailable:
		return "authentication service unavailable; try again later"
	case QuotaExceeded:
		return "quota exceeded for this user"
	case Loop:
		return "loop detected: the request came back to this proxy through its parents"
	case SNIMismatch:
		return "the TLS server name does not match the tunnel's host"
	case AuthzUnavailable:
		return "authorization service unavailable; try again later"
	}
	return ""
}

// String returns k's name.
func (k Kind) String() string {
	switch k {
	case OK:
		return "ok"
	case NeedAuth:
		return "need-auth"
	case CoolingDown:
		return "cooling-down"
	case UserLimit:
		return "user-limit"
	case Denied:
		return "denied"
	case Forbidden:
		return "forbidden"
	case Unreachable:
		return "unreachable"
	case TimedOut:
		return "timed-out"
	case Overloaded:
		return "overloaded"
	case AuthUnavailable:
		return "auth-unavailable"
	case QuotaExceeded:
		return "quota"
	case Loop:
		return "loop"
	case SNIMismatch:
		return "sni-mismatch"
	case AuthzUnavailable:
		return "authz-unavailable"
	}
	return "unknown"
}

// DialKind classifies a dial error: Forbidden for an address the guard or
// a rule refused, Loop for a parent that answered 508, TimedOut for a
// timeout, Unreachable otherwise.
func DialKind(err error) Kind {
	var de *dialer.Error
	var re *route.Error
	switch {
	case err == nil:
		return OK
	case errors.As(err, &re) && re.Kind == route.Looped:
		return Loop
	case errors.As(err, &de) && de.Forbidden:
		return Forbidden
	case errors.As(err, &de) && de.DNS:
		return Unreachable // a resolution failure is no upstream timeout
	case errors.As(err, &de) && de.Timeout, errors.Is(err, syscall.ETIMEDOUT), errors.Is(err, context.DeadlineExceeded):
		return TimedOut
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return TimedOut
	}
	return Unreachable
}

// NewSession opens the session of a client connection accepted from
// client (its peer, or the address a PROXY protocol header gave). eng is
// the worker's tunnel engine (nil = tunnels relayed by goroutines);
// release gives back the connection's admission (nil = none): the session
// calls it when it closes, or the tunnel that carries the connection on
// calls it when it ends.
func (p *Policy) NewSession(ctx context.Context, client netip.AddrPort, eng *tunnel.Engine, release func()) *Session {
	s := &Session{
		p:       p,
		client:  client,
		ip:      client.Addr().Unmap(),
		eng:     eng,
		release: release,
	}
	s.ctx, s.cancel = context.WithCancelCause(ctx)
	s.rctx, s.rcancel = context.WithCancelCause(context.WithoutCancel(ctx))
	return s
}

// clientCertUser returns the user a verified client certificate names.
func clientCertUser(cs tls.ConnectionState) (string, bool) { return tlsconf.ClientCertUser(cs) }
