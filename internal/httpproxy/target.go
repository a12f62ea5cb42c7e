package httpproxy

import "bytes"

// Target errors.
var (
	errOriginForm   = perr(400, "origin-form request: rustle is a forward proxy, send absolute-form (http://host/path)")
	errScheme       = perr(400, "unsupported URL scheme (use CONNECT for https)")
	errUserinfo     = perr(400, "userinfo in request target")
	errBadAuthority = perr(400, "malformed host or port in request target")
	errFragment     = perr(400, "fragment in request target")
)

// target is a parsed request target: the upstream to reach and the path
// to send it. Byte slices point into the head buffer.
type target struct {
	// authority is host[:port] as the client wrote it; it becomes the
	// Host header.
	authority []byte
	// host is the host without brackets; an IPv6 literal is bare.
	host []byte
	port int
	ipv6 bool
	// path is the origin-form path and query ("/" when the URL had none).
	path []byte
}

// parseAbsoluteTarget parses an absolute-form request target
// (http://authority/path?query, or ws:// for a WebSocket handshake).
func parseAbsoluteTarget(b []byte, t *target) error {
	if len(b) > 0 && (b[0] == '/' || b[0] == '*') {
		return errOriginForm
	}
	var rest []byte
	switch {
	case len(b) >= 7 && equalFold(b[:7], "http://"):
		rest = b[7:]
	case len(b) >= 5 && equalFold(b[:5], "ws://"):
		// A WebSocket URL: the handshake is an HTTP request.
		rest = b[5:]
	default:
		return errScheme
	}
	end := len(rest)
	for i, c := range rest {
		if c == '/' || c == '?' || c == '#' {
			end = i
			break
		}
	}
	if bytes.IndexByte(rest, '#') >= 0 {
		return errFragment
	}
	if err := parseAuthority(rest[:end], 80, t); err != nil {
		return err
	}
	t.path = rest[end:]
	if len(t.path) == 0 {
		t.path = slash
	}
	// "http://h?q" has an empty path: its origin-form is "/?q", and the
	// forwarder writes the slash in front.
	return nil
}

var slash = []byte("/")

// parseAuthorityForm parses a CONNECT target: host:port, port required.
func parseAuthorityForm(b []byte, t *target) error {
	if err := parseAuthority(b, 0, t); err != nil {
		return err
	}
	if t.port == 0 {
		return errBadAuthority
	}
	t.path = nil
	return nil
}

// parseAuthority parses host[:port]; defPort is used when the port is
// absent (0 means a port is required, checked by the caller).
func parseAuthority(a []byte, defPort int, t *target) error {
	if bytes.IndexByte(a, '@') >= 0 {
		return errUserinfo
	}
	if len(a) == 0 {
		return errBadAuthority
	}
	t.authority = a
	t.ipv6 = false
	var hostPart, portPart []byte
	if a[0] == '[' {
		rb := bytes.IndexByte(a, ']')
		if rb < 0 {
			return errBadAuthority
		}
		hostPart = a[1:rb]
		rest := a[rb+1:]
		if len(rest) > 0 {
			if rest[0] != ':' {
				return errBadAuthority
			}
			portPart = rest[1:]
			if len(portPart) == 0 {
				return errBadAuthority
			}
		}
		if len(hostPart) < 2 {
			return errBadAuthority
		}
		for _, c := range hostPart {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' || c == ':' || c == '.') {
				return errBadAuthority
			}
		}
		t.ipv6 = true
	} else {
		colon := bytes.IndexByte(a, ':')
		if colon >= 0 {
			hostPart, portPart = a[:colon], a[colon+1:]
			if len(portPart) == 0 {
				return errBadAuthority
			}
		} else {
			hostPart = a
		}
		if len(hostPart) == 0 || len(hostPart) > 253 {
			return errBadAuthority
		}
		for _, c := range hostPart {
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '-' || c == '.' || c == '_') {
				return errBadAuthority
			}
		}
	}
	t.host = hostPart
	t.port = defPort
	if portPart != nil {
		if len(portPart) > 5 {
			return errBadAuthority
		}
		p := 0
		for _, c := range portPart {
			if c < '0' || c > '9' {
				return errBadAuthority
			}
			p = p*10 + int(c-'0')
		}
		if p == 0 || p > 65535 {
			return errBadAuthority
		}
		t.port = p
	}
	return nil
}

// appendHostPort appends the dial address of t ("host:port", IPv6 in
// brackets), lower-cased so that it can key the upstream pool.
func appendHostPort(dst []byte, t *target) []byte {
	if t.ipv6 {
		dst = append(dst, '[')
	}
	for _, c := range t.host {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		dst = append(dst, c)
	}
	if t.ipv6 {
		dst = append(dst, ']')
	}
	dst = append(dst, ':')
	return appendInt(dst, int64(t.port))
}

func appendInt(dst []byte, n int64) []byte {
	if n == 0 {
		return append(dst, '0')
	}
	var tmp [20]byte
	i := len(tmp)
	for n > 0 {
		i--
		tmp[i] = byte('0' + n%10)
		n /= 10
	}
	return append(dst, tmp[i:]...)
}
