package origin

import "net/netip"

// Forwarded modes: which client-address field forwarded requests carry.
const (
	ForwardedNone = "none"
	ForwardedRFC  = "rfc7239"
	ForwardedXFF  = "x-forwarded-for"
)

// ForwardedName returns the name of the field mode adds to forwarded
// requests, "Forwarded" or "X-Forwarded-For"; "" for ForwardedNone.
func ForwardedName(mode string) string {
	switch mode {
	case ForwardedRFC:
		return "Forwarded"
	case ForwardedXFF:
		return "X-Forwarded-For"
	}
	return ""
}

// AppendForwardedFor appends the client's address as the element that
// mode adds to the request's Forwarded (RFC 7239: for=1.2.3.4, or
// for="[2001:db8::1]") or X-Forwarded-For (the bare address) field; it
// appends nothing for ForwardedNone. Every front-end builds the field
// with it, after the values the client sent.
func AppendForwardedFor(dst []byte, mode string, ip netip.Addr) []byte {
	switch mode {
	case ForwardedRFC:
		dst = append(dst, "for="...)
		if ip.Is6() {
			dst = append(dst, "\"["...)
			dst = ip.AppendTo(dst)
			return append(dst, "]\""...)
		}
		return ip.AppendTo(dst)
	case ForwardedXFF:
		return ip.AppendTo(dst)
	}
	return dst
}
