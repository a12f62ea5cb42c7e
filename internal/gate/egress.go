package gate

import (
	"net"
	"net/netip"

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
	// Users maps user names to their sources ([[egress.rules]], group
	// members included); nil = none. A name carrying a session key
	// ("alice-session-42") takes its own entry, or else the entry of
	// the name without the key ("alice").
	Users map[string]*dialer.Source
	// Groups are the sources of groups that identity providers give
	// users ([[egress.rules]] naming them), in the rules' order: a user
	// without an entry in Users takes the first whose group it is in.
	// nil = none.
	Groups []GroupSource
}

// GroupSource is the source of the users an identity provider puts in
// Group.
type GroupSource struct {
	Group  string
	Source *dialer.Source
}

// For returns the source of the requests of user, whom its identity
// provider put in groups (nil = none); nil = the kernel's choice.
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
	if user != "" && e.Users != nil {
		if s, ok := e.Users[user]; ok {
			return s, true
		}
		if base := auth.SessionUser(user); base != user {
			if s, ok := e.Users[base]; ok {
				return s, true
			}
		}
	}
	if user != "" {
		for _, gs := range e.Groups {
			for _, g := range groups {
				if g == gs.Group {
					return gs.Source, true
				}
			}
		}
	}
	return e.Default, false
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
