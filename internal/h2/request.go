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
// is the proxy's own address, to recognise requests to itself. in, when
// not nil, is the intercepted tunnel whose requests the connection
// serves (see classifyIntercepted). It returns an errMalformed for a
// request that must be reset with PROTOCOL_ERROR.
//
// It reads the pseudo-header fields that lead the block, then the
// regular fields behind them, checks that they make the form of request
// their method calls for, and classifies the request.
func parseRequest(fields []hpack.HeaderField, connectProtocol bool, self netip.AddrPort, in *gate.Intercepted) (request, error) {
	r := request{contentLength: -1}
	seen, n, err := r.readPseudo(fields)
	if err != nil {
		return r, err
	}
	host, hasHost, err := r.readRegular(fields[n:])
	if err != nil {
		return r, err
	}
	r.fields = fields[n:]
	if err := r.checkForm(seen, host, hasHost, connectProtocol); err != nil {
		return r, err
	}
	if in != nil {
		return r.classifyIntercepted(in), nil
	}
	return r.classify(seen, self), nil
}

// classifyIntercepted classifies r, a well-formed request inside an
// intercepted tunnel: one for the tunnel's name and port (:scheme https,
// :authority naming them, any case, the port 443 when left out) is
// forwarded to the tunnel's destination; a CONNECT is refused (400), and
// one for another host is misdirected (421).
func (r request) classifyIntercepted(in *gate.Intercepted) request {
	switch {
	case r.method == "CONNECT":
		return local(r, 400, "CONNECT inside an intercepted tunnel: send requests for the tunnel's host")
	case r.scheme != "https":
		return local(r, 400, "not an https request inside an intercepted tunnel")
	}
	host, port, _, err := parseAuthority(r.authority, 443)
	if err != nil || port != int(in.Port) || !strings.EqualFold(strings.TrimSuffix(host, "."), in.Name) {
		return local(r, 421, "misdirected request: this connection serves "+in.Name)
	}
	r.host, r.port, r.kind = in.Host, int(in.Port), kindForward
	return r
}

// pseudoSeen says which pseudo-header fields a request carried.
type pseudoSeen struct {
	method, scheme, authority, path, protocol bool
}

// readPseudo reads into r the pseudo-header fields that lead fields
// (RFC 9113 §8.3): each known one at most once, with a valid value. It
// returns which it saw and where the regular fields begin.
func (r *request) readPseudo(fields []hpack.HeaderField) (seen pseudoSeen, n int, err error) {
	for n < len(fields) && strings.HasPrefix(fields[n].Name, ":") {
		f := fields[n]
		var s *bool
		var p *string
		switch f.Name {
		case ":method":
			s, p = &seen.method, &r.method
		case ":scheme":
			s, p = &seen.scheme, &r.scheme
		case ":authority":
			s, p = &seen.authority, &r.authority
		case ":path":
			s, p = &seen.path, &r.path
		case ":protocol":
			s, p = &seen.protocol, &r.protocol
		default:
			return seen, n, errMalformed("pseudo-header field " + strconv.Quote(f.Name))
		}
		if *s {
			return seen, n, errMalformed("repeated " + f.Name)
		}
		if !httpguts.ValidHeaderFieldValue(f.Value) {
			return seen, n, errMalformed("invalid value of " + f.Name)
		}
		*s, *p = true, f.Value
		n++
	}
	return seen, n, nil
}

// readRegular checks the regular fields behind the pseudo-header ones
// (RFC 9113 §8.2): valid names in lower case and values, none of them
// connection-specific, te only "trailers", one content-length value, host
// fields that agree; it notes in r the content length and the first
// Proxy-Authorization, and returns the host field's value, if any.
func (r *request) readRegular(fields []hpack.HeaderField) (host string, hasHost bool, err error) {
	for _, f := range fields {
		if strings.HasPrefix(f.Name, ":") {
			return host, hasHost, errMalformed("pseudo-header field after a regular one")
		}
		if !validFieldName(f.Name) {
			return host, hasHost, errMalformed("invalid field name " + strconv.Quote(f.Name))
		}
		if !httpguts.ValidHeaderFieldValue(f.Value) {
			return host, hasHost, errMalformed("invalid value of field " + f.Name)
		}
		if origin.ConnectionSpecific(f.Name) {
			return host, hasHost, errMalformed("connection-specific field " + f.Name)
		}
		switch f.Name {
		case "te":
			if f.Value != "trailers" {
				return host, hasHost, errMalformed("te other than trailers")
			}
		case "content-length":
			n, ok := parseContentLength(f.Value)
			if !ok || r.contentLength >= 0 && r.contentLength != n {
				return host, hasHost, errMalformed("invalid content-length")
			}
			r.contentLength = n
		case "host":
			if hasHost && host != f.Value {
				return host, hasHost, errMalformed("conflicting host fields")
			}
			host, hasHost = f.Value, true
		case "proxy-authorization":
			if !r.hasProxyAuth {
				r.proxyAuth, r.hasProxyAuth = f.Value, true
			}
		}
	}
	return host, hasHost, nil
}

