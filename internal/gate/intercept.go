package gate

import (
	"net"
	"net/netip"

	"github.com/rustle-proxy/rustle/internal/acl"
)

// TLS interception. A tunnel (CONNECT on HTTP/1.1, SOCKS CONNECT) that an
// interception rule names is not relayed: rustle terminates its TLS with
// a certificate it mints for the name (package intercept), and serves
// the requests inside as any forwarded request, each one decided,
// dialled, logged and counted on its own, with TLS to the origin. The
// policy's Interceptor says which tunnels (Considers, before the hello:
// the tunnel then reads it; Intercepts, with the hello), and serves them
// (Serve). The requests inside are served under a session of their own
// (Grant.InterceptSession), whose user is the tunnel's and whose
// requests go to the tunnel's destination.

// Interceptor terminates the TLS of the tunnels its rules name. Package
// intercept implements it; a Policy without one intercepts nothing.
type Interceptor interface {
	// Considers reports whether a tunnel the access rules granted as r
	// (its ClientHello not read yet) may be intercepted: it then reads
	// its hello before it is dialled, whatever the SNI check's mode.
	Considers(r *acl.Request) bool
	// Intercepts returns the index of the interception rule that names
	// the tunnel r (its hello read: r.HelloRead, r.SNI), -1 when none
	// does or a bypass entry names it.
	Intercepts(r *acl.Request) int
	// Serve intercepts the tunnel g granted (Grant.Intercepting),
	// described by in: it terminates the TLS of c, the client's side of
	// the tunnel, whose first bytes (the ClientHello the SNI check read)
	// are first, and serves the requests inside, under a session made by
	// g.InterceptSession(in), until the connection ends. It owns c and
	// closes it. It sets g's reason when the interception failed (the
	// client refused the certificate); the caller finishes g.
	//
	// With then nil it returns once the connection has ended, and
	// reports false. Otherwise it may let the connection go on without
	// the calling goroutine (served with no goroutine while it is
	// idle): it then reports true and calls then once the connection
	// has ended, on another goroutine or before it returns; when it
	// reports false it has not called then.
	Serve(g *Grant, in *Intercepted, c net.Conn, first []byte, then func()) bool
}

// Intercepted is what the session of an intercepted tunnel's requests
// knows of the tunnel (see Grant.InterceptSession).
type Intercepted struct {
	// Name is the name the tunnel's certificate was minted for, which
	// the requests inside must name (Host, :authority): the
	// ClientHello's server name, else the tunnel's host.
	Name string
	// Host, Addr and Port are the tunnel's destination, which every
	// request inside goes to (see Request).
	Host string
	Addr netip.Addr
	Port uint16
	// SNI is the ClientHello's server name; "" when it named none.
	SNI string
	// Rule names the interception rule.
	Rule string
	// RuleIndex is the interception rule's index (Interceptor.Intercepts).
	RuleIndex int
}

// Intercepting reports whether the granted tunnel, whose hello
// CheckHello decided, is to be intercepted: the front-end then hands its
// client connection to Intercept instead of dialling.
func (g *Grant) Intercepting() bool { return g.icept >= 0 && g.hello == helloRead && g.interceptOn }

// InterceptRule returns the index of the interception rule that names
// the tunnel (see Intercepting).
func (g *Grant) InterceptRule() int { return int(g.icept) }

// Intercept serves a tunnel that is Intercepting with the policy's
// Interceptor: c is the client's side of the tunnel, first the bytes
// read of it (its ClientHello). It returns when the intercepted
// connection has ended, c closed and g finished.
func (g *Grant) Intercept(c net.Conn, first []byte) {
	g.InterceptThen(c, first, nil)
}

// InterceptThen is Intercept, except that with then set the intercepted
// connection may go on without the calling goroutine (see
// Interceptor.Serve): it then reports true and calls then once the
// connection has ended, c closed and g finished, on another goroutine
// or before it returns; g must stay as it is until then. When it
// reports false the connection has ended, and then has not been called.
func (g *Grant) InterceptThen(c net.Conn, first []byte, then func()) bool {
	g.intercepted = true
	d := &g.dst
	_, host := g.dest()
	in := &Intercepted{Name: g.serverName(), Host: d.host, Addr: d.addr, Port: d.port,
		SNI: g.serverName(), Rule: "", RuleIndex: int(g.icept)}
	if in.Name == "" {
		in.Name = host
	}
	if then == nil {
		g.s.p.Intercept.Serve(g, in, c, first, nil)
		c.Close()
		g.Finish(0, 0)
		return false
	}
	if g.s.p.Intercept.Serve(g, in, c, first, func() {
		c.Close()
		g.Finish(0, 0)
		then()
	}) {
		return true
	}
	c.Close()
	g.Finish(0, 0)
	return false
}

// Intercepted reports whether the request is an intercepted tunnel, or
// one of the requests inside one.
func (g *Grant) Intercepted() bool { return g.intercepted || g.s != nil && g.s.icept != nil }

// InterceptSession returns the session that serves the requests inside
// the tunnel g intercepts, described by in: under the policy and client
// of g's session, with its contexts (done when it is; closing the
// session that InterceptSession returns does not end them), its
// identity the tunnel's user (the requests inside carry no proxy
// credentials), counted already by the
// tunnel's grant, whose connection admission covers it. Its requests'
// access log records say intercepted, with the tunnel's server name;
// the access rules see them with the tunnel's hello (sni_hosts). The
// caller closes it.
func (g *Grant) InterceptSession(in *Intercepted) *Session {
	parent := g.s
	s := &Session{
		p:              parent.p,
		client:         parent.client,
		ip:             parent.ip,
		icept:          in,
		identity:       g.User,
		identityGroups: g.groups,
		identified:     true,
		connUser:       g.account,
		throttle:       g.throttle,
		quota:          g.quota,
		borrowed:       true,
	}
	s.loopState.Store(parent.loopState.Load())
	// The tunnel's requests run under its client connection's contexts,
	// which end them on shutdown and revocation: a context of their own
	// would cost every idle intercepted connection two cancelCtx with
	// their children maps and done channels (0.9 KiB). Close leaves
	// them be (borrowed); the client connection's session ends them.
	s.ctx, s.cancel = parent.ctx, parent.cancel
	s.rctx, s.rcancel = parent.rctx, parent.rcancel
	parent.mu.Lock()
	s.local = parent.local
	parent.mu.Unlock()
	return s
}

// Intercepted returns what the session knows of the tunnel whose
// requests it serves; nil for a session of a client connection.
func (s *Session) Intercepted() *Intercepted { return s.icept }
