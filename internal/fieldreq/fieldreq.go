// Package fieldreq validates and classifies a request head as HTTP/2 and
// HTTP/3 carry it: a list of header fields, pseudo-header fields first
// (RFC 9113 §8.2, §8.3; RFC 9114 §4.2, §4.3, which repeat HTTP/2's
// rules). Both front-ends (internal/h2, internal/h3) decode their header
// blocks into hpack.HeaderField lists and call Parse.
package fieldreq

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

// Kind says how a request is served.
type Kind uint8

const (
	Forward    Kind = iota // :scheme http: forwarded to an HTTP/1.1 origin
	Connect                // CONNECT: a TCP tunnel (RFC 9113 §8.5, RFC 9114 §4.4)
	WebSocket              // CONNECT with :protocol websocket (RFC 8441, RFC 9220)
	ConnectUDP             // CONNECT with :protocol connect-udp (RFC 9298)
	Local                  // not a proxy request: answered by rustle itself
)

// ProtoConnectUDP is the :protocol of a CONNECT-UDP request (RFC 9298 §3).
const ProtoConnectUDP = "connect-udp"

// Request is a validated request head.
type Request struct {
	Kind      Kind
	Method    string
	Scheme    string
	Authority string // :authority, or the host field when :authority is absent
	Path      string
	Protocol  string // :protocol of an extended CONNECT
	// Fields are the regular header fields in their order, names in
	// lower case.
	Fields []hpack.HeaderField
	// ContentLength is the content-length field's value, -1 when absent.
	ContentLength int64
	// ProxyAuth is the first proxy-authorization value.
	ProxyAuth    string
	HasProxyAuth bool

	// Host, Port and IPv6 are the parsed authority of a forwarded
	// request or tunnel; Host is bare (no brackets) and Port is set (80
	// when a forwarded request's authority has none).
	Host string
	Port int
	IPv6 bool
	// LocalReason, for Local, is the status rustle answers with and why:
	// "400 invalid :authority ..." (see LocalStatus).
	LocalReason string
}

// ErrMalformed is the error of a malformed request head: a stream error
// (PROTOCOL_ERROR in HTTP/2, RFC 9113 §8.1.1; H3_MESSAGE_ERROR in HTTP/3,
// RFC 9114 §4.1.2).
type ErrMalformed string

func (e ErrMalformed) Error() string { return "malformed request: " + string(e) }

// Parse validates the header fields of a request and classifies it.
// connectProtocol says whether extended CONNECT was advertised. self is
// the proxy's own address, to recognise requests to itself. It returns
// an ErrMalformed for a request that must be reset.
//
// It reads the pseudo-header fields that lead the list, then the regular
// fields behind them, checks that they make the form of request their
// method calls for, and classifies the request.
func Parse(fields []hpack.HeaderField, connectProtocol bool, self netip.AddrPort) (Request, error) {
	r := Request{ContentLength: -1}
	seen, n, err := r.readPseudo(fields)
	if err != nil {
		return r, err
	}
	host, hasHost, err := r.readRegular(fields[n:])
	if err != nil {
		return r, err
	}
	r.Fields = fields[n:]
	if err := r.checkForm(seen, host, hasHost, connectProtocol); err != nil {
		return r, err
	}
	return r.classify(seen, self), nil
}

// pseudoSeen says which pseudo-header fields a request carried.
type pseudoSeen struct {
	method, scheme, authority, path, protocol bool
}

