package h2

import (
	"net/netip"
	"strings"

	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/fieldreq"
	"github.com/rustle-proxy/rustle/internal/gate"
)

// requestKind says how a request is served: fieldreq's kinds.
type requestKind uint8

const (
	kindForward    = requestKind(fieldreq.Forward)    // :scheme http: forwarded to an HTTP/1.1 origin
	kindConnect    = requestKind(fieldreq.Connect)    // CONNECT: a TCP tunnel (RFC 9113 §8.5)
	kindWebSocket  = requestKind(fieldreq.WebSocket)  // CONNECT with :protocol websocket (RFC 8441)
	kindConnectUDP = requestKind(fieldreq.ConnectUDP) // CONNECT with :protocol connect-udp (RFC 9298): a UDP flow in capsules
	kindLocal      = requestKind(fieldreq.Local)      // not a proxy request: answered by rustle itself
)

// request is a validated HTTP/2 request head (RFC 9113 §8.2, §8.3): a
// fieldreq.Request and what HTTP/2 adds.
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
const protoConnectUDP = fieldreq.ProtoConnectUDP

// errMalformed is the error of a malformed request head, which is a
// stream error of type PROTOCOL_ERROR (RFC 9113 §8.1.1).
type errMalformed = fieldreq.ErrMalformed

// parseRequest validates the header fields of a request and classifies
// it, as every front-end of field lists does (fieldreq.Parse).
// connectProtocol says whether extended CONNECT was advertised. self is
// the proxy's own address, to recognise requests to itself. in, when not
// nil, is the intercepted tunnel whose requests the connection serves
// (see classifyIntercepted). It returns an errMalformed for a request
// that must be reset with PROTOCOL_ERROR.
func parseRequest(fields []hpack.HeaderField, connectProtocol bool, self netip.AddrPort, in *gate.Intercepted) (request, error) {
	h, err := fieldreq.Parse(fields, connectProtocol, self)
	r := request{
		kind:          requestKind(h.Kind),
		method:        h.Method,
		scheme:        h.Scheme,
		authority:     h.Authority,
		path:          h.Path,
		protocol:      h.Protocol,
		fields:        h.Fields,
		contentLength: h.ContentLength,
		proxyAuth:     h.ProxyAuth,
		hasProxyAuth:  h.HasProxyAuth,
		host:          h.Host,
		port:          h.Port,
		ipv6:          h.IPv6,
		localReason:   h.LocalReason,
	}
	if err == nil && in != nil {
		r = r.classifyIntercepted(in)
	}
	return r, err
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
	host, port, _, err := gate.ParseAuthority(r.authority, 443)
	if err != nil || port != int(in.Port) || !strings.EqualFold(strings.TrimSuffix(host, "."), in.Name) {
		return local(r, 421, "misdirected request: this connection serves "+in.Name)
	}
	r.host, r.port, r.ipv6, r.kind, r.localReason = in.Host, int(in.Port), strings.IndexByte(in.Host, ':') >= 0, kindForward, ""
	return r
}

// local marks r as answered by rustle itself.
func local(r request, status int, reason string) request {
	r.kind, r.localReason = kindLocal, fieldreq.LocalReason(status, reason)
	return r
}

// localStatus returns the status and reason of a kindLocal request.
func (r *request) localStatus() (int, string) { return fieldreq.SplitLocalReason(r.localReason) }

func firstRegular(fields []hpack.HeaderField) int { return fieldreq.FirstRegular(fields) }

func validFieldName(name string) bool { return fieldreq.ValidFieldName(name) }

func validToken(s string) bool { return fieldreq.ValidToken(s) }
