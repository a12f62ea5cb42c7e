package h2

import (
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/origin"
)

// requestKind says how a request is served.
type requestKind uint8

const (
	kindForward    requestKind = iota // :scheme http: forwarded to an HTTP/1.1 origin
	kindConnect                       // CONNECT: a TCP tunnel (RFC 9113 §8.5)
	kindWebSocket                     // CONNECT with :protocol websocket (RFC 8441)
	kindConnectUDP                    // CONNECT with :protocol connect-udp (RFC 9298): a UDP flow in capsules
	kindLocal                         // not a proxy request: answered by rustle itself
)

// request is a validated HTTP/2 request head (RFC 9113 §8.2, §8.3).
type request struct {
	kind      requestKind
	method    string
	scheme    string
	authority string // :authority, or the host field when :authority is absent
	path      string
	protocol  string // :protocol of an extended CONNECT
	// fields are the regular header fields in their order, names in
	// lower case.
	fields []hpack.HeaderField
	// contentLength is the content-length field's value, -1 when absent.
	contentLength int64
	// proxyAuth is the first proxy-authorization value.
	proxyAuth    string
	hasProxyAuth bool

	// host, port and ipv6 are the parsed authority of a forwarded
	// request or tunnel; host is bare (no brackets) and port is set
	// (80 when a forwarded request's authority has none).
	host string
	port int
	ipv6 bool
	// localReason, for kindLocal, says why rustle answers itself.
	localReason string
	// endStream is set when the HEADERS frame ended the stream: no body.
	endStream bool
}

// protoConnectUDP is the :protocol of a CONNECT-UDP request (RFC 9298 §3).
const protoConnectUDP = "connect-udp"

// errMalformed is the error of a malformed request head, which is a
// stream error of type PROTOCOL_ERROR (RFC 9113 §8.1.1).
type errMalformed string

func (e errMalformed) Error() string { return "h2: malformed request: " + string(e) }

