package dialer

import (
	"errors"
	"net"
	"net/netip"
	"sync/atomic"
)

// Errors a refused destination wraps, in an [*Error] with Forbidden set.
var (
	// ErrPrivate refuses a destination address in a private, local or
	// reserved range (see [Private]) that no exception allows.
	ErrPrivate = errors.New("dialer: destination is a private or local address")
	// ErrOwnAddress refuses one of the proxy's own listening addresses,
	// which would loop requests back into the proxy.
	ErrOwnAddress = errors.New("dialer: destination is the proxy's own listening address")
	// ErrDenied refuses an address the request's policy denies (an ACL
	// rule on the address a host name resolved to).
	ErrDenied = errors.New("dialer: destination address denied by policy")
)

// privateRanges4 are the IPv4 ranges the guard refuses: "this network",
// RFC 1918, CGNAT shared space (RFC 6598), loopback, link-local (which
// holds cloud metadata services at 169.254.169.254), IETF protocol
// assignments, benchmarking, multicast and the reserved 240/4 with the
// broadcast address.
var privateRanges4 = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
}

// privateRanges6 are the IPv6 ranges refused outright: unspecified,
// loopback, unique local, link-local, deprecated site-local, multicast and
// the local-use NAT64 prefix. IPv6 forms that embed an IPv4 address
// (IPv4-mapped ::ffff:0:0/96, IPv4-compatible ::/96, NAT64 64:ff9b::/96
// and 6to4 2002::/16) are refused when the embedded address is.
var privateRanges6 = []netip.Prefix{
	netip.MustParsePrefix("::/128"),
	netip.MustParsePrefix("::1/128"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fec0::/10"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	compat    = netip.MustParsePrefix("::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// PrivateRanges returns the ranges [Private] refuses, IPv4 then IPv6,
// not counting the IPv6 forms that embed an IPv4 address.
func PrivateRanges() []netip.Prefix {
	return append(append([]netip.Prefix(nil), privateRanges4...), privateRanges6...)
}

// Private reports whether ip is an address the guard refuses by default:
// in a range of [PrivateRanges], or an IPv6 address embedding such an IPv4
// address (IPv4-mapped, IPv4-compatible, NAT64 64:ff9b::/96, 6to4).
func Private(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	if ip.Is4() {
		return inPrefixes(privateRanges4, ip)
	}
	if inPrefixes(privateRanges6, ip) {
		return true
	}
	if v4, ok := embedded4(ip); ok {
		return inPrefixes(privateRanges4, v4)
	}
	return false
}

// embedded4 returns the IPv4 address an IPv6 address of a translation or
// tunnelling form carries.
func embedded4(ip netip.Addr) (netip.Addr, bool) {
	b := ip.As16()
	switch {
	case nat64.Contains(ip), compat.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

func inPrefixes(ps []netip.Prefix, ip netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Guard is the private-destination guard: it refuses connections to the
// addresses [Private] reports, except those in its allowed ranges or
// allowed by the request's policy, and always to the proxy's own listening
// addresses. It is safe for concurrent use.
type Guard struct {
	allow []netip.Prefix
	own   atomic.Pointer[ownAddrs] // set by SetOwn; nil until then
	// next, once set by Supersede, is the guard that decides in g's
	// place.
	next atomic.Pointer[Guard]
}

// Supersede makes next decide every later Check of g (and of the guards
// that superseded g before): a reload's guard applies at once to the
// connections accepted before it, whose dialers hold g.
func (g *Guard) Supersede(next *Guard) {
	if next != g {
		g.next.Store(next)
	}
}

// current returns the guard that decides for g: the last in its chain of
// Supersede calls.
func (g *Guard) current() *Guard {
	for n := g.next.Load(); n != nil; n = g.next.Load() {
		g = n
	}
	return g
}

// ownAddrs are the proxy's listening addresses.
type ownAddrs struct {
	exact map[netip.AddrPort]struct{}
	// anyPorts are the ports of listeners on an unspecified address:
	// every local address on them is the proxy's.
	anyPorts map[uint16]struct{}
	local    []netip.Addr // the host's interface addresses when anyPorts is set
}

// NewGuard returns a guard that lets through private addresses in allow
// (an address or its embedded IPv4 form); allow may be empty.
func NewGuard(allow []netip.Prefix) *Guard {
	g := &Guard{}
	for _, p := range allow {
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		g.allow = append(g.allow, p.Masked())
	}
	return g
}

// Allowed returns the private ranges the guard lets through.
func (g *Guard) Allowed() []netip.Prefix {
	return append([]netip.Prefix(nil), g.current().allow...)
}

// SetOwn sets the proxy's listening addresses, which the guard refuses
// whatever the exceptions. A listener on an unspecified address (0.0.0.0
// or ::) makes every loopback and interface address on its port the
// proxy's. SetOwn replaces what an earlier call set.
func (g *Guard) SetOwn(addrs []netip.AddrPort) {
	o := &ownAddrs{exact: make(map[netip.AddrPort]struct{})}
	for _, a := range addrs {
		ip := a.Addr().WithZone("").Unmap()
		if ip.IsUnspecified() {
			if o.anyPorts == nil {
				o.anyPorts = make(map[uint16]struct{})
			}
			o.anyPorts[a.Port()] = struct{}{}
			continue
		}
		o.exact[netip.AddrPortFrom(ip, a.Port())] = struct{}{}
	}
	if o.anyPorts != nil {
		if ifas, err := net.InterfaceAddrs(); err == nil {
			for _, ifa := range ifas {
				if ipn, ok := ifa.(*net.IPNet); ok {
					if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
						o.local = append(o.local, ip.Unmap())
					}
				}
			}
		}
	}
	g.own.Store(o)
}

// isOwn reports whether ap is one of the proxy's listening addresses.
func (g *Guard) isOwn(ap netip.AddrPort) bool {
	o := g.own.Load()
	if o == nil {
		return false
	}
	ip := ap.Addr().WithZone("").Unmap()
	if _, ok := o.exact[netip.AddrPortFrom(ip, ap.Port())]; ok {
		return true
	}
	if _, ok := o.anyPorts[ap.Port()]; ok {
		if ip.IsLoopback() || ip.IsUnspecified() {
			return true
		}
		for _, l := range o.local {
			if l == ip {
				return true
			}
		}
	}
	return false
}

// allowed reports whether ip, or the IPv4 address it embeds, is in an
// allowed range.
func (g *Guard) allowed(ip netip.Addr) bool {
	if inPrefixes(g.allow, ip) {
		return true
	}
	if v4, ok := embedded4(ip); ok {
		return inPrefixes(g.allow, v4)
	}
	return false
}

// Check returns nil when the guard lets a connection to ap through:
// ErrOwnAddress for the proxy's own listening address, ErrPrivate for a
// private address that neither the guard's allowed ranges nor the caller
// (privateOK, from the request's policy) allow.
func (g *Guard) Check(ap netip.AddrPort, privateOK bool) error {
	g = g.current()
	if g.isOwn(ap) {
		return ErrOwnAddress
	}
	ip := ap.Addr().WithZone("").Unmap()
	if !privateOK && Private(ip) && !g.allowed(ip) {
		return ErrPrivate
	}
	return nil
}
