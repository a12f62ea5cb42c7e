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
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/route"
)

// chooseRoute notes the route of an authorized request: the first of the
// policy's routes that r matches (nil = direct). The parent is picked
// when the grant dials.
//
// A tunnel whose ClientHello is unread may match a route with
// sni_hosts: the route is then pending (see NeedsHello), and CheckHello
// chooses it again with the server name.
func (g *Grant) chooseRoute(r *acl.Request) {
	g.route, g.parent, g.picked, g.forward, g.plain, g.retried = nil, nil, false, false, false, false
	g.routePending = false
	if t := g.s.p.Routes; t != nil {
		g.route, g.routePending = t.MatchHello(*r)
	}
}

// Route returns the request's route, nil when no route matched (direct).
func (g *Grant) Route() *route.Route { return g.route }

// Parent returns the parent the request's upstream went through, nil
// when it went direct (or has not dialed).
func (g *Grant) Parent() *route.Parent { return g.parent }

// ViaParent reports whether the request's upstream is (or, once dialed,
// will be) a tunnel through a parent: it is for no other request. A kept
// or pooled connection made for another request is not used for it (see
// Admits), and the connection it dials is not to be pooled. A request
// ForwardParent sent to an HTTP parent is not: its connection to the
// parent is pooled under ForwardKey.
func (g *Grant) ViaParent() bool {
	return !g.route.Direct() && !g.forward && !(g.picked && g.parent == nil)
}

// ForwardParent picks, for a plain HTTP request (not a tunnel), the
// parent of its route, and returns it when it is an http or https
// parent, which takes the request itself: the front-end sends it in
// absolute form with the parent's Authorization as Proxy-Authorization
// (the client's is never sent; see AppendRequestTarget and
// AppendParentAuthorization), pools the connection under ForwardKey,
// and DialConn then connects to the parent without a CONNECT (a
// *tls.Conn for an https parent, which Dial refuses). It returns nil for
// a request that goes direct, or that Dial tunnels through a socks5 or
// socks5h parent, or a TRACE whose http or https parent rustle has
// credentials for: the parent's echo of it would return them to the
// client, so Dial tunnels it to the origin through the parent. The
// destination is checked as for a tunnel through the parent (an IP
// literal by the guard and the rules, a name by the rules as
// unresolved); a refusal, or every parent down (ErrNoParent), is an
// error to answer as a dial's. The destination is the request's (see
// AppendDest). Call it once, after Authorize and before Dial or Admits,
// whose connections the front-end then pools under the ForwardKey rather
// than the destination; and once more after RetryParent, for the parent
// it picked.
func (g *Grant) ForwardParent() (*route.Parent, error) {
	if g.route.Direct() {
		return nil, nil
	}
	if err := g.forwardParent(); err != nil {
		g.dialFailed(err)
		return nil, err
	}
	if g.forward {
		return g.parent, nil
	}
	return nil, nil
}

func (g *Grant) forwardParent() error {
	addr, host := g.dest()
	g.plain = true
	parent := g.parent
	if !g.picked { // else RetryParent picked it
		var err error
		parent, err = g.route.Pick(route.Key{Host: host, User: g.User})
		g.picked = true
		if err != nil {
			g.reason = accesslog.ReasonNoParent
			return &dialer.Error{Addr: addr, Err: errNoParent{g.route.Name()}}
		}
		g.parent = parent
	}
	if parent == nil || !parent.Scheme().IsHTTP() {
		return nil
	}
	if g.method == "TRACE" && parent.Authorization() != "" {
		// The parent would be a recipient of the TRACE, and the final
		// one at Max-Forwards 0: its echo would carry what it received,
		// rustle's credentials for it included. The request goes
		// through a tunnel to the origin instead (Dial), as through a
		// socks5 parent: the credentials go in the CONNECT only.
		return nil
	}
	t := route.Target{Host: host, Port: g.dst.port}
	if err := g.checkForParent(context.Background(), parent, addr, &t); err != nil {
		return err
	}
	g.forward = true
	return nil
}

