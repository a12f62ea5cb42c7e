package config

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/rustle-proxy/rustle/internal/acl"
)

// ProtocolTransparent is the protocol of a listener that takes the
// connections the kernel redirected to it (see [Listener.Mode]).
const ProtocolTransparent = "transparent"

// The modes of a transparent listener, the values of [Listener.Mode].
const (
	// ModeRedirect takes connections that nftables/iptables REDIRECT or
	// DNAT sent to the listener: the original destination is read back
	// from the connection tracking (SO_ORIGINAL_DST).
	ModeRedirect = "redirect"
	// ModeTProxy takes connections that an nftables/iptables TPROXY rule
	// delivered to the listener's IP_TRANSPARENT socket: the original
	// destination is the connection's local address.
	ModeTProxy = "tproxy"
)

// PACPath is where the listeners of [PAC] serve the PAC file.
const PACPath = "/proxy.pac"

// PAC configures the proxy auto-configuration file (a JavaScript
// FindProxyForURL, which browsers, libproxy, Windows and macOS read)
// that some listeners serve at /proxy.pac to clients that fetch it
// directly (an origin-form GET, as browsers fetch a PAC URL), with
// Content-Type application/x-ns-proxy-autoconfig. The file is
// generated from Proxies and Bypass, or is File. Its zero value serves
// none.
type PAC struct {
	// Listeners names the "http" and "mixed" listeners that serve
	// /proxy.pac; empty means none, and then the other keys are
	// refused.
	Listeners []string `toml:"listeners"`
	// File is a PAC file the operator wrote, served as it is; relative
	// paths are resolved against the config file's directory. It is
	// read and checked when the configuration loads (and on each
	// reload): a file that does not read, or whose JavaScript does not
	// scan (an unterminated string, comment or regular expression, an
	// unbalanced bracket), or that defines no FindProxyForURL, is
	// refused with its line. It excludes Proxies and Bypass. "" means a
	// generated file.
	File string `toml:"file"`
	// Proxies are the proxies the generated file names for every host
	// Bypass does not send direct, in the order a client tries them
	// when one fails: "http://host:port" (PAC's PROXY),
	// "https://host:port" (HTTPS), "socks5://host:port" (SOCKS5), and
	// "direct" (DIRECT: the client goes without a proxy when those before
	// it fail), which may only come last. Empty means the listener the
	// file is fetched from, by the name and port the client fetched it
	// with (its Host).
	Proxies []string `toml:"proxies"`
	// Bypass are the hosts the generated file sends DIRECT: a name
	// ("intranet.example.com"), ".example.com" (example.com and the
	// names under it), "*.example.com" (the names under it), an IP
	// address or a CIDR prefix (matched against a URL whose host is an
	// IP literal: the file resolves no name, which would cost a client
	// a DNS lookup per URL), and "<local>" (host names without a dot).
	// Empty means none.
	Bypass []string `toml:"bypass"`
}

// Set reports whether any key of the PAC table is set.
func (p *PAC) Set() bool {
	return len(p.Listeners) > 0 || p.File != "" || len(p.Proxies) > 0 || len(p.Bypass) > 0
}

// PACProxy is one entry of [PAC.Proxies], as the PAC file names it.
type PACProxy struct {
	// Kind is "PROXY", "HTTPS", "SOCKS5" or "DIRECT".
	Kind string
	// HostPort is host:port; "" for DIRECT.
	HostPort string
}

// ParsePACProxy parses an entry of pac.proxies: "http://host:port",
// "https://host:port", "socks5://host:port" or "direct". The host is a
// name or an IP address (an IPv6 one in brackets) of the characters a
// host name has: it is written into the file's JavaScript as it is.
func ParsePACProxy(s string) (PACProxy, error) {
	if s == "direct" {
		return PACProxy{Kind: "DIRECT"}, nil
	}
	scheme, hp, ok := strings.Cut(s, "://")
	kinds := map[string]string{"http": "PROXY", "https": "HTTPS", "socks5": "SOCKS5"}
	kind := kinds[scheme]
	if !ok || kind == "" {
		return PACProxy{}, fmt.Errorf("%q is not http://host:port, https://host:port, socks5://host:port or direct", s)
	}
	hp = strings.TrimSuffix(hp, "/")
	if err := CheckPACHostPort(hp); err != nil {
		return PACProxy{}, fmt.Errorf("%q: %w", s, err)
	}
	return PACProxy{Kind: kind, HostPort: hp}, nil
}

