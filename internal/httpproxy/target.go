package httpproxy

import (
	"bytes"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
)

// Target errors.
var (
	errOriginForm   = http1.NewParseError(400, "origin-form request: rustle is a forward proxy, send absolute-form (http://host/path)")
	errScheme       = http1.NewParseError(400, "unsupported URL scheme (use CONNECT for https)")
	errUserinfo     = http1.NewParseError(400, "userinfo in request target")
	errBadAuthority = http1.NewParseError(400, "malformed host or port in request target")
	errFragment     = http1.NewParseError(400, "fragment in request target")
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
	case len(b) >= 7 && http1.EqualFold(b[:7], "http://"):
		rest = b[7:]
	case len(b) >= 5 && http1.EqualFold(b[:5], "ws://"):
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

// parseAuthority parses host[:port] with the parser every front-end
// shares (gate.ParseAuthority); defPort is used when the port is absent
// (0 means a port is required).
func parseAuthority(a []byte, defPort int, t *target) error {
	host, port, ipv6, err := gate.ParseAuthority(a, defPort)
	switch {
	case err == gate.ErrUserinfo:
		return errUserinfo
	case err != nil:
		return errBadAuthority
	}
	t.authority, t.host, t.port, t.ipv6 = a, host, port, ipv6
	return nil
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
