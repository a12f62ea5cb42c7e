package dialer

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
)

// ErrNoSource is wrapped by the [*Error] of a dial whose destination has
// no address of a family the egress configuration has a source address
// for (an IPv6-only destination with only IPv4 bind addresses, or a
// bind_same listener reached over the other family). It is answered 502:
// rustle never falls back to another source address.
var ErrNoSource = errors.New("dialer: no source address of the destination's family")

// SourceConfig is an egress configuration: where upstream connections
// come from.
type SourceConfig struct {
	// Bind lists source addresses ("203.0.113.7", "2001:db8::7") and
	// prefixes ("2001:db8:1::/64"), IPv4 and IPv6 alike. A connection
	// takes one of its destination's family: an address, or a fresh
	// address in a prefix for each connection (for each session key
	// when the dial has one). Several of a family are taken in turn (by
	// the session key's hash, with one). Empty means the kernel's
	// choice, or BindSame's.
	Bind []string
	// Interface binds upstream sockets to a network interface
	// (SO_BINDTODEVICE, Linux only); "" means none.
	Interface string
	// BindSame makes each connection come from the address its client
	// connected to (the dial's Reached address), of its family only;
	// it excludes Bind.
	BindSame bool
	// Freebind sets IP_FREEBIND (IPV6_FREEBIND) so that Bind addresses
	// need not be configured on the host (Linux only). Addresses taken
	// from a prefix always get it.
	Freebind bool
}

// Source chooses the source address of upstream connections; make it
// with NewSource. It is safe for concurrent use.
type Source struct {
	addrs    [2][]netip.Addr   // by family: 0 IPv4, 1 IPv6
	prefixes [2][]netip.Prefix // by family
	device   string
	same     bool
	freebind bool
	next     atomic.Uint64 // turn of the addresses and prefixes without a key
}

// NewSource parses cfg. It does not look at the host: see
// [Source.Missing].
func NewSource(cfg SourceConfig) (*Source, error) {
	s := &Source{device: cfg.Interface, same: cfg.BindSame, freebind: cfg.Freebind}
	if cfg.BindSame && len(cfg.Bind) > 0 {
		return nil, errors.New("dialer: bind_same and bind exclude each other")
	}
	for i, b := range cfg.Bind {
		if strings.Contains(b, "/") {
			p, err := netip.ParsePrefix(b)
			if err != nil {
				return nil, &BindError{Index: i, Err: fmt.Errorf("%q is not an address or a CIDR prefix", b)}
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p.Addr()))
			if p.Addr().Zone() != "" {
				return nil, &BindError{Index: i, Err: fmt.Errorf("%q: a prefix has no zone", b)}
			}
			host := p.Addr().BitLen() - p.Bits()
			if host < 2 {
				return nil, &BindError{Index: i, Err: fmt.Errorf("%q leaves fewer than 2 host bits: list the address instead", b)}
			}
			if !freebindSupported {
				return nil, &BindError{Index: i, Err: errPlatform("a source prefix (IP_FREEBIND)")}
			}
			s.prefixes[famIndex(p.Addr())] = append(s.prefixes[famIndex(p.Addr())], p.Masked())
			continue
		}
		a, err := netip.ParseAddr(b)
		if err != nil {
			return nil, &BindError{Index: i, Err: fmt.Errorf("%q is not an address or a CIDR prefix", b)}
		}
		a = a.Unmap()
		if a.IsUnspecified() || a.IsMulticast() {
			return nil, &BindError{Index: i, Err: fmt.Errorf("%q cannot be a source address", b)}
		}
		s.addrs[famIndex(a)] = append(s.addrs[famIndex(a)], a)
	}
	if cfg.Interface != "" && !deviceSupported {
		return nil, errPlatform("interface (SO_BINDTODEVICE)")
	}
	if cfg.Freebind && !freebindSupported {
		return nil, errPlatform("freebind (IP_FREEBIND)")
	}
	return s, nil
}

func errPlatform(what string) error {
	return fmt.Errorf("dialer: %s is only supported on Linux", what)
}

// unmapBits is 96 for an IPv4-mapped address, whose prefix length counts
// the mapping.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

// BindError is a bad entry of SourceConfig.Bind.
type BindError struct {
	// Index is the entry's index in Bind.
	Index int
	Err   error
}

func (e *BindError) Error() string { return "dialer: bind: " + e.Err.Error() }
func (e *BindError) Unwrap() error { return e.Err }