// RetryParent moves a request whose parent failed before any byte of
// the response to the next parent of its route ([route.Route.PickExcept]
// skipping the one that failed), once per request, and reports whether
// it did: the request is then to be sent again through that parent. err
// is the failure: a dial's error that a parent caused (its connect or
// handshake failed: a *route.Error that counts against it, which the
// parent's health has noted), or, for a plain HTTP request sent to an
// http or https parent (ForwardParent returned it), the error of the
// exchange on a fresh connection to it that ended before the response
// (or, with nothing of it sent to the client, before its end), which
// RetryParent counts against the parent's health. A parent that answered
// and refused the destination is not retried, nor a request without a
// parent or whose route has no other parent up (a fallback to direct is
// not taken for a retry).
//
// The front-end calls it only for a request it can send again: a tunnel
// not yet answered (Dial and DialConn do this themselves for a request
// that did not ask ForwardParent), or an idempotent request (see
// [Idempotent]) of which no body byte was sent; a plain HTTP front-end
// then asks ForwardParent again and builds its head for the parent it
// returns. The failed attempt's reason is forgotten.
func (g *Grant) RetryParent(err error) bool {
	failed := g.parent
	if failed == nil || g.retried || g.route.Direct() || err == nil {
		return false
	}
	var re *route.Error
	switch {
	case errors.As(err, &re):
		if re.Kind == route.Refused || re.Kind == route.Looped || re.Parent != failed.Name() {
			return false
		}
	case g.forward:
		var de *dialer.Error
		if errors.As(err, &de) {
			return false // a dial refused before the parent was asked
		}
		failed.Health().Failed(time.Now())
	default:
		return false // through a tunnel: the destination may have failed
	}
	addr, host := g.dest()
	next, perr := g.route.PickExcept(route.Key{Host: host, User: g.User}, failed)
	if perr != nil || next == nil {
		return false
	}
	g.s.debug("gate: retrying on the next parent", slog.String("failed", failed.Name()),
		slog.String("next", next.Name()), slog.String("target", addr), slog.Any("err", err))
	g.parent, g.picked, g.forward, g.retried = next, true, false, true
	g.reason, g.cause = "", nil
	return true
}

// ForwardKey appends to dst the upstream pool key of an HTTP parent's
// connections: its name and address, which no origin's host:port can be.
func ForwardKey(dst []byte, p *route.Parent) []byte {
	dst = append(dst, "parent "...)
	dst = append(dst, p.Name()...)
	dst = append(dst, ' ')
	return append(dst, p.Addr()...)
}

// errNoParent is the cause of a dial refused because every parent of the
// route is down.
type errNoParent struct{ route string }

func (e errNoParent) Error() string {
	return "gate: route " + e.route + ": " + route.ErrNoParent.Error()
}
func (e errNoParent) Unwrap() error { return route.ErrNoParent }

// Reason is the client-safe reason.
func (e errNoParent) Reason() string { return "no parent proxy of route " + e.route + " is up" }

// errHTTPSParent refuses an https parent on a path that needs a TCP
// connection (Dial): HTTP/2 CONNECT and WebSocket streams, whose relay
// waits for the upstream socket's readiness while it holds no buffer,
// which a TLS connection's buffered records would defeat.
type errHTTPSParent struct{ parent string }

func (e errHTTPSParent) Error() string {
	return "gate: parent " + e.parent + " is https, which gives a TLS connection; this request needs a TCP one"
}

// Reason is the client-safe reason.
func (e errHTTPSParent) Reason() string {
	return "parent proxy " + e.parent + " (https) does not carry HTTP/2 tunnels (CONNECT, WebSocket)"
}

