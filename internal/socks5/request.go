package socks5

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/rustle-proxy/rustle/internal/dialer"
)

// Protocol constants of RFC 1928 and RFC 1929.
const (
	version5 = 0x05

	methodNoAuth       = 0x00
	methodUserPass     = 0x02
	methodNoAcceptable = 0xFF

	userPassVersion = 0x01
	userPassOK      = 0x00
	userPassFailure = 0x01

	cmdConnect   = 0x01
	cmdBind      = 0x02
	cmdAssociate = 0x03

	atypIPv4   = 0x01
	atypDomain = 0x03
	atypIPv6   = 0x04
)

// Reply codes (the REP field) of RFC 1928 section 6 that rustle sends.
const (
	repSucceeded          = 0x00
	repGeneralFailure     = 0x01
	repNotAllowed         = 0x02 // refused by the access policy, the private-destination guard or a limit
	repNetUnreachable     = 0x03
	repHostUnreachable    = 0x04
	repConnRefused        = 0x05
	repTTLExpired         = 0x06
	repCmdNotSupported    = 0x07
	repAddrTypeNotSupport = 0x08
)

// maxHostLen is the longest host name accepted: a DNS name has at most 253
// characters, 254 with a trailing dot.
const maxHostLen = 254

// Parse errors. errShort is not a failure: the message needs more bytes.
var (
	errShort        = errors.New("socks5: message incomplete")
	errVersion      = errors.New("socks5: unsupported protocol version")
	errAuthVersion  = errors.New("socks5: unsupported username/password sub-negotiation version")
	errAddrType     = errors.New("socks5: unsupported address type")
	errBadHost      = errors.New("socks5: destination is not a valid host name")
	errUnspecified  = errors.New("socks5: destination address is unspecified")
	errUserIDTooBig = errors.New("socks5: socks4 user id or host name too long")
)

// addr is a destination: an IP address or a host name, and a port.
type addr struct {
	ip   netip.Addr // the address; invalid when host is set
	host string     // a valid host name (see validHost); "" when ip is set
	port uint16
}

// String returns addr as host:port, an IPv6 address in brackets, for
// dialing and for logs.
func (a addr) String() string {
	if a.host != "" {
		return net.JoinHostPort(a.host, strconv.Itoa(int(a.port)))
	}
	return netip.AddrPortFrom(a.ip, a.port).String()
}

// greeting is a client's method-selection message.
type greeting struct {
	methods []byte // METHODS; aliases the parsed buffer
}

// parseGreeting parses a method-selection message: VER NMETHODS METHODS.
// It returns errShort while b holds only a prefix of one, errVersion when
// VER is not 5. NMETHODS may be 0, which selects no method.
func parseGreeting(b []byte) (greeting, int, error) {
	if len(b) < 1 {
		return greeting{}, 0, errShort
	}
	if b[0] != version5 {
		return greeting{}, 0, errVersion
	}
	if len(b) < 2 {
		return greeting{}, 0, errShort
	}
	n := 2 + int(b[1])
	if len(b) < n {
		return greeting{}, 0, errShort
	}
	return greeting{methods: b[2:n]}, n, nil
}

// userPass is an RFC 1929 username/password request.
type userPass struct {
	user, pass []byte // alias the parsed buffer
}

// parseUserPass parses an RFC 1929 request: VER ULEN UNAME PLEN PASSWD. It
// returns errShort while b holds only a prefix of one and errAuthVersion
// when VER is not 1. Lengths of 0 are accepted here and refused by the
// authenticator.
func parseUserPass(b []byte) (userPass, int, error) {
	if len(b) < 1 {
		return userPass{}, 0, errShort
	}
	if b[0] != userPassVersion {
		return userPass{}, 0, errAuthVersion
	}
	if len(b) < 2 {
		return userPass{}, 0, errShort
	}
	ulen := int(b[1])
	if len(b) < 2+ulen+1 {
		return userPass{}, 0, errShort
	}
	plen := int(b[2+ulen])
	n := 3 + ulen + plen
	if len(b) < n {
		return userPass{}, 0, errShort
	}
	return userPass{user: b[2 : 2+ulen], pass: b[3+ulen : n]}, n, nil
}

// request is a SOCKS5 request.
type request struct {
	cmd byte
	dst addr
}

