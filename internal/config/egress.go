package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
)

// Egress configures where upstream connections come from, for every
// listener; a listener's own egress table, and a user's rule, replace it.
// Its zero value leaves the source address to the kernel.
type Egress struct {
	// Bind lists source addresses ("203.0.113.7", "2001:db8::7") and
	// prefixes ("2001:db8:1::/64"). Each connection takes one of its
	// destination's address family (the family follows the
	// destination; none of it is a 502, never another address); from a
	// prefix, an address of its own, or one per session key (a user
	// name such as "alice-session-42"). An address must be configured on
	// the host unless Freebind is set. Empty means the kernel's choice.
	Bind []string `toml:"bind"`
	// Interface binds upstream sockets to this network interface
	// (SO_BINDTODEVICE; Linux only); "" means none.
	Interface string `toml:"interface"`
	// Freebind lets Bind name addresses not configured on the host
	// (IP_FREEBIND; Linux only); addresses from a prefix always have
	// it. false means every Bind address must be the host's.
	Freebind bool `toml:"freebind"`
	// Rules give users and groups sources of their own: the first rule
	// naming a request's user (or the user name without its session
	// key, or a group of it) decides. Empty means none.
	Rules []EgressRule `toml:"rules"`
	// Mark is the firewall mark (SO_MARK; Linux only, needs
	// CAP_NET_ADMIN) set on every socket rustle makes to reach an
	// upstream: direct and parent connections, SOCKS and CONNECT-UDP
	// relay sockets, its own DNS queries and list fetches. The
	// nftables rules that redirect clients to a transparent listener
	// skip packets with it, so that rustle's own traffic is never
	// redirected back to it (see docs/operations.md, "Transparent
	// interception"). 0 means no mark; at most 0xffffffff (TOML takes
	// hexadecimal: 0x2a).
	Mark int64 `toml:"mark"`
}

// EgressRule is the egress of some users and groups. Its Bind,
// Interface and Freebind mean what [Egress]'s do, and replace the
// listener's and the global ones for those users.
type EgressRule struct {
	// Who is the users the rule gives a source: groups of [acl.groups]
	// or of an [[auth.providers]] entry's groups. One of users and
	// groups at least is required.
	Who
	// Bind lists source addresses and prefixes; empty means the kernel's
	// choice (with Interface, a bound interface only).
	Bind []string `toml:"bind"`
	// Interface is the interface to bind to; "" means none.
	Interface string `toml:"interface"`
	// Freebind lets Bind name addresses not configured on the host.
	Freebind bool `toml:"freebind"`
	// SNIHosts restricts the rule to the users' tunnels whose TLS
	// ClientHello names one of these server names (the syntax of
	// [Criteria.SNIHosts]): such a tunnel reads its hello before it is
	// dialled; other requests skip the rule. Empty means every request of
	// the users.
	SNIHosts []string `toml:"sni_hosts"`
}

// ListenerEgress is a listener's egress: when any key is set it replaces
// the global [egress] table's bind, interface and freebind for the
// listener's requests (users' rules still apply).
type ListenerEgress struct {
	// Bind lists source addresses and prefixes, as [Egress.Bind].
	Bind []string `toml:"bind"`
	// BindSame makes each upstream connection come from the address the
	// client connected to (Tinyproxy's BindSame): a client that reached
	// an IPv4 address can reach IPv4 destinations only. It excludes
	// Bind. false means Bind's choice.
	BindSame bool `toml:"bind_same"`
	// Interface binds upstream sockets to this interface; "" means
	// none.
	Interface string `toml:"interface"`
	// Freebind lets Bind name addresses not configured on the host.
	Freebind bool `toml:"freebind"`
}

// Set reports whether any key of the listener's egress is set.
func (e ListenerEgress) Set() bool {
	return len(e.Bind) > 0 || e.BindSame || e.Interface != "" || e.Freebind
}

// Set reports whether the global egress sets a source (its rules aside).
func (e *Egress) Set() bool {
	return len(e.Bind) > 0 || e.Interface != "" || e.Freebind
}

// validateEgress checks the [egress] table, its rules and every
// listener's egress. Whether an address is the host's is checked when
// the server loads the configuration, with [Config.KeyError].
func (c *Config) validateEgress(v *validator) {
	e := &c.Egress
	v.check(e.Mark >= 0 && e.Mark <= math.MaxUint32, "egress.mark", "%d is not a 32-bit firewall mark (0 to 0xffffffff)", e.Mark)
	validateBind(v, "egress", e.Bind, e.Interface)
	for i, r := range e.Rules {
		key := fmt.Sprintf("egress.rules[%d]", i)
		v.check(len(r.Users)+len(r.Groups) > 0, key, "names no users and no groups")
		v.check(len(r.Bind) > 0 || r.Interface != "", key, "sets neither bind nor interface")
		c.validateWho(v, key, r.Who, true)
		validateBind(v, key, r.Bind, r.Interface)
		validateSNIHosts(v, key, r.SNIHosts)
	}
	for i, l := range c.Listen {
		key := fmt.Sprintf("listen[%d].egress", i)
		le := l.Egress
		v.check(!le.BindSame || len(le.Bind) == 0, key+".bind_same", "excludes bind: connections come from the address the client reached")
		validateBind(v, key, le.Bind, le.Interface)
	}
}

// validateBind checks the bind list and interface of the egress table at
// key.
func validateBind(v *validator, key string, bind []string, iface string) {
	for i, b := range bind {
		k := fmt.Sprintf("%s.bind[%d]", key, i)
		if strings.Contains(b, "/") {
			p, err := netip.ParsePrefix(b)
			switch {
			case err != nil:
				v.add(k, fmt.Errorf("%q is not an IP address or a CIDR prefix", b))
			case p.Addr().BitLen()-p.Bits() < 2:
				v.add(k, fmt.Errorf("%q leaves fewer than 2 host bits: list the address instead", b))
			case p.Masked() != p:
				v.add(k, fmt.Errorf("%q has host bits set: write %s", b, p.Masked()))
			}
			continue
		}
		a, err := netip.ParseAddr(b)
		switch {
		case err != nil:
			v.add(k, fmt.Errorf("%q is not an IP address or a CIDR prefix", b))
		case a.IsUnspecified(), a.IsMulticast():
			v.add(k, fmt.Errorf("%q cannot be a source address", b))
		case a.Zone() != "":
			v.add(k, fmt.Errorf("%q: give the interface in interface, not as a zone", b))
		}
	}
	if iface != "" {
		v.check(len(iface) < 16 && !strings.ContainsAny(iface, "/ \t\n:"), key+".interface",
			"%q is not an interface name", iface)
	}
	if len(bind) == 0 {
		return
	}
	if slicesHasDup(bind) {
		v.add(key+".bind", errors.New("lists an entry twice"))
	}
}

func slicesHasDup(list []string) bool {
	seen := make(map[string]bool, len(list))
	for _, s := range list {
		if seen[s] {
			return true
		}
		seen[s] = true
	}
	return false
}

// MarkValue returns egress.mark as the socket option takes it (see
// [Egress.Mark]).
func (e *Egress) MarkValue() uint32 { return uint32(e.Mark) }
