package acl

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// maxName is the longest host name a rule can match (253 characters and
// a trailing dot); longer names match no name entry.
const maxName = 256

// rule is a compiled Rule. Empty criteria match anything.
type rule struct {
	name   string
	allow  bool
	report bool // a deny rule that lets what it denies through (action "report")

	clients     []netip.Prefix
	clientLists []*List  // loaded client lists; nil = none
	who         Selector // users and groups; empty = any
	hosts       hostSet
	hostLists   []*List // loaded host lists; nil = none
	ports       []portRange
	methods     []string
	paths       []pathPattern // empty = any
	protocols   Protocol      // 0 = any
	sniHosts    hostSet       // names only; empty = any

	allowPrivate []netip.Prefix
	sniMode      sni.Mode
}

type portRange struct{ lo, hi uint16 }

// hostSet is a compiled hosts criterion.
type hostSet struct {
	set      bool                // the criterion is not empty
	exact    map[string]struct{} // "example.com"
	under    map[string]struct{} // "*.example.com": names under example.com
	apex     map[string]struct{} // ".example.com": example.com and the names under it
	prefixes []netip.Prefix      // IP addresses and CIDR prefixes
}

// match results.
const (
	matchNo = iota
	matchYes
	matchPending // decided by the address the host name resolves to
	matchSNI     // decided by the server_name of the tunnel's ClientHello, not read yet
)

// compile compiles one configured rule.
func compile(rc Rule, groups map[string][]string, providerGroups []string) (rule, error) {
	r := rule{name: rc.Name}
	var errs []error
	fail := func(key string, err error) { errs = append(errs, fmt.Errorf("%s: %w", key, err)) }
	switch rc.Action {
	case Allow:
		r.allow = true
	case Deny:
	case Report:
		r.report = true
	default:
		fail("action", fmt.Errorf("%q is not %q, %q or %q", rc.Action, Allow, Deny, Report))
	}
	for _, s := range rc.Clients {
		p, err := ParsePrefix(s)
		if err != nil {
			fail("clients", err)
			continue
		}
		r.clients = append(r.clients, p)
	}
	who := Who{Users: rc.Users, Groups: rc.Groups}
	who.check(groups, providerGroups, fail)
	r.who = NewSelector(who, groups, providerGroups)
	for _, h := range rc.Hosts {
		if err := r.hosts.add(h); err != nil {
			fail("hosts", err)
		}
	}
	r.hostLists = listsOf(rc.HostLists, HostList, "host_lists", fail)
	r.clientLists = listsOf(rc.ClientLists, ClientList, "client_lists", fail)
	for _, h := range rc.SNIHosts {
		if err := r.sniHosts.addName(h); err != nil {
			fail("sni_hosts", err)
		}
	}
	for _, s := range rc.Ports {
		lo, hi, err := ParsePorts(s)
		if err != nil {
			fail("ports", err)
			continue
		}
		r.ports = append(r.ports, portRange{lo, hi})
	}
	for _, m := range rc.Methods {
		if err := ParseMethod(m); err != nil {
			fail("methods", err)
			continue
		}
		r.methods = append(r.methods, m)
	}
	for _, s := range rc.Paths {
		pp, err := parsePath(s)
		if err != nil {
			fail("paths", err)
			continue
		}
		r.paths = append(r.paths, pp)
	}
	for _, s := range rc.Protocols {
		p, err := ParseProtocol(s)
		if err != nil {
			fail("protocols", err)
			continue
		}
		r.protocols |= p
	}
	if len(rc.AllowPrivate) > 0 && (rc.Action == Deny || rc.Action == Report) {
		fail("allow_private", errors.New("is only for allow rules"))
	}
	for _, s := range rc.AllowPrivate {
		p, err := ParsePrefix(s)
		if err != nil {
			fail("allow_private", err)
			continue
		}
		r.allowPrivate = append(r.allowPrivate, p)
	}
	if m, err := sni.ParseMode(rc.SNI); err != nil {
		fail("sni", err)
	} else if m != sni.Unset && !r.allow && rc.Action == Deny {
		fail("sni", errors.New("is only for allow rules"))
	} else {
		r.sniMode = m
	}
	return r, errors.Join(errs...)
}

// listsOf returns lists, checked to be of kind; nil for none.
func listsOf(lists []*List, kind ListKind, key string, fail func(string, error)) []*List {
	for _, l := range lists {
		if l == nil || l.kind != kind {
			fail(key, fmt.Errorf("is not a list of %s", kind))
			return nil
		}
	}
	return slices.Clip(lists)
}