// parseRequest parses a SOCKS5 request: VER CMD RSV ATYP DST.ADDR DST.PORT.
// It returns errShort while b holds only a prefix of one, errVersion when
// VER is not 5 and errAddrType for an unknown ATYP; the command is not
// checked, and RSV is ignored. A request whose address is not usable
// (errBadHost, errUnspecified) is returned whole, with its length, along
// with the error, so that the caller can answer it.
func parseRequest(b []byte) (request, int, error) {
	if len(b) < 1 {
		return request{}, 0, errShort
	}
	if b[0] != version5 {
		return request{}, 0, errVersion
	}
	if len(b) < 3 {
		return request{}, 0, errShort
	}
	dst, n, err := parseAddr(b[3:])
	if err == errShort || err == errAddrType {
		return request{}, 0, err
	}
	return request{cmd: b[1], dst: dst}, 3 + n, err
}

// parseAddr parses ATYP DST.ADDR DST.PORT, the address form shared by
// requests, replies and UDP headers. It returns errShort while b holds
// only a prefix of one and errAddrType for an unknown ATYP. A domain that
// is an IP address in text form is returned as that address. For a domain
// that is not a valid host name it returns errBadHost, and for the
// unspecified address (0.0.0.0 or ::) errUnspecified, each with the
// address's length and what was parsed.
func parseAddr(b []byte) (addr, int, error) {
	if len(b) < 1 {
		return addr{}, 0, errShort
	}
	var a addr
	var n int
	switch b[0] {
	case atypIPv4:
		n = 1 + 4 + 2
		if len(b) < n {
			return addr{}, 0, errShort
		}
		a.ip = netip.AddrFrom4([4]byte(b[1:5]))
	case atypIPv6:
		n = 1 + 16 + 2
		if len(b) < n {
			return addr{}, 0, errShort
		}
		a.ip = netip.AddrFrom16([16]byte(b[1:17])).Unmap()
	case atypDomain:
		if len(b) < 2 {
			return addr{}, 0, errShort
		}
		n = 2 + int(b[1]) + 2
		if len(b) < n {
			return addr{}, 0, errShort
		}
		ip, host, err := parseHost(b[2 : n-2])
		if err != nil {
			return addr{port: binary.BigEndian.Uint16(b[n-2:])}, n, err
		}
		a.ip, a.host = ip, host
	default:
		return addr{}, 0, errAddrType
	}
	a.port = binary.BigEndian.Uint16(b[n-2:])
	if a.ip.IsValid() && a.ip.IsUnspecified() {
		return a, n, errUnspecified
	}
	return a, n, nil
}

// parseHost turns a domain from a request into an IP address, when it is
// one in text form (an IPv4 address in any spelling [dialer.ParseHost]
// reads, an IPv6 address possibly in brackets, never with a zone), or a
// host name. It returns errBadHost when it is neither.
func parseHost(b []byte) (netip.Addr, string, error) {
	s := string(b)
	ip, ok, err := dialer.ParseHost(s)
	if err != nil {
		return netip.Addr{}, "", errBadHost // ends in a number, no address
	}
	if ok && ip.Zone() == "" {
		return ip.Unmap(), "", nil
	}
	if len(s) > 2 && s[0] == '[' && s[len(s)-1] == ']' {
		if ip, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil && ip.Is6() && ip.Zone() == "" {
			return ip.Unmap(), "", nil
		}
	}
	if !validHost(s) {
		return netip.Addr{}, "", errBadHost
	}
	return netip.Addr{}, s, nil
}

// validHost reports whether s is a host name rustle will look up: at most
// maxHostLen bytes of dot-separated labels of 1 to 63 letters, digits, '-'
// and '_', with an optional trailing dot.
func validHost(s string) bool {
	if s == "" || len(s) > maxHostLen || (len(s) == maxHostLen && s[len(s)-1] != '.') {
		return false
	}
	s = strings.TrimSuffix(s, ".")
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// appendAddrPort appends ap as ATYP BND.ADDR BND.PORT, an IPv4-mapped
// address as IPv4 and an invalid one as 0.0.0.0:0.
func appendAddrPort(b []byte, ap netip.AddrPort) []byte {
	ip := ap.Addr().Unmap()
	switch {
	case ip.Is4():
		a4 := ip.As4()
		b = append(b, atypIPv4)
		b = append(b, a4[:]...)
	case ip.Is6():
		b = append(b, atypIPv6)
		a16 := ip.As16()
		b = append(b, a16[:]...)
	default:
		return append(b, atypIPv4, 0, 0, 0, 0, 0, 0)
	}
	return binary.BigEndian.AppendUint16(b, ap.Port())
}

// appendReply appends a SOCKS5 reply: VER REP RSV ATYP BND.ADDR BND.PORT.
func appendReply(b []byte, rep byte, bnd netip.AddrPort) []byte {
	b = append(b, version5, rep, 0)
	return appendAddrPort(b, bnd)
}
