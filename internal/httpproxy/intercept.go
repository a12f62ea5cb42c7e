package httpproxy

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
)

// Requests inside an intercepted tunnel (see gate.Interceptor): a
// connection whose session is an intercepted tunnel's (Session.
// Intercepted) serves origin-form requests ("GET /v1/models HTTP/1.1")
// for the tunnel's name, as an origin server does. Each goes to the
// tunnel's destination through the exchange every forwarded request
// takes, with TLS to the origin (the listener's intercepting front-end
// has an origin client with TLS, see origin.Config.TLS).

// Target errors of requests inside an intercepted tunnel.
var (
	errInterceptConnect = http1.NewParseError(400, "CONNECT inside an intercepted tunnel: send requests for the tunnel's host")
	errInterceptNoHost  = http1.NewParseError(400, "no Host field")
	errInterceptScheme  = http1.NewParseError(400, "an absolute-form target inside an intercepted tunnel must be https://")
)

// misdirected is the answer to a request inside an intercepted tunnel
// for another host than the tunnel's (RFC 9110 §15.5.20).
func misdirected(name string) error {
	return http1.NewParseError(421, "misdirected request: this connection serves "+name)
}

// interceptTarget parses the target of a request inside an intercepted
// tunnel into cn.tgt: origin form ("/path?q", "*"), or absolute form
// https://authority/path, whose authority, and the Host field, must
// name the tunnel's name (in, any case) and port (443 when left out).
// The Host the origin gets is the client's (cn.tgt.authority); the
// access log's target, the https URL, is built in cn.logTgt.
func (cn *conn) interceptTarget(in *gate.Intercepted, isConnect bool) error {
	if isConnect {
		return errInterceptConnect
	}
	req := &cn.req
	b := req.Target.Of(req.Buf)
	t := &cn.tgt
	*t = target{}
	var authority []byte
	switch {
	case bytes.IndexByte(b, '#') >= 0:
		return errFragment
	case len(b) > 0 && (b[0] == '/' || b[0] == '*' && len(b) == 1):
		t.path = b
	case len(b) >= 8 && http1.EqualFold(b[:8], "https://"):
		rest := b[8:]
		end := len(rest)
		for i, c := range rest {
			if c == '/' || c == '?' || c == '#' {
				end = i
				break
			}
		}
		authority, t.path = rest[:end], rest[end:]
		if len(t.path) == 0 {
			t.path = slash
		}
		if !cn.sameAuthority(authority, in) {
			return misdirected(in.Name)
		}
	default:
		return errInterceptScheme
	}
	if req.HostIdx >= 0 {
		host := req.Fields[req.HostIdx].Value.Of(req.Buf)
		if !cn.sameAuthority(host, in) {
			return misdirected(in.Name)
		}
		authority = host
	} else if req.Minor >= 1 {
		return errInterceptNoHost
	}
	if authority == nil {
		authority = appendNamePort(cn.scratch[:0], in)
		cn.scratch = authority
	}
	t.authority = authority
	lt := append(cn.logTgt[:0], "https://"...)
	lt = append(lt, authority...)
	if len(t.path) > 0 && t.path[0] == '?' {
		lt = append(lt, '/')
	}
	if string(t.path) != "*" {
		lt = append(lt, t.path...)
	}
	cn.logTgt = lt
	return nil
}

// sameAuthority reports whether a (host[:port], from a Host field or an
// absolute URL) names the intercepted tunnel's name and port.
func sameAuthority(a []byte, in *gate.Intercepted) bool {
	host, port, _, err := gate.ParseAuthority(a, 443)
	if err != nil || port != int(in.Port) {
		return false
	}
	return strings.EqualFold(strings.TrimSuffix(string(host), "."), in.Name)
}

// sameAuthority is sameAuthority for the connection's tunnel, in: the
// last authority found the same is kept (authSame), so that the requests
// of a client that names the host one way are each checked with one
// comparison rather than parsed.
func (cn *conn) sameAuthority(a []byte, in *gate.Intercepted) bool {
	if len(cn.authSame) > 0 && bytes.Equal(a, cn.authSame) {
		return true
	}
	if !sameAuthority(a, in) {
		return false
	}
	cn.authSame = append(cn.authSame[:0], a...)
	return true
}

// appendNamePort appends the tunnel's name, with its port unless 443,
// as a Host field's value.
func appendNamePort(dst []byte, in *gate.Intercepted) []byte {
	if strings.IndexByte(in.Name, ':') >= 0 {
		dst = append(append(append(dst, '['), in.Name...), ']')
	} else {
		dst = append(dst, in.Name...)
	}
	if in.Port != 443 {
		dst = strconv.AppendUint(append(dst, ':'), uint64(in.Port), 10)
	}
	return dst
}
