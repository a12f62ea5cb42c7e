package gate

import (
	"fmt"
	"net/netip"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
)

// AuthorizeAssociation decides a SOCKS5 UDP ASSOCIATE r as Authorize
// decides a request: the user, who is counted (and refused past the
// user's connection limit, or once its quota is spent; its datagrams'
// bytes count when it ends), and its byte bucket. The access rules are
// not asked, as the association names no destination: they decide each
// of its datagrams, through PermitDatagram. A refusal is counted in the
// metrics; the front-end answers it and calls Finish, and on a grant
// reports the association as a tunnel (TunnelOpened) and calls Finish
// with the payload bytes relayed when it ends.
func (s *Session) AuthorizeAssociation(r *Request, g *Grant) Kind {
	p := s.p
	s.Observe(r, g)
	user, identified := s.Identity()
	if !identified && p.Auth != nil {
		p.Metrics.AuthChallenged()
		return g.refuse(NeedAuth)
	}
	if kind := s.admitUser(user, g); kind != OK {
		return g.refuse(kind)
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
// by the front-end and not counted as a refusal; so is a datagram whose
// route (see route.go) goes through parents, which do not relay UDP yet:
// it is never sent direct instead. PermitDatagram is used
// by one goroutine at a time, as the rest of g.
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
	if t := p.Routes; t != nil {
		// UDP through a parent is not written: a datagram whose route
		// goes through parents is dropped, never sent direct.
		rt := t.Match(acl.Request{
			Client: s.ip, User: g.User, Host: host, Addr: dst.Addr().Unmap(), Port: dst.Port(),
			Protocol: acl.SOCKS5UDP,
		})
		if !rt.Direct() {
			return fmt.Errorf("gate: datagram to %s: route %s goes through parents, which do not relay UDP yet", dst, rt.Name())
		}
	}
	return nil
}