// ParsePrefix parses a client or allow_private entry: an IP address (a
// single-address prefix) or a CIDR prefix, which is masked. IPv4-mapped
// IPv6 forms are unmapped.
func ParsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
		}
		if a := p.Addr(); a.Is4In6() {
			bits := p.Bits() - 96
			if bits < 0 {
				return netip.Prefix{}, fmt.Errorf("%q: an IPv4-mapped prefix needs at least 96 bits", s)
			}
			p = netip.PrefixFrom(a.Unmap(), bits)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	if err != nil {
		// Any other spelling of an IPv4 address that the dialer reads
		// ("127.1", "0x7f000001", "0") is that address here too, as a
		// request's host in that spelling is (normalizeHost).
		if ip, ok, perr := dialer.ParseHost(s); perr == nil && ok && ip.Is4() {
			a, err = ip, nil
		}
	}
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR prefix", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// ParseUser checks a user name entry: not empty, no ':' and no control
// characters.
func ParseUser(s string) error {
	if s == "" {
		return errors.New("empty user name")
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r == ':' || r < ' ' || r == 0x7f }) {
		return fmt.Errorf("user name %q has ':' or a control character", s)
	}
	return nil
}

// ParseHost checks a hosts entry: a host name, "*.name", ".name", an IP
// address (IPv6 with or without brackets) or a CIDR prefix.
func ParseHost(s string) error {
	var h hostSet
	return h.add(s)
}

// ParseSNIHost checks a sni_hosts entry: a host name, "*.name" or
// ".name"; not an IP address or a CIDR prefix.
func ParseSNIHost(s string) error {
	var h hostSet
	return h.addName(s)
}

// addName compiles one sni_hosts entry into h: a hosts entry that is not
// an IP address or prefix.
func (h *hostSet) addName(s string) error {
	if _, err := ParsePrefix(s); err == nil || strings.Contains(s, "/") {
		return fmt.Errorf("%q is an IP address or prefix: a server_name is a host name (\"name\", \"*.suffix\" or \".suffix\")", s)
	}
	return h.add(s)
}

// add compiles one hosts entry into h.
func (h *hostSet) add(s string) error {
	h.set = true
	if p, err := ParsePrefix(s); err == nil {
		h.prefixes = append(h.prefixes, p)
		return nil
	}
	if strings.Contains(s, "/") || strings.Contains(s, ":") {
		return fmt.Errorf("%q is not a host name, *.suffix, .suffix, IP address or CIDR prefix", s)
	}
	name := strings.TrimSuffix(lowerASCII(s), ".")
	var m *map[string]struct{}
	switch {
	case strings.HasPrefix(name, "*."):
		name, m = name[2:], &h.under
	case strings.HasPrefix(name, "."):
		name, m = name[1:], &h.apex
	default:
		m = &h.exact
	}
	if !validName(name) {
		return fmt.Errorf("%q is not a host name, *.suffix, .suffix, IP address or CIDR prefix", s)
	}
	if *m == nil {
		*m = make(map[string]struct{})
	}
	(*m)[name] = struct{}{}
	return nil
}

// lowerASCII lower-cases the ASCII letters of s and nothing else, as
// names are compared on the wire: strings.ToLower would turn a Kelvin sign
// into "k" and let a non-ASCII entry pass validName as an ASCII name.
func lowerASCII(s string) string {
	b := []byte(s)
	lowerASCIIBytes(b)
	return string(b)
}

// lowerASCIIBytes lower-cases the ASCII letters of b in place.
func lowerASCIIBytes(b []byte) {
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
}

// validName reports whether s is a plausible lower-case DNS name: labels
// of letters, digits, '-' and '_', at most 253 characters.
func validName[T string | []byte](s T) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	label := 0
	for i := range len(s) {
		c := s[i]
		switch {
		case c == '.':
			if label == 0 {
				return false
			}
			label = 0
			continue
		case 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_':
		default:
			return false
		}
		if label++; label > 63 {
			return false
		}
	}
	return label > 0
}

// ParsePorts parses a ports entry, "443" or "8000-8999", into the range it
// covers; ports run from 1 to 65535.
func ParsePorts(s string) (lo, hi uint16, err error) {
	a, b, isRange := strings.Cut(s, "-")
	if !isRange {
		b = a
	}
	l, err1 := strconv.ParseUint(a, 10, 16)
	h, err2 := strconv.ParseUint(b, 10, 16)
	if err1 != nil || err2 != nil || l == 0 || h == 0 || l > h {
		return 0, 0, fmt.Errorf("%q is not a port (1-65535) or a range such as \"8000-8999\"", s)
	}
	return uint16(l), uint16(h), nil
}

// ParseMethod checks a methods entry: an HTTP token.
func ParseMethod(s string) error {
	if s == "" {
		return errors.New("empty method")
	}
	for i := range len(s) {
		if !isTokenByte(s[i]) {
			return fmt.Errorf("method %q is not an HTTP token", s)
		}
	}
	return nil
}

