package origin

import (
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/route"
)

// AppendRequestTarget appends to dst the request target a front-end
// sends upstream for a request to authority (host[:port]) with path (its
// origin form: "/…", "?…" for an empty path with a query, which gets its
// "/", or "*"). To parent, an http parent that ForwardParent returned
// (nil = none: the origin itself, or a tunnel), the target is in
// absolute form, "http://" authority path ("http://" authority for "*",
// RFC 9112 §3.2.4), its host an IPv4 address in dotted decimal however
// the client spelt it (see AppendHostPort), as the guard checked it;
// otherwise it is path. It allocates nothing beyond dst's growth.
func AppendRequestTarget[T ~string | ~[]byte](dst []byte, parent *route.Parent, authority, path T) []byte {
	if parent != nil {
		dst = append(dst, "http://"...)
		dst = appendAuthority(dst, authority)
		if string(path) == "*" {
			return dst
		}
	}
	if len(path) > 0 && path[0] == '?' {
		dst = append(dst, '/')
	}
	return append(dst, path...)
}

// AppendParentAuthorization appends to dst the Proxy-Authorization field
// line (CRLF-terminated) that gives parent, an http parent that
// ForwardParent returned, rustle's credentials for it; nothing when
// parent is nil or has none. A client's own Proxy-Authorization is never
// forwarded: the front-ends drop it.
func AppendParentAuthorization(dst []byte, parent *route.Parent) []byte {
	if parent == nil || parent.Authorization() == "" {
		return dst
	}
	dst = append(dst, "Proxy-Authorization: "...)
	dst = append(dst, parent.Authorization()...)
	return append(dst, "\r\n"...)
}

// appendAuthority appends authority (host[:port]) with an IPv4 host in
// dotted decimal.
func appendAuthority[T ~string | ~[]byte](dst []byte, authority T) []byte {
	host, rest := authority, authority[len(authority):]
	if len(authority) > 0 && authority[0] != '[' {
		for i := 0; i < len(authority); i++ {
			if authority[i] == ':' {
				host, rest = authority[:i], authority[i:]
				break
			}
		}
		if ip, ok, _ := dialer.ParseHost(host); ok && ip.Is4() {
			return append(ip.AppendTo(dst), rest...)
		}
	}
	return append(dst, authority...)
}
