package gate

import (
	"bytes"
	"errors"
	"net/netip"
	"strconv"

	"github.com/rustle-proxy/rustle/internal/dialer"
)

// Authority errors.
var (
	// ErrAuthority is returned for a malformed host or port.
	ErrAuthority = errors.New("gate: malformed host or port")
	// ErrUserinfo is returned for an authority with userinfo (user@host).
	ErrUserinfo = errors.New("gate: userinfo in authority")
)

// maxName is the longest registered name an authority may carry.
const maxName = 253

// ParseAuthority splits an authority (host[:port], an IPv6 literal in
// brackets) as every front-end reads a request's destination: the host
// without brackets, the port and whether the host is an IPv6 literal.
// defPort is used when the port is absent; 0 means a port is required.
// The host is a registered name of at most 253 bytes (ASCII letters,
// digits, '-', '.', '_'), an IPv4 address in that form (in any spelling
// [dialer.ParseHost] reads; a host that ends in a number but is no
// address is refused), or an IPv6 literal without a zone; the port is 1-65535 in at most five digits.
// host is a subslice of a: nothing is allocated.
func ParseAuthority[T ~string | ~[]byte](a T, defPort int) (host T, port int, ipv6 bool, err error) {
	var rest T
	if len(a) == 0 {
		return host, 0, false, ErrAuthority
	}
	for i := 0; i < len(a); i++ {
		if a[i] == '@' {
			return host, 0, false, ErrUserinfo
		}
	}
	if a[0] == '[' {
		end := -1
		for i := 1; i < len(a); i++ {
			if a[i] == ']' {
				end = i
				break
			}
		}
		if end < 3 {
			return host, 0, false, ErrAuthority
		}
		host, rest = a[1:end], a[end+1:]
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' || c == ':' || c == '.') {
				return host[:0], 0, false, ErrAuthority
			}
		}
		ip, perr := netip.ParseAddr(string(host))
		if perr != nil || !ip.Is6() {
			return host[:0], 0, false, ErrAuthority
		}
		ipv6 = true
	} else {
		end := len(a)
		for i := 0; i < len(a); i++ {
			if a[i] == ':' {
				end = i
				break
			}
		}
		host, rest = a[:end], a[end:]
		if len(host) == 0 || len(host) > maxName {
			return host[:0], 0, false, ErrAuthority
		}
		for i := 0; i < len(host); i++ {
			c := host[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_') {
				return host[:0], 0, false, ErrAuthority
			}
		}
		if _, _, err := dialer.ParseHost(host); err != nil {
			return host[:0], 0, false, ErrAuthority // ends in a number, no address
		}
	}
	switch {
	case len(rest) == 0:
		if defPort == 0 {
			return host[:0], 0, false, ErrAuthority
		}
		port = defPort
	case rest[0] != ':' || len(rest) < 2 || len(rest) > 6:
		return host[:0], 0, false, ErrAuthority
	default:
		for i := 1; i < len(rest); i++ {
			c := rest[i]
			if c < '0' || c > '9' {
				return host[:0], 0, false, ErrAuthority
			}
			port = port*10 + int(c-'0')
		}
		if port == 0 || port > 65535 {
			return host[:0], 0, false, ErrAuthority
		}
	}
	return host, port, ipv6, nil
}

// AppendHostPort appends the dial address and upstream pool key of a
// destination: the host in ASCII lower case (an IPv6 literal in
// brackets, an IPv4 address in any spelling [dialer.ParseHost] reads in
// dotted decimal: "127.1" is "127.0.0.1"), ':', the port. It is the one
// join of a destination's host and port: a grant dials, checks, sends to
// a parent and keys the shared pool with it (see [Grant.AppendDest]), so
// that every front-end shares upstream connections; the front-ends use
// it for the targets their access log shows.
func AppendHostPort[T ~string | ~[]byte](dst []byte, host T, port int, ipv6 bool) []byte {
	dst, _, _ = appendHost(dst, host, ipv6)
	dst = append(dst, ':')
	return strconv.AppendInt(dst, int64(port), 10)
}

// appendHost appends host as AppendHostPort spells it, and returns where
// the host, without brackets, lies in the result.
func appendHost[T ~string | ~[]byte](dst []byte, host T, ipv6 bool) (b []byte, start, end int) {
	if !ipv6 {
		if ip, ok, _ := dialer.ParseHost(host); ok && ip.Is4() {
			start = len(dst)
			dst = ip.AppendTo(dst)
			return dst, start, len(dst)
		}
	}
	if ipv6 {
		dst = append(dst, '[')
	}
	start = len(dst)
	for i := 0; i < len(host); i++ {
		c := host[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	end = len(dst)
	if ipv6 {
		dst = append(dst, ']')
	}
	return dst, start, end
}

// LoggableTarget returns a request target as a log may show it: target
// itself, or nil when its authority carries userinfo (user:password@),
// which is a credential. Only a refused request can carry it: every
// front-end refuses userinfo in a target.
func LoggableTarget(target []byte) []byte {
	a := target
	if i := bytes.Index(a, schemeSep); i >= 0 {
		a = a[i+len(schemeSep):]
	}
	if i := bytes.IndexAny(a, "/?#"); i >= 0 {
		a = a[:i]
	}
	if bytes.IndexByte(a, '@') >= 0 {
		return nil
	}
	return target
}

var schemeSep = []byte("://")