// readPseudo reads into r the pseudo-header fields that lead fields
// (RFC 9113 §8.3): each known one at most once, with a valid value. It
// returns which it saw and where the regular fields begin.
func (r *Request) readPseudo(fields []hpack.HeaderField) (seen pseudoSeen, n int, err error) {
	for n < len(fields) && strings.HasPrefix(fields[n].Name, ":") {
		f := fields[n]
		var s *bool
		var p *string
		switch f.Name {
		case ":method":
			s, p = &seen.method, &r.Method
		case ":scheme":
			s, p = &seen.scheme, &r.Scheme
		case ":authority":
			s, p = &seen.authority, &r.Authority
		case ":path":
			s, p = &seen.path, &r.Path
		case ":protocol":
			s, p = &seen.protocol, &r.Protocol
		default:
			return seen, n, ErrMalformed("pseudo-header field " + strconv.Quote(f.Name))
		}
		if *s {
			return seen, n, ErrMalformed("repeated " + f.Name)
		}
		if !httpguts.ValidHeaderFieldValue(f.Value) {
			return seen, n, ErrMalformed("invalid value of " + f.Name)
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
func (r *Request) readRegular(fields []hpack.HeaderField) (host string, hasHost bool, err error) {
	for _, f := range fields {
		if strings.HasPrefix(f.Name, ":") {
			return host, hasHost, ErrMalformed("pseudo-header field after a regular one")
		}
		if !ValidFieldName(f.Name) {
			return host, hasHost, ErrMalformed("invalid field name " + strconv.Quote(f.Name))
		}
		if !httpguts.ValidHeaderFieldValue(f.Value) {
			return host, hasHost, ErrMalformed("invalid value of field " + f.Name)
		}
		if origin.ConnectionSpecific(f.Name) {
			return host, hasHost, ErrMalformed("connection-specific field " + f.Name)
		}
		switch f.Name {
		case "te":
			if f.Value != "trailers" {
				return host, hasHost, ErrMalformed("te other than trailers")
			}
		case "content-length":
			n, ok := ParseContentLength(f.Value)
			if !ok || r.ContentLength >= 0 && r.ContentLength != n {
				return host, hasHost, ErrMalformed("invalid content-length")
			}
			r.ContentLength = n
		case "host":
			if hasHost && host != f.Value {
				return host, hasHost, ErrMalformed("conflicting host fields")
			}
			host, hasHost = f.Value, true
		case "proxy-authorization":
			if !r.HasProxyAuth {
				r.ProxyAuth, r.HasProxyAuth = f.Value, true
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
func (r *Request) checkForm(seen pseudoSeen, host string, hasHost, connectProtocol bool) error {
	if !seen.method || r.Method == "" || !ValidToken(r.Method) {
		return ErrMalformed("missing or invalid :method")
	}
	if seen.protocol && r.Method != "CONNECT" {
		return ErrMalformed(":protocol in a request other than CONNECT")
	}
	if seen.authority && hasHost && r.Authority != host {
		return ErrMalformed(":authority and host differ")
	}
	if !seen.authority && hasHost {
		r.Authority = host
	}
	switch {
	case r.Method == "CONNECT" && !seen.protocol:
		if seen.scheme || seen.path {
			return ErrMalformed("CONNECT with :scheme or :path")
		}
		if !seen.authority || r.Authority == "" {
			return ErrMalformed("CONNECT without :authority")
		}
		return nil
	case r.Method == "CONNECT":
		if !connectProtocol {
			return ErrMalformed(":protocol without SETTINGS_ENABLE_CONNECT_PROTOCOL")
		}
		if !seen.scheme || !seen.authority || !seen.path || r.Path == "" || r.Authority == "" {
			return ErrMalformed("extended CONNECT without :scheme, :path or :authority")
		}
	default:
		if !seen.scheme || !seen.path || r.Path == "" || r.Scheme == "" {
			return ErrMalformed("missing :scheme or :path")
		}
	}
	if r.Path != "*" && r.Path[0] != '/' || r.Path == "*" && r.Method != "OPTIONS" || !ValidPath(r.Path) {
		return ErrMalformed("invalid :path")
	}
	return nil
}

// classify says how rustle serves r, a well-formed request (see
// checkForm): a CONNECT tunnel to its :authority; a CONNECT-UDP flow,
// whose target is in :path, which the front-end matches against the URI
// template; a WebSocket tunnel or a request for an origin, to the
// :authority of :scheme http; or, for anything else, an answer of
// rustle's own (Local).
func (r Request) classify(seen pseudoSeen, self netip.AddrPort) Request {
	var err error
	switch {
	case r.Method == "CONNECT" && !seen.protocol:
		r.Kind = Connect
		if r.Host, r.Port, r.IPv6, err = gate.ParseAuthority(r.Authority, 0); err != nil {
			return r.Answer(400, "invalid CONNECT target "+strconv.Quote(r.Authority))
		}
		return r
	case r.Method == "CONNECT" && r.Protocol == ProtoConnectUDP:
		r.Kind = ConnectUDP
		return r
	case r.Method == "CONNECT" && r.Protocol != "websocket":
		return r.Answer(501, "unsupported :protocol "+strconv.Quote(r.Protocol))
	case r.Scheme != "http":
		return r.Answer(400, "not a proxy request: rustle forwards :scheme http only; use CONNECT for "+strconv.Quote(r.Scheme))
	case r.Authority == "":
		return r.Answer(400, "not a proxy request: no :authority")
	}
	if r.Host, r.Port, r.IPv6, err = gate.ParseAuthority(r.Authority, 80); err != nil {
		return r.Answer(400, "invalid :authority "+strconv.Quote(r.Authority))
	}
	if IsSelf(r.Host, r.Port, self) {
		return r.Answer(400, "not a proxy request: the target is rustle itself")
	}
	if r.Method == "CONNECT" {
		r.Kind = WebSocket
	} else {
		r.Kind = Forward
	}
	return r
}

// Answer returns r marked as answered by rustle itself with status and
// reason.
func (r Request) Answer(status int, reason string) Request {
	r.Kind = Local
	r.LocalReason = LocalReason(status, reason)
	return r
}

// LocalStatus returns the status and reason of a Local request.
func (r *Request) LocalStatus() (int, string) { return SplitLocalReason(r.LocalReason) }

// LocalReason joins an answer's status (three digits) and reason as
// Request.LocalReason holds them.
func LocalReason(status int, reason string) string { return strconv.Itoa(status) + " " + reason }

// SplitLocalReason splits what LocalReason joined.
func SplitLocalReason(s string) (status int, reason string) {
	status, _ = strconv.Atoi(s[:3])
	return status, s[4:]
}

// FirstRegular returns the index of the first regular (not pseudo-header)
// field of fields.
func FirstRegular(fields []hpack.HeaderField) int {
	for i, f := range fields {
		if !strings.HasPrefix(f.Name, ":") {
			return i
		}
	}
	return len(fields)
}

// IsSelf reports whether host:port is the proxy's own listening address.
func IsSelf(host string, port int, local netip.AddrPort) bool {
	if !local.IsValid() || port != int(local.Port()) {
		return false
	}
	a, ok, _ := dialer.ParseHost(host)
	return ok && a.Unmap() == local.Addr().Unmap()
}

// ValidFieldName reports whether name is a valid HTTP/2 or HTTP/3 field
// name: a token in lower case (RFC 9113 §8.2.1, RFC 9114 §4.2).
func ValidFieldName(name string) bool {
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

// ValidPath reports whether p can be an HTTP/1.1 request-target: no
// space, control or DEL byte.
func ValidPath(p string) bool {
	for i := 0; i < len(p); i++ {
		if c := p[i]; c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// ValidToken reports whether s is a token (RFC 9110 §5.6.2), such as a
// method.
func ValidToken(s string) bool {
	for i := 0; i < len(s); i++ {
		if !httpguts.IsTokenRune(rune(s[i])) {
			return false
		}
	}
	return s != ""
}

// ParseContentLength parses a content-length value: decimal digits only,
// at most 18 of them.
func ParseContentLength(s string) (int64, bool) {
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
