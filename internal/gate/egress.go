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

// EgressRule is the source of the users Who selects, for the tunnels
// whose ClientHello names one of SNI's names when SNI is set.
type EgressRule struct {
	Who    acl.Selector
	Source *dialer.Source
	// SNI restricts the rule to tunnels whose ClientHello's server name
	// it matches (sni_hosts; see NeedsHello): a request without a
	// ClientHello never takes it. nil = any request.
	SNI *acl.SNINames
}

// helloInfo is what an egress rule with sni_hosts is matched against.
type helloInfo struct {
	read bool   // the tunnel's first bytes were read: name is what they named
	can  bool   // not read yet, and the request is a tunnel that may read them
	name string // the server name; "" none
}

// helloUnread is a tunnel whose ClientHello is still to be read;
// noHello a request that has none.
var (
	helloUnread = helloInfo{can: true}
	noHello     = helloInfo{}
)

// For returns the source of the requests of user, whom its identity
// provider put in groups (nil = none); nil = the kernel's choice. The
// source is that of the first rule selecting the whole name (by name,
// as a member of an [acl.groups] group, or as every user), else of the
// first selecting the name without its session key ("alice" of
// "alice-session-42") so, else of the first naming one of groups as a
// provider group, else Default. A rule with sni_hosts is for the tunnels
// whose ClientHello names one of them: For, which has no hello, skips
// it.
func (e *Egress) For(user string, groups []string) *dialer.Source {
	src, _ := e.forUser(user, groups, noHello)
	return src
}

// forUser is For for a request whose ClientHello h says what it named,
// reporting whether the source is the user's own (a [[egress.rules]]
// entry, by name or by a provider's group) rather than the listener's
// default. For a tunnel whose hello is unread it reports own when a rule
// with sni_hosts may choose its source: the source is then known once
// the hello is read (see NeedsHello).
func (e *Egress) forUser(user string, groups []string, h helloInfo) (src *dialer.Source, own bool) {
	if e == nil {
		return nil, false
	}
	if user != "" && len(e.Rules) > 0 {
		if r, pending := e.first(user, nil, h); r != nil || pending {
			return r.source(), true
		}
		if base := auth.SessionUser(user); base != user {
			if r, pending := e.first(base, nil, h); r != nil || pending {
				return r.source(), true
			}
		}
		if len(groups) > 0 {
			if r, pending := e.first(user, groups, h); r != nil || pending {
				return r.source(), true
			}
		}
	}
	return e.Default, false
}

// pendsOnHello reports whether the source of a tunnel of user, whose
// ClientHello is unread, depends on its server name: a rule with
// sni_hosts is the first asked of it.
func (e *Egress) pendsOnHello(user string, groups []string) bool {
	if e == nil || user == "" || !e.sniRules() {
		return false
	}
	if r, pending := e.first(user, nil, helloUnread); r != nil || pending {
		return pending
	}
	if base := auth.SessionUser(user); base != user {
		if r, pending := e.first(base, nil, helloUnread); r != nil || pending {
			return pending
		}
	}
	if len(groups) > 0 {
		_, pending := e.first(user, groups, helloUnread)
		return pending
	}
	return false
}

// sniRules reports whether a rule has sni_hosts.
func (e *Egress) sniRules() bool {
	for i := range e.Rules {
		if e.Rules[i].SNI != nil {
			return true
		}
	}
	return false
}

// source returns r's source; nil for a nil r.
func (r *EgressRule) source() *dialer.Source {
	if r == nil {
		return nil
	}
	return r.Source
}

// first returns the first rule selecting user in groups whose sni_hosts,
// if any, match h; nil when none does. pending reports that a rule with
// sni_hosts would be asked first of a tunnel whose hello is unread.
func (e *Egress) first(user string, groups []string, h helloInfo) (r *EgressRule, pending bool) {
	for i := range e.Rules {
		r := &e.Rules[i]
		if !r.Who.Match(user, groups) {
			continue
		}
		switch {
		case r.SNI == nil:
			return r, false
		case h.can:
			return nil, true
		case h.read && r.SNI.Match(h.name):
			return r, false
		}
	}
	return nil, false
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
