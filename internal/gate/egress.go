package gate

import (
	"net"
	"net/netip"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/dialer"
)

// Egress chooses where a listener's upstream connections come from: the
// source of the request's user when it has one of its own, else the
// listener's. A route that chooses its own source or resolver overrides
// the grant's dial options (see [Grant.DialOptions]).
type Egress struct {
	// Default is the source of requests whose user has none of its own
	// (the listener's egress, or the global one); nil = the kernel's
	// choice.
	Default *dialer.Source
	// Rules are the users' sources ([[egress.rules]]), in order; nil =
	// none. See [Egress.For] for which one a user takes.
	Rules []EgressRule
}

// EgressRule is the source of the users Who selects.
type EgressRule struct {
	Who    acl.Selector
	Source *dialer.Source
}

// For returns the source of the requests of user, whom its identity
// provider put in groups (nil = none); nil = the kernel's choice. The
// source is that of the first rule selecting the whole name (by name,
// as a member of an [acl.groups] group, or as every user), else of the
// first selecting the name without its session key ("alice" of
// "alice-session-42") so, else of the first naming one of groups as a
// provider group, else Default.
func (e *Egress) For(user string, groups []string) *dialer.Source {
	src, _ := e.forUser(user, groups)
	return src
}

// forUser is For, reporting whether the source is the user's own (a
// [[egress.rules]] entry, by name or by a provider's group) rather than
// the listener's default.
func (e *Egress) forUser(user string, groups []string) (src *dialer.Source, own bool) {
	if e == nil {
		return nil, false
	}
	if user != "" && len(e.Rules) > 0 {
		if r := e.first(user, nil); r != nil {
			return r.Source, true
		}
		if base := auth.SessionUser(user); base != user {
			if r := e.first(base, nil); r != nil {
				return r.Source, true
			}
		}
		if len(groups) > 0 {
			if r := e.first(user, groups); r != nil {
				return r.Source, true
			}
		}
	}
	return e.Default, false
}

// first returns the first rule selecting user in groups, nil when none
// does.
func (e *Egress) first(user string, groups []string) *EgressRule {
	for i := range e.Rules {
		if e.Rules[i].Who.Match(user, groups) {
			return &e.Rules[i]
		}
	}
	return nil
}

// Resolver returns the resolver the grant's dials resolve host names
// with (the [dns] resolver, or the system's), for a front-end that
// resolves destinations itself (SOCKS UDP datagrams).
func (g *Grant) Resolver() dialer.Resolver { return g.s.p.Dialer.Resolver() }

// localAddr returns the address c was reached at, unmapped.
func localAddr(c net.Conn) netip.Addr {
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}