// Missing returns the index in Bind of the first address that is not
// configured on any of the host's interfaces (nor loopback), -1 when
// every one is or Freebind is set; err when the interfaces cannot be
// listed. Prefixes are not checked: their addresses come from freebind
// sockets (and need a local route for the answers: see the operations
// guide).
func (s *Source) Missing(bind []string) (int, error) {
	if s.freebind {
		return -1, nil
	}
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return -1, fmt.Errorf("dialer: list interface addresses: %w", err)
	}
	local := make(map[netip.Addr]bool)
	for _, ifa := range ifas {
		if ipn, ok := ifa.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				local[ip.Unmap()] = true
			}
		}
	}
	for i, b := range bind {
		if strings.Contains(b, "/") {
			continue
		}
		if a, err := netip.ParseAddr(b); err == nil && !local[a.Unmap().WithZone("")] {
			return i, nil
		}
	}
	return -1, nil
}

func famIndex(a netip.Addr) int {
	if a.Is4() {
		return 0
	}
	return 1
}

// Restricts reports whether s chooses the source address (bind or
// bind_same, which also limit the destination's family); a nil Source,
// or one with only an Interface, does not.
func (s *Source) Restricts() bool {
	return s != nil && (s.same || len(s.addrs[0])+len(s.addrs[1])+len(s.prefixes[0])+len(s.prefixes[1]) > 0)
}

// serves reports whether s has a source address for destinations of the
// family of dst, for a dial that reached the proxy at reached.
func (s *Source) serves(dst, reached netip.Addr) bool {
	if !s.Restricts() {
		return true
	}
	if s.same {
		return reached.IsValid() && reached.Unmap().Is4() == dst.Is4()
	}
	f := famIndex(dst)
	return len(s.addrs[f])+len(s.prefixes[f]) > 0
}

// pick returns the source address of a connection to dst (of a family s
// serves), and whether it needs freebind: for key ("" = a connection of
// its own) and reached (the address the client connected to). The zero
// Addr leaves the choice to the kernel.
func (s *Source) pick(dst netip.Addr, key string, reached netip.Addr) (netip.Addr, bool) {
	if s.same {
		return reached.Unmap().WithZone(""), false
	}
	f := famIndex(dst)
	addrs, prefixes := s.addrs[f], s.prefixes[f]
	n := len(addrs) + len(prefixes)
	if n == 0 {
		return netip.Addr{}, false
	}
	var h [32]byte
	var turn uint64
	if key != "" {
		h = sha256.Sum256([]byte(key))
		turn = binary.BigEndian.Uint64(h[:8])
	} else if n > 1 {
		turn = s.next.Add(1)
	}
	i := int(turn % uint64(n))
	if i < len(addrs) {
		return addrs[i], s.freebind
	}
	p := prefixes[i-len(addrs)]
	if key == "" {
		binary.BigEndian.PutUint64(h[16:], rand.Uint64())
		binary.BigEndian.PutUint64(h[24:], rand.Uint64())
	}
	return inPrefix(p, h[16:]), true
}

// inPrefix returns the address of p whose host bits are taken from bits,
// never the prefix's all-zeros address (the subnet-router anycast
// address in IPv6, the network in IPv4) nor IPv4's all-ones broadcast.
func inPrefix(p netip.Prefix, bits []byte) netip.Addr {
	base := p.Addr().AsSlice()
	out := make([]byte, len(base))
	for i := range out {
		keep := byte(0)
		switch bit := p.Bits() - 8*i; {
		case bit >= 8:
			keep = 0xff
		case bit > 0:
			keep = byte(0xff << (8 - bit))
		}
		out[i] = base[i]&keep | bits[i]&^keep
	}
	if a, _ := netip.AddrFromSlice(out); a == p.Addr() {
		out[len(out)-1] |= 1
	} else if a.Is4() && allOnesHost(out, p.Bits()) {
		out[len(out)-1] &^= 1
	}
	a, _ := netip.AddrFromSlice(out)
	return a
}

// allOnesHost reports whether every host bit after the first bits of b
// is set.
func allOnesHost(b []byte, bits int) bool {
	for i := bits; i < 8*len(b); i++ {
		if b[i/8]&(0x80>>(i%8)) == 0 {
			return false
		}
	}
	return true
}

// Owns reports whether local, the source address of a connection to dst
// made earlier (a pooled one), is one s would choose for a dial with key
// and reached: the session's address for a key, any of its addresses or
// prefixes of the family without one, the reached address for
// bind_same. A Source that does not restrict the address owns every
// connection. The interface a connection is bound to is not checked.
func (s *Source) Owns(local, dst netip.Addr, key string, reached netip.Addr) bool {
	if s == nil || !s.Restricts() {
		return true
	}
	local, dst = local.Unmap().WithZone(""), dst.Unmap()
	if !s.serves(dst, reached) || local.Is4() != dst.Is4() {
		return false
	}
	if s.same {
		return local == reached.Unmap().WithZone("")
	}
	f := famIndex(dst)
	if key != "" {
		want, _ := s.pick(dst, key, reached)
		return local == want
	}
	for _, a := range s.addrs[f] {
		if a == local {
			return true
		}
	}
	for _, p := range s.prefixes[f] {
		if p.Contains(local) {
			return true
		}
	}
	return false
}