// dialRoute dials the request's destination under the grant's route:
// direct (with the dial options o: the egress source and resolver), or
// through the parent it picks (the parent's own address is dialled from
// the kernel's choice of source, not o's). The result is a
// *net.TCPConn, or for an https parent a *tls.Conn, which tcpOnly
// refuses before dialing.
func (g *Grant) dialRoute(ctx context.Context, tcpOnly bool, o *dialer.Options) (net.Conn, error) {
	p := g.s.p
	addr, host := g.dest()
	if g.route.Direct() {
		c, err := p.Dialer.DialOptions(ctx, addr, g.permitter(), o)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	if g.forward {
		// The request goes to the parent itself (ForwardParent checked
		// its destination).
		if tcpOnly && g.parent.Scheme() == route.HTTPS {
			g.reason = accesslog.ReasonParentRefused
			return nil, &dialer.Error{Addr: addr, Err: errHTTPSParent{g.parent.Name()}}
		}
		c, err := g.parent.DialParent(ctx, p.Dialer)
		if err != nil {
			return nil, g.parentError(addr, err)
		}
		g.upstream = remoteAddrPort(c)
		return c, nil
	}
	parent := g.parent
	if !g.picked {
		var err error
		if parent, err = g.route.Pick(route.Key{Host: host, User: g.User}); err != nil {
			g.reason = accesslog.ReasonNoParent
			return nil, &dialer.Error{Addr: addr, Err: errNoParent{g.route.Name()}}
		}
	}
	if parent == nil { // every parent down; the route falls back to direct
		c, err := p.Dialer.DialOptions(ctx, addr, g.permitter(), o)
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	g.parent = parent
	if tcpOnly && parent.Scheme() == route.HTTPS {
		g.reason = accesslog.ReasonParentRefused
		return nil, &dialer.Error{Addr: addr, Err: errHTTPSParent{parent.Name()}}
	}
	t := route.Target{Host: host, Port: g.dst.port, Via: string(g.via), Self: p.Instance, Header: g.route.ConnectHeader()}
	if err := g.checkForParent(ctx, parent, addr, &t); err != nil {
		return nil, err
	}
	c, err := parent.Dial(ctx, p.Dialer, t)
	if err != nil {
		return nil, g.parentError(addr, err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		g.upstream = remoteAddrPort(tc)
	}
	return c, nil
}

// parentError returns a parent's failure to reach addr, the request's
// destination, as a *dialer.Error and notes its reason.
func (g *Grant) parentError(addr string, err error) error {
	var re *route.Error
	if errors.As(err, &re) {
		g.reason = parentReason(re.Kind)
		return &dialer.Error{Addr: addr, Timeout: re.Kind == route.TimedOut, Err: re}
	}
	return &dialer.Error{Addr: addr, Err: err}
}

// checkForParent applies the access rules and the private-destination
// guard to a destination sent to parent. For a socks5 parent rustle
// resolves the name, checks every address as a direct dial would and
// sends the first allowed one. For the others the parent resolves: an IP
// literal (in any spelling [dialer.ParseHost] reads, sent to the parent
// as the address checked) is checked as it would be for a direct dial; a
// host that ends in a number but is no address is refused; a name is
// decided by the rules as if it resolved to no address (their IP and CIDR
// host entries do not match it); what the parent resolves it to is not
// seen.
func (g *Grant) checkForParent(ctx context.Context, parent *route.Parent, addr string, t *route.Target) error {
	d := g.s.p.Dialer
	if parent.ResolvesLocally() {
		addrs, err := d.Resolve(ctx, addr, g.permitter())
		if err != nil {
			return err
		}
		t.Addr = addrs[0].Addr()
		return nil
	}
	ip, isIP, err := dialer.ParseHost(t.Host)
	if err != nil {
		return &dialer.Error{Addr: addr, Forbidden: true, Err: err}
	}
	if isIP {
		ip = ip.WithZone("").Unmap()
		if err := d.Check(netip.AddrPortFrom(ip, t.Port), g.permitter()); err != nil {
			return &dialer.Error{Addr: addr, Forbidden: true, Err: err}
		}
		if ip.Is4() {
			t.Host, t.Addr = "", ip // the parent is sent the address checked, not a spelling
		}
		return nil
	}
	if g.decided && !g.decision.PermitUnresolved() {
		g.Rule = g.decision.Rule
		return &dialer.Error{Addr: addr, Forbidden: true, Err: dialer.ErrDenied}
	}
	return nil
}

// parentReason returns the access log's reason for a parent's failure.
func parentReason(k route.ErrorKind) string {
	switch k {
	case route.TimedOut:
		return accesslog.ReasonParentTimedOut
	case route.AuthFailed:
		return accesslog.ReasonParentAuth
	case route.Refused, route.Protocol:
		return accesslog.ReasonParentRefused
	case route.Looped:
		return accesslog.ReasonLoop
	}
	return accesslog.ReasonParentUnreachable
}
