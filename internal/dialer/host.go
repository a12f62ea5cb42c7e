package dialer

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// ErrNumericHost refuses a host that ends in a number (its last label is
// all decimal digits, or 0x followed by hex digits) but is no IPv4
// address in any spelling ParseHost reads ("1.2.3.256", "1.2.3.4.5",
// "08.1", "example.0x1"): resolvers disagree on what it is, so it is
// neither an address nor a name.
var ErrNumericHost = errors.New("dialer: host ends in a number but is not an IPv4 address")

// ParseHost classifies a destination host (without brackets or port) as
// every path that checks or connects one does: ok reports an IP address,
// ip; ok false with a nil error, a name. An address is what
// netip.ParseAddr accepts, or an IPv4 address in any spelling inet_aton(3)
// accepts: one to four dot-separated parts, each decimal, octal (a
// leading 0) or hexadecimal (0x or 0X, possibly no digit after it: 0),
// every part but the last at most 255 and the last filling the bytes
// left ("127.1", "2130706433", "0x7f000001", "0177.0.0.1",
// "127.000.000.001"), with trailing dots allowed ("127.0.0.1.", as a
// URL parser reads it, or a resolver an absolute name). A host that ends in a number but is no such
// address is refused with ErrNumericHost. It allocates nothing for an
// IPv4 host or a name.
func ParseHost[T ~string | ~[]byte](host T) (ip netip.Addr, ok bool, err error) {
	for i := 0; i < len(host); i++ {
		if host[i] == ':' {
			a, err := netip.ParseAddr(string(host))
			if err != nil {
				return netip.Addr{}, false, nil
			}
			return a, true, nil
		}
	}
	for len(host) > 1 && host[len(host)-1] == '.' {
		host = host[:len(host)-1]
	}
	if !endsInNumber(host) {
		return netip.Addr{}, false, nil
	}
	if a, ok := parseIPv4(host); ok {
		return a, true, nil
	}
	return netip.Addr{}, false, ErrNumericHost
}

// endsInNumber reports whether the last dot-separated label of s is a
// number: decimal digits, or 0x (0X) and hex digits.
func endsInNumber[T ~string | ~[]byte](s T) bool {
	i := len(s)
	for i > 0 && s[i-1] != '.' {
		i--
	}
	last := s[i:]
	if len(last) == 0 {
		return false
	}
	if len(last) >= 2 && last[0] == '0' && (last[1] == 'x' || last[1] == 'X') {
		for j := 2; j < len(last); j++ {
			if HexDigit(last[j]) < 0 {
				return false
			}
		}
		return true
	}
	for j := 0; j < len(last); j++ {
		if c := last[j]; c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// parseIPv4 parses the inet_aton spellings of an IPv4 address (without
// a trailing dot).
func parseIPv4[T ~string | ~[]byte](s T) (netip.Addr, bool) {
	var parts [4]uint64
	n := 0
	start := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			continue
		}
		if n == len(parts) {
			return netip.Addr{}, false
		}
		v, ok := parsePart(s[start:i])
		if !ok {
			return netip.Addr{}, false
		}
		parts[n] = v
		n++
		start = i + 1
	}
	var v uint64
	for i := 0; i < n-1; i++ {
		if parts[i] > 0xff {
			return netip.Addr{}, false
		}
		v = v<<8 | parts[i]
	}
	bits := 8 * uint(5-n) // what the last part fills
	if parts[n-1] >= 1<<bits {
		return netip.Addr{}, false
	}
	v = v<<bits | parts[n-1]
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// parsePart parses one part of an inet_aton address: decimal, octal with
// a leading 0, hexadecimal after 0x; at most 2^32-1.
func parsePart[T ~string | ~[]byte](p T) (uint64, bool) {
	if len(p) == 0 {
		return 0, false
	}
	base, i := uint64(10), 0
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, i = 16, 2
	case len(p) >= 2 && p[0] == '0':
		base, i = 8, 1
	}
	var v uint64
	for ; i < len(p); i++ {
		d := HexDigit(p[i])
		if d < 0 || uint64(d) >= base {
			return 0, false
		}
		v = v*base + uint64(d)
		if v > 0xffffffff {
			return 0, false
		}
	}
	return v, true
}

// HexDigit returns the value of a hex digit, -1 for another byte.
func HexDigit(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'a' <= c && c <= 'f':
		return int(c-'a') + 10
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// SplitHostPort splits addr ("host:port", an IPv6 literal in brackets)
// into its host, without brackets, and its port, a decimal number 0-65535:
// the one splitter of every package that is handed a destination or an
// operator's address as a string (the dialer's entry points, a parent's
// probe target). A malformed addr is net.SplitHostPort's *net.AddrError;
// a port that is no such number is an error naming it. It allocates
// nothing on success: host is a substring of addr.
func SplitHostPort(addr string) (host string, port uint16, err error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("bad port %q", portStr)
	}
	return host, uint16(n), nil
}