// parseRequest validates the header fields of a request and classifies
// it. connectProtocol says whether extended CONNECT was advertised. self
// is the proxy's own address, to recognise requests to itself. It returns
// an errMalformed for a request that must be reset with PROTOCOL_ERROR.
func parseRequest(fields []hpack.HeaderField, connectProtocol bool, self netip.AddrPort) (request, error) {
	r := request{contentLength: -1}
	var seen [5]bool // :method, :scheme, :authority, :path, :protocol
	regular := false
	host := ""
	hasHost := false
	for _, f := range fields {
		if strings.HasPrefix(f.Name, ":") {
			if regular {
				return r, errMalformed("pseudo-header field after a regular one")
			}
			var k int
			var p *string
			switch f.Name {
			case ":method":
				k, p = 0, &r.method
			case ":scheme":
				k, p = 1, &r.scheme
			case ":authority":
				k, p = 2, &r.authority
			case ":path":
				k, p = 3, &r.path
			case ":protocol":
				k, p = 4, &r.protocol
			default:
				return r, errMalformed("pseudo-header field " + strconv.Quote(f.Name))
			}
			if seen[k] {
				return r, errMalformed("repeated " + f.Name)
			}
			if !httpguts.ValidHeaderFieldValue(f.Value) {
				return r, errMalformed("invalid value of " + f.Name)
			}
			seen[k] = true
			*p = f.Value
			continue
		}
		regular = true
		if !validFieldName(f.Name) {
			return r, errMalformed("invalid field name " + strconv.Quote(f.Name))
		}
		if !httpguts.ValidHeaderFieldValue(f.Value) {
			return r, errMalformed("invalid value of field " + f.Name)
		}
		if origin.ConnectionSpecific(f.Name) {
			return r, errMalformed("connection-specific field " + f.Name)
		}
		switch f.Name {
		case "te":
			if f.Value != "trailers" {
				return r, errMalformed("te other than trailers")
			}
		case "content-length":
			n, ok := parseContentLength(f.Value)
			if !ok || r.contentLength >= 0 && r.contentLength != n {
				return r, errMalformed("invalid content-length")
			}
			r.contentLength = n
		case "host":
			if hasHost && host != f.Value {
				return r, errMalformed("conflicting host fields")
			}
			host, hasHost = f.Value, true
		case "proxy-authorization":
			if !r.hasProxyAuth {
				r.proxyAuth, r.hasProxyAuth = f.Value, true
			}
		}
	}
	r.fields = fields[firstRegular(fields):]

	if !seen[0] || r.method == "" || !validToken(r.method) {
		return r, errMalformed("missing or invalid :method")
	}
	if seen[4] && r.method != "CONNECT" {
		return r, errMalformed(":protocol in a request other than CONNECT")
	}
	if seen[2] && hasHost && r.authority != host {
		return r, errMalformed(":authority and host differ")
	}
	if !seen[2] && hasHost {
		r.authority = host
	}

	switch {
	case r.method == "CONNECT" && !seen[4]:
		// RFC 9113 §8.5: :authority only.
		if seen[1] || seen[3] {
			return r, errMalformed("CONNECT with :scheme or :path")
		}
		if !seen[2] || r.authority == "" {
			return r, errMalformed("CONNECT without :authority")
		}
		r.kind = kindConnect
		var err error
		if r.host, r.port, r.ipv6, err = parseAuthority(r.authority, 0); err != nil {
			return local(r, 400, "invalid CONNECT target "+strconv.Quote(r.authority)), nil
		}
		return r, nil
	case r.method == "CONNECT":
		// RFC 8441 §4: :protocol, :scheme, :path and :authority.
		if !connectProtocol {
			return r, errMalformed(":protocol without SETTINGS_ENABLE_CONNECT_PROTOCOL")
		}
		if !seen[1] || !seen[2] || !seen[3] || r.path == "" || r.authority == "" {
			return r, errMalformed("extended CONNECT without :scheme, :path or :authority")
		}
	default:
		if !seen[1] || !seen[3] || r.path == "" || r.scheme == "" {
			return r, errMalformed("missing :scheme or :path")
		}
	}
	if r.path != "*" && r.path[0] != '/' || r.path == "*" && r.method != "OPTIONS" || !validPath(r.path) {
		return r, errMalformed("invalid :path")
	}

	// A well-formed request: now what can rustle do with it?
	if r.method == "CONNECT" && r.protocol == protoConnectUDP {
		// The target is in :path, which the worker matches against the
		// URI template (see stream.matchUDP).
		r.kind = kindConnectUDP
		return r, nil
	}
	if r.method == "CONNECT" && r.protocol != "websocket" {
		return local(r, 501, "unsupported :protocol "+strconv.Quote(r.protocol)), nil
	}
	if r.scheme != "http" {
		return local(r, 400, "not a proxy request: rustle forwards :scheme http only; use CONNECT for "+strconv.Quote(r.scheme)), nil
	}
	if r.authority == "" {
		return local(r, 400, "not a proxy request: no :authority"), nil
	}
	var err error
	if r.host, r.port, r.ipv6, err = parseAuthority(r.authority, 80); err != nil {
		return local(r, 400, "invalid :authority "+strconv.Quote(r.authority)), nil
	}
	if isSelf(r.host, r.port, self) {
		return local(r, 400, "not a proxy request: the target is rustle itself"), nil
	}
	if r.method == "CONNECT" {
		r.kind = kindWebSocket
	} else {
		r.kind = kindForward
	}
	return r, nil
}

// local marks r as answered by rustle itself.
func local(r request, status int, reason string) request {
	r.kind = kindLocal
	r.localReason = strconv.Itoa(status) + " " + reason
	return r
}

// localStatus returns the status and reason of a kindLocal request.
func (r *request) localStatus() (int, string) {
	status, _ := strconv.Atoi(r.localReason[:3])
	return status, r.localReason[4:]
}

func firstRegular(fields []hpack.HeaderField) int {
	for i, f := range fields {
		if !strings.HasPrefix(f.Name, ":") {
			return i
		}
	}
	return len(fields)
}

// isSelf reports whether host:port is the proxy's own listening address.
func isSelf(host string, port int, local netip.AddrPort) bool {
	if !local.IsValid() || port != int(local.Port()) {
		return false
	}
	a, ok, _ := dialer.ParseHost(host)
	return ok && a.Unmap() == local.Addr().Unmap()
}

// validFieldName reports whether name is a valid HTTP/2 field name: a
// token in lower case (RFC 9113 §8.2.1).
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' || !httpguts.IsTokenRune(rune(c)) {
			return false
		}
	}
	return true
}

// validPath reports whether p can be an HTTP/1.1 request-target: no
// space, control or DEL byte.
func validPath(p string) bool {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

func validToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return s != ""
}

// parseContentLength parses a content-length value: decimal digits only,
// at most 18 of them.
func parseContentLength(s string) (int64, bool) {
	if s == "" || len(s) > 18 {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// parseAuthority splits an authority with the parser every front-end
// shares (gate.ParseAuthority).
func parseAuthority(s string, defPort int) (host string, port int, ipv6 bool, err error) {
	return gate.ParseAuthority(s, defPort)
}