// checkForm checks that the pseudo-header fields make the form of
// request r's method calls for: a valid :method; :protocol only in an
// extended CONNECT; :authority as the host field says, or taken from it
// when absent; for a CONNECT (RFC 9113 §8.5) :authority only, for an
// extended CONNECT (RFC 8441 §4) :scheme, :path and :authority, for any
// other request :scheme and :path; and a :path an HTTP/1.1 request-target
// can carry.
func (r *request) checkForm(seen pseudoSeen, host string, hasHost, connectProtocol bool) error {
	if !seen.method || r.method == "" || !validToken(r.method) {
		return errMalformed("missing or invalid :method")
	}
	if seen.protocol && r.method != "CONNECT" {
		return errMalformed(":protocol in a request other than CONNECT")
	}
	if seen.authority && hasHost && r.authority != host {
		return errMalformed(":authority and host differ")
	}
	if !seen.authority && hasHost {
		r.authority = host
	}
	switch {
	case r.method == "CONNECT" && !seen.protocol:
		if seen.scheme || seen.path {
			return errMalformed("CONNECT with :scheme or :path")
		}
		if !seen.authority || r.authority == "" {
			return errMalformed("CONNECT without :authority")
		}
		return nil
	case r.method == "CONNECT":
		if !connectProtocol {
			return errMalformed(":protocol without SETTINGS_ENABLE_CONNECT_PROTOCOL")
		}
		if !seen.scheme || !seen.authority || !seen.path || r.path == "" || r.authority == "" {
			return errMalformed("extended CONNECT without :scheme, :path or :authority")
		}
	default:
		if !seen.scheme || !seen.path || r.path == "" || r.scheme == "" {
			return errMalformed("missing :scheme or :path")
		}
	}
	if r.path != "*" && r.path[0] != '/' || r.path == "*" && r.method != "OPTIONS" || !validPath(r.path) {
		return errMalformed("invalid :path")
	}
	return nil
}

// classify says how rustle serves r, a well-formed request (see
// checkForm): a CONNECT tunnel to its :authority; a CONNECT-UDP flow,
// whose target is in :path, which the worker matches against the URI
// template (see stream.matchUDP); a WebSocket tunnel or a request for an
// origin, to the :authority of :scheme http; or, for anything else, an
// answer of rustle's own (kindLocal).
func (r request) classify(seen pseudoSeen, self netip.AddrPort) request {
	var err error
	switch {
	case r.method == "CONNECT" && !seen.protocol:
		r.kind = kindConnect
		if r.host, r.port, r.ipv6, err = parseAuthority(r.authority, 0); err != nil {
			return local(r, 400, "invalid CONNECT target "+strconv.Quote(r.authority))
		}
		return r
	case r.method == "CONNECT" && r.protocol == protoConnectUDP:
		r.kind = kindConnectUDP
		return r
	case r.method == "CONNECT" && r.protocol != "websocket":
		return local(r, 501, "unsupported :protocol "+strconv.Quote(r.protocol))
	case r.scheme != "http":
		return local(r, 400, "not a proxy request: rustle forwards :scheme http only; use CONNECT for "+strconv.Quote(r.scheme))
	case r.authority == "":
		return local(r, 400, "not a proxy request: no :authority")
	}
	if r.host, r.port, r.ipv6, err = parseAuthority(r.authority, 80); err != nil {
		return local(r, 400, "invalid :authority "+strconv.Quote(r.authority))
	}
	if isSelf(r.host, r.port, self) {
		return local(r, 400, "not a proxy request: the target is rustle itself")
	}
	if r.method == "CONNECT" {
		r.kind = kindWebSocket
	} else {
		r.kind = kindForward
	}
	return r
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