// CheckPACHostPort checks that hp is host:port with a port, of the
// characters of a host name, an IP address or a bracketed IPv6 address:
// what a PAC file may quote as a proxy's address.
func CheckPACHostPort(hp string) error {
	i := strings.LastIndexByte(hp, ':')
	if i <= 0 || i == len(hp)-1 {
		return errors.New("want host:port")
	}
	for _, c := range hp[i+1:] {
		if c < '0' || c > '9' {
			return errors.New("the port is not a number")
		}
	}
	host := hp[:i]
	if strings.HasPrefix(host, "[") {
		if !strings.HasSuffix(host, "]") {
			return errors.New("an unclosed [ in the host")
		}
		if _, err := netip.ParseAddr(host[1 : len(host)-1]); err != nil {
			return fmt.Errorf("the bracketed host is no IPv6 address: %w", err)
		}
		return nil
	}
	if strings.ContainsFunc(host, func(r rune) bool {
		return !(r == '-' || r == '.' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
	}) {
		return errors.New("the host has a character no host name has")
	}
	return nil
}

// validateTransparent checks what transparent listeners and the PAC
// table say: a mode only on transparent listeners, no authentication,
// PROXY protocol or TLS on them; the PAC's listeners, proxies and
// bypass entries.
func (c *Config) validateTransparent(v *validator) {
	for i, l := range c.Listen {
		key := fmt.Sprintf("listen[%d]", i)
		if l.Protocol != ProtocolTransparent {
			v.check(l.Mode == "", key+".mode", "is only for transparent listeners, not %q", l.Protocol)
			continue
		}
		v.check(l.Mode == ModeRedirect || l.Mode == ModeTProxy, key+".mode", "%q is neither %q nor %q", l.Mode, ModeRedirect, ModeTProxy)
		v.check(l.Auth != AuthBasic, key+".auth",
			`"basic" on a transparent listener: its clients know of no proxy and send no credentials; select them by address (clients in [[acl.rules]])`)
		v.check(l.URLUser == nil && len(l.Users) == 0, key+".users", "is not for a transparent listener: it authenticates nobody")
		v.check(l.Providers == nil, key+".providers", "is not for a transparent listener: it authenticates nobody")
		v.check(!l.ProxyProtocol, key+".proxy_protocol", "is not for a transparent listener: the kernel, not a balancer, hands it its connections")
	}
	p := &c.PAC
	if !p.Set() {
		return
	}
	v.check(len(p.Listeners) > 0, "pac.listeners", "is empty: name the http or mixed listeners that serve /proxy.pac")
	for i, name := range p.Listeners {
		k := fmt.Sprintf("pac.listeners[%d]", i)
		j := slices.IndexFunc(c.Listen, func(l Listener) bool { return l.Name == name })
		switch {
		case j < 0:
			v.add(k, fmt.Errorf("%q is the name of no listener", name))
		case c.Listen[j].Protocol != "http" && c.Listen[j].Protocol != "mixed":
			v.add(k, fmt.Errorf("%q is a %s listener: only http and mixed listeners serve /proxy.pac", name, c.Listen[j].Protocol))
		}
	}
	if p.File != "" {
		v.check(len(p.Proxies) == 0, "pac.proxies", "excludes pac.file: the file names its proxies")
		v.check(len(p.Bypass) == 0, "pac.bypass", "excludes pac.file: the file says what goes direct")
		return
	}
	for i, s := range p.Proxies {
		k := fmt.Sprintf("pac.proxies[%d]", i)
		pp, err := ParsePACProxy(s)
		if err != nil {
			v.add(k, err)
			continue
		}
		v.check(pp.Kind != "DIRECT" || i == len(p.Proxies)-1, k, `"direct" may only be the last entry`)
	}
	for i, b := range p.Bypass {
		if _, err := ParsePACBypass(b); err != nil {
			v.add(fmt.Sprintf("pac.bypass[%d]", i), err)
		}
	}
}

// PACBypass is one entry of [PAC.Bypass].
type PACBypass struct {
	// Name is a host name, lower case; "" for the other kinds.
	Name string
	// Suffix is ".example.com" for example.com and the names under it,
	// or for "*.example.com" the names under it only (Exact false).
	Suffix string
	// Exact says Suffix's domain itself goes direct too.
	Exact bool
	// Prefix is an address or range; invalid for the other kinds.
	Prefix netip.Prefix
	// Local is "<local>": host names without a dot.
	Local bool
}

// ParsePACBypass parses an entry of pac.bypass.
func ParsePACBypass(s string) (PACBypass, error) {
	if s == "<local>" {
		return PACBypass{Local: true}, nil
	}
	if strings.ContainsAny(s, ":/") || strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' && r != '.' }) < 0 {
		p, err := acl.ParsePrefix(s)
		if err != nil {
			return PACBypass{}, fmt.Errorf("%q: %w", s, err)
		}
		return PACBypass{Prefix: p}, nil
	}
	var b PACBypass
	name := strings.ToLower(s)
	switch {
	case strings.HasPrefix(name, "*."):
		name = name[1:]
		b.Suffix = name
	case strings.HasPrefix(name, "."):
		b.Suffix, b.Exact = name, true
	default:
		b.Name = name
	}
	bare := strings.TrimPrefix(name, ".")
	if bare == "" || strings.ContainsFunc(bare, func(r rune) bool {
		return !(r == '-' || r == '.' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z')
	}) {
		return PACBypass{}, fmt.Errorf("%q is not a host name, .suffix, *.suffix, IP address, CIDR prefix or <local>", s)
	}
	return b, nil
}
