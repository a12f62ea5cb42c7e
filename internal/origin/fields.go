package origin

import "strings"

// ConnectionSpecific reports whether name (any case) is a
// connection-specific field (RFC 9113 §8.2.2, RFC 9114 §4.2): one an
// HTTP/2 or HTTP/3 request must not carry, and that rustle never passes
// from one hop to the next.
func ConnectionSpecific(name string) bool {
	switch len(name) {
	case 7:
		return strings.EqualFold(name, "upgrade")
	case 10:
		return strings.EqualFold(name, "connection") || strings.EqualFold(name, "keep-alive")
	case 16:
		return strings.EqualFold(name, "proxy-connection")
	case 17:
		return strings.EqualFold(name, "transfer-encoding")
	}
	return false
}

// HopByHop reports whether name (any case) is a field that belongs to one
// hop only (RFC 9110 §7.6.1), which a forwarded request or response
// drops: a connection-specific field, TE, Trailer, and the proxy's own
// Proxy-Authorization and Proxy-Authenticate. Fields a Connection field
// lists are hop-by-hop too; the caller drops those.
func HopByHop(name string) bool {
	if ConnectionSpecific(name) {
		return true
	}
	switch len(name) {
	case 2:
		return strings.EqualFold(name, "te")
	case 7:
		return strings.EqualFold(name, "trailer")
	case 18:
		return strings.EqualFold(name, "proxy-authenticate")
	case 19:
		return strings.EqualFold(name, "proxy-authorization")
	}
	return false
}
