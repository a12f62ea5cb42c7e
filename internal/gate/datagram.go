package gate

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/route"
)

// AuthorizeAssociation decides a SOCKS5 UDP ASSOCIATE r as Authorize
// decides a request: the user, who is counted (and refused past the
// user's connection limit, or once its quota is spent), and its byte
// bucket. The access rules are not asked, as the association names no
// destination: they decide each of its datagrams, through
// PermitDatagram. The decision service is, once, about the association
// without a destination (see authz.go). A refusal is counted in the metrics; the front-end
// answers it and calls Finish, and on a grant reports the association as
// a tunnel (TunnelOpened), calls Meter, passes every datagram through
// PaceDatagram (which paces it and meters it against the user's byte
// quota, ending the association once it is spent), and calls Finish
// with the payload bytes relayed when it ends.
func (s *Session) AuthorizeAssociation(r *Request, g *Grant) Kind {
	p := s.p
	s.Observe(r, g)
	if kind := s.checkLoop(r, g); kind != OK {
		return kind
	}
	user, identified := s.Identity()
	if !identified && p.Auth != nil {
		p.Metrics.AuthChallenged()
		return g.refuse(NeedAuth)
	}
	if kind := s.admitUser(user, g); kind != OK {
		return g.refuse(kind)
	}
	if p.Authz != nil {
		// Asked once, without a destination (see authz.go).
		s.mu.Lock()
		g.groups = s.identityGroups
		s.mu.Unlock()
		g.decision = acl.Undecided(acl.Request{Client: s.ip, User: user, Groups: g.groups, Method: r.Method, Protocol: r.Protocol})
		if kind := g.askAuthz(""); kind != OK {
			return kind
		}
	}
	if !g.quota.Begin() {
		return g.refuse(QuotaExceeded)
	}
	return OK
}

// PermitDatagram reports, with a nil error, whether a datagram of the
// grant's association may be sent to dst, which the client named host
// ("" when it sent an address): the access rules decide it as a request
// of protocol acl.SOCKS5UDP without a method, from the session's client
// and user, and the dialer's private-destination guard checks dst under
// that decision. The deciding rule becomes g.Rule, so that the access
// log names the rule of the last datagram. A refused datagram is dropped
// by the front-end and not counted as a refusal. The route is not asked:
// DatagramParent is, first. PermitDatagram is used by one goroutine at a
// time, as the rest of g.
func (g *Grant) PermitDatagram(host string, dst netip.AddrPort) error {
	s := g.s
	p := s.p
	var perm dialer.Permitter
	if p.ACL != nil {
		g.decision = p.ACL.Decide(acl.Request{
			Client: s.ip, User: g.User, Host: host, Addr: dst.Addr().Unmap(), Port: dst.Port(),
			Protocol: acl.SOCKS5UDP,
		})
		g.decided = true
		g.Rule = g.decision.Rule
		if !g.decision.Allow {
			return fmt.Errorf("gate: datagram to %s denied by rule %q", dst, g.Rule)
		}
		perm = &g.decision
	}
	err := p.Dialer.Check(dst, perm)
	if g.decided {
		g.Rule = g.decision.Rule
	}
	if err != nil {
		return fmt.Errorf("gate: datagram to %s: %w", dst, err)
	}
	g.noteDatagramAudit()
	return nil
}

// noteDatagramAudit keeps the rule in audit mode that let a datagram
// through, for the association's record (see wouldDeny).
func (g *Grant) noteDatagramAudit() {
	if g.decided && g.decision.WouldDeny != "" {
		g.audited = g.decision.WouldDeny
	}
}

// DatagramParent returns the parent a datagram of the grant's association
// goes through, chosen by the policy's routes as for a request of
// protocol acl.SOCKS5UDP to host (a name; "" when the client sent the
// address ip) and port, from the session's client and user: nil for a
// direct route (no route, via = "direct", or a fallback to direct with
// every parent down), else a socks5 or socks5h parent of the route. It
// is an error, and the front-end drops the datagram (never sends it
// direct instead), when every parent of the route is down and it has no
// fallback, or when the parent picked is an http or https one, which
// cannot carry UDP. The route and parent become the grant's, so that the
// access log names those of the last datagram. The destination is not
// checked here: PermitDatagram (an address) or PermitDatagramName (a
// name a socks5h parent resolves) does it next.
func (g *Grant) DatagramParent(host string, ip netip.Addr, port uint16) (*route.Parent, error) {
	s := g.s
	t := s.p.Routes
	if t == nil {
		return nil, nil
	}
	rt := t.Match(acl.Request{
		Client: s.ip, User: g.User, Host: host, Addr: ip.Unmap(), Port: port,
		Protocol: acl.SOCKS5UDP,
	})
	g.route, g.parent, g.picked = rt, nil, true
	if rt.Direct() {
		return nil, nil
	}
	key := host
	if key == "" && rt.Group().Select() == route.HashHost {
		key = ip.String() // only hash-host reads it
	}
	parent, err := rt.Pick(route.Key{Host: key, User: g.User})
	if err != nil {
		g.reason = accesslog.ReasonNoParent
		return nil, fmt.Errorf("gate: datagram to %s: %w", datagramDst(host, ip), errNoParent{rt.Name()})
	}
	g.parent = parent
	if parent != nil && parent.Scheme().IsHTTP() {
		g.reason = accesslog.ReasonParentRefused
		return nil, fmt.Errorf("gate: datagram to %s: route %s picked parent %s (%s), which cannot carry UDP: %w",
			datagramDst(host, ip), rt.Name(), parent.Name(), parent.Scheme(), route.ErrNoUDP)
	}
	return parent, nil
}

// PermitDatagramName reports, with a nil error, whether a datagram to the
// host name host may be sent to a socks5h parent, which resolves it: the
// access rules decide it as PermitDatagram would, as if the name resolved
// to no address (their IP and CIDR host entries do not match it), as for
// a tunnel through such a parent. What the parent resolves the name to is
// not seen by the private-destination guard.
func (g *Grant) PermitDatagramName(host string, port uint16) error {
	s := g.s
	p := s.p
	if p.ACL == nil {
		return nil
	}
	g.decision = p.ACL.Decide(acl.Request{
		Client: s.ip, User: g.User, Host: host, Port: port, Protocol: acl.SOCKS5UDP,
	})
	g.decided = true
	g.Rule = g.decision.Rule
	if !g.decision.Allow || !g.decision.PermitUnresolved() {
		return fmt.Errorf("gate: datagram to %s: %w by rule %q", host, dialer.ErrDenied, g.Rule)
	}
	g.noteDatagramAudit()
	return nil
}

// AssociateParent opens a UDP association with parent (see
// route.Parent.Associate) for the grant's association, dialing the
// parent with the policy's dialer. A failure is noted as the grant's
// reason (parent-refused when the parent refused UDP ASSOCIATE) for the
// association's record; the front-end drops the datagrams meant for it.
func (g *Grant) AssociateParent(ctx context.Context, parent *route.Parent) (*route.Association, error) {
	a, err := parent.Associate(ctx, g.s.p.Dialer, g.s.p.Instance)
	if err != nil {
		var re *route.Error
		if errors.As(err, &re) {
			g.reason = parentReason(re.Kind)
		}
		return nil, fmt.Errorf("gate: udp associate through parent %s: %w", parent.Name(), err)
	}
	return a, nil
}

// datagramDst names a datagram's destination in an error.
func datagramDst(host string, ip netip.Addr) string {
	if host != "" {
		return host
	}
	return ip.String()
}
