package gate

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/route"
)

// chooseRoute notes the route of an authorized request: the first of the
// policy's routes that r matches (nil = direct). The parent is picked
// when the grant dials.
func (g *Grant) chooseRoute(r *acl.Request) {
	g.route, g.parent = nil, nil
	if t := g.s.p.Routes; t != nil {
		g.route = t.Match(*r)
	}
}

// Route returns the request's route, nil when no route matched (direct).
func (g *Grant) Route() *route.Route { return g.route }

// Parent returns the parent the request's upstream went through, nil
// when it went direct (or has not dialed).
func (g *Grant) Parent() *route.Parent { return g.parent }

// ViaParent reports whether the request's route goes through parents:
// its upstream, once dialed, is a tunnel through one and is not for
// requests of another route. A kept or pooled connection made for
// another request is not used for it (see Admits), and the connection it
// dials is not to be pooled by origin.
func (g *Grant) ViaParent() bool { return !g.route.Direct() }

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
// connection to the destination (Dial: plain HTTP forwarding, HTTP/2
// streams), which phase 2 of the parents work is to add.
type errHTTPSParent struct{ parent string }

func (e errHTTPSParent) Error() string {
	return "gate: parent " + e.parent + " is https, which gives a TLS connection; this request needs a TCP one"
}

// Reason is the client-safe reason.
func (e errHTTPSParent) Reason() string {
	return "parent proxy " + e.parent + " (https) takes only tunnels (CONNECT, SOCKS) for now"
}

// dialRoute dials addr under the grant's route: direct (DialPermit), or
// through the parent it picks. The result is a *net.TCPConn, or for an
// https parent a *tls.Conn, which tcpOnly refuses before dialing.
func (g *Grant) dialRoute(ctx context.Context, addr string, tcpOnly bool) (net.Conn, error) {
	p := g.s.p
	if g.route.Direct() {
		c, err := p.Dialer.DialPermit(ctx, addr, g.permitter())
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, &dialer.Error{Addr: addr, Err: err}
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, &dialer.Error{Addr: addr, Err: err}
	}
	parent, err := g.route.Pick(route.Key{Host: host, User: g.User})
	if err != nil {
		g.reason = accesslog.ReasonNoParent
		return nil, &dialer.Error{Addr: addr, Err: errNoParent{g.route.Name()}}
	}
	if parent == nil { // every parent down; the route falls back to direct
		c, err := p.Dialer.DialPermit(ctx, addr, g.permitter())
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
	t := route.Target{Host: host, Port: uint16(port)}
	if err := g.checkForParent(ctx, parent, addr, &t); err != nil {
		return nil, err
	}
	c, err := parent.Dial(ctx, p.Dialer, t)
	if err != nil {
		var re *route.Error
		if errors.As(err, &re) {
			g.reason = parentReason(re.Kind)
			return nil, &dialer.Error{Addr: addr, Timeout: re.Kind == route.TimedOut, Err: re}
		}
		return nil, &dialer.Error{Addr: addr, Err: err}
	}
	if tc, ok := c.(*net.TCPConn); ok {
		g.upstream = remoteAddrPort(tc)
	}
	return c, nil
}

// checkForParent applies the access rules and the private-destination
// guard to a destination sent to parent. For a socks5 parent rustle
// resolves the name, checks every address as a direct dial would and
// sends the first allowed one. For the others the parent resolves: an IP
// literal is checked as it would be for a direct dial, and a name is
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
	if ip, err := netip.ParseAddr(t.Host); err == nil {
		if err := d.Check(netip.AddrPortFrom(ip.Unmap(), t.Port), g.permitter()); err != nil {
			return &dialer.Error{Addr: addr, Forbidden: true, Err: err}
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
	}
	return accesslog.ReasonParentUnreachable
}