func isTokenByte(c byte) bool {
	if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// normalizeHost returns r's host lower-cased, without a trailing dot,
// written into buf (nil when it is an IP literal or too long to match a
// name), and the destination address: r.Addr, or the IP literal.
func normalizeHost(r *Request, buf *[maxName]byte) ([]byte, netip.Addr) {
	addr := r.Addr.Unmap()
	h := r.Host
	if h == "" {
		return nil, addr
	}
	if ip, ok, _ := dialer.ParseHost(h); ok {
		return nil, ip.WithZone("").Unmap()
	}
	if h[len(h)-1] == '.' {
		h = h[:len(h)-1]
	}
	if len(h) > len(buf) {
		return nil, addr
	}
	n := copy(buf[:], h)
	lowerASCIIBytes(buf[:n])
	return buf[:n], addr
}

// match reports whether the rule matches r, whose normalized host name is
// host (nil for an IP literal) and destination address addr.
func (ru *rule) match(r *Request, host []byte, addr netip.Addr) int {
	if ru.protocols != 0 && ru.protocols&r.Protocol == 0 {
		return matchNo
	}
	if (len(ru.clients) > 0 || ru.clientLists != nil) && !ru.matchClient(r.Client.Unmap()) {
		return matchNo
	}
	if !ru.who.Match(r.User, r.Groups) {
		return matchNo
	}
	if len(ru.ports) > 0 {
		ok := false
		for _, pr := range ru.ports {
			if pr.lo <= r.Port && r.Port <= pr.hi {
				ok = true
				break
			}
		}
		if !ok {
			return matchNo
		}
	}
	if len(ru.methods) > 0 {
		ok := false
		for _, m := range ru.methods {
			if m == r.Method {
				ok = true
				break
			}
		}
		if !ok {
			return matchNo
		}
	}
	if len(ru.paths) > 0 && !matchPaths(ru.paths, r.Path) {
		return matchNo
	}
	m := ru.matchHosts(host, addr)
	if m == matchNo || !ru.sniHosts.set {
		return m
	}
	switch {
	case r.HelloRead:
		if !ru.sniHosts.matchSNI(r.SNI) {
			return matchNo
		}
		return m
	case r.Protocol&HelloProtocols != 0:
		return matchSNI // whatever the address: the SNI is decided first
	}
	return matchNo // a request without a ClientHello
}

// matchHosts matches the rule's hosts criterion against the normalized
// host name (nil for an IP literal) and the destination address.
func (ru *rule) matchHosts(host []byte, addr netip.Addr) int {
	if !ru.hosts.set && ru.hostLists == nil {
		return matchYes
	}
	if len(host) > 0 && ru.hosts.matchName(host) {
		return matchYes
	}
	addrs := len(ru.hosts.prefixes) > 0
	for _, l := range ru.hostLists {
		s := l.Set()
		if s == nil {
			if ru.missingMatches() {
				return matchYes
			}
			continue
		}
		if len(host) > 0 && s.matchName(host) {
			return matchYes
		}
		addrs = addrs || s.hasAddrs()
	}
	if !addrs {
		return matchNo
	}
	if addr.IsValid() {
		if ru.matchHostAddr(addr) {
			return matchYes
		}
		return matchNo
	}
	if len(host) > 0 {
		return matchPending
	}
	return matchNo
}

// missingMatches reports whether a list of the rule that never loaded
// matches every request (a deny or report rule: a list not loaded
// never opens the policy) rather than none (an allow rule, a route).
func (ru *rule) missingMatches() bool { return !ru.allow }

// matchClient reports whether the client address a matches the rule's
// clients: an entry, or an entry of a client list.
func (ru *rule) matchClient(a netip.Addr) bool {
	if containsAddr(ru.clients, a) {
		return true
	}
	for _, l := range ru.clientLists {
		s := l.Set()
		if s == nil {
			if ru.missingMatches() {
				return true
			}
			continue
		}
		if a.IsValid() && s.containsAddr(a) {
			return true
		}
	}
	return false
}

// matchHostAddr reports whether the destination address a matches an
// address entry of the rule's hosts or of its loaded host lists.
func (ru *rule) matchHostAddr(a netip.Addr) bool {
	if containsAddr(ru.hosts.prefixes, a) {
		return true
	}
	for _, l := range ru.hostLists {
		if s := l.Set(); s != nil && s.containsAddr(a) {
			return true
		}
	}
	return false
}

// matchSNI reports whether a server name matches a name entry, compared
// as a host name is: without regard to ASCII case. "" matches nothing.
func (h *hostSet) matchSNI(name string) bool {
	var buf [maxName]byte
	if name == "" || len(name) > len(buf) {
		return false
	}
	n := copy(buf[:], name)
	lowerASCIIBytes(buf[:n])
	return h.matchName(buf[:n])
}

// matchName reports whether the normalized name host matches a name entry.
func (h *hostSet) matchName(host []byte) bool {
	if _, ok := h.exact[string(host)]; ok {
		return true
	}
	if _, ok := h.apex[string(host)]; ok {
		return true
	}
	if h.under == nil && h.apex == nil {
		return false
	}
	for i := 0; i < len(host); i++ {
		if host[i] != '.' {
			continue
		}
		suffix := host[i+1:]
		if _, ok := h.under[string(suffix)]; ok {
			return true
		}
		if _, ok := h.apex[string(suffix)]; ok {
			return true
		}
	}
	return false
}

func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
