package origin

import "strconv"

// Max-Forwards, TRACE and OPTIONS (RFC 9110 §7.6.2, §9.3.7, §9.3.8): the
// rules every front-end applies to a plain request, in one place.

// HopLimited reports whether method is one whose Max-Forwards field an
// intermediary honours: TRACE and OPTIONS.
func HopLimited[T ~string | ~[]byte](method T) bool {
	return string(method) == "TRACE" || string(method) == "OPTIONS"
}

// maxForwardsCap bounds the value rustle reads of a Max-Forwards field:
// a longer number is read as this.
const maxForwardsCap = 1 << 30

// MaxForwards decides a TRACE or OPTIONS request (see HopLimited) by its
// Max-Forwards field: value is the first field's value, present whether
// there is one. here is true when the value is 0: rustle is the final
// recipient and answers the request itself (see AppendTraceEcho and
// ProxyAllow); otherwise next is the value the forwarded request carries
// instead of the client's fields, one less, or -1 when it had none (it
// carries none either). ok is false when the value is not a decimal
// number: the request is malformed (400). Leading and trailing blanks are
// ignored; a number past 2^30 is read as 2^30.
func MaxForwards[T ~string | ~[]byte](value T, present bool) (next int, here, ok bool) {
	if !present {
		return -1, false, true
	}
	i, j := 0, len(value)
	for i < j && (value[i] == ' ' || value[i] == '\t') {
		i++
	}
	for j > i && (value[j-1] == ' ' || value[j-1] == '\t') {
		j--
	}
	if i == j {
		return -1, false, false
	}
	n := 0
	for ; i < j; i++ {
		c := value[i]
		if c < '0' || c > '9' {
			return -1, false, false
		}
		if n < maxForwardsCap {
			n = n*10 + int(c-'0')
		}
	}
	n = min(n, maxForwardsCap)
	if n == 0 {
		return -1, true, true
	}
	return n - 1, false, true
}

// AppendMaxForwards appends the Max-Forwards field line (CRLF-terminated)
// of a forwarded request, n being MaxForwards's next; nothing when n < 0.
func AppendMaxForwards(dst []byte, n int) []byte {
	if n < 0 {
		return dst
	}
	dst = append(dst, "Max-Forwards: "...)
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, "\r\n"...)
}

// ProxyAllow is the Allow field of rustle's own answer (200, no content)
// to an OPTIONS request it is the final recipient of: the methods it
// serves.
const ProxyAllow = "CONNECT, DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT, TRACE"

// TraceContentType is the Content-Type of rustle's own answer to a TRACE
// request it is the final recipient of (RFC 9110 §9.3.8).
const TraceContentType = "message/http"

// TraceHidden reports whether name (any case) is a field rustle leaves
// out of its echo of a TRACE request: one that carries credentials or
// session state (Proxy-Authorization, Authorization, Cookie), which RFC
// 9110 §9.3.8 asks the final recipient to exclude, and which a script
// that can send TRACE must not read back.
func TraceHidden[T ~string | ~[]byte](name T) bool {
	switch len(name) {
	case 6:
		return equalFoldASCII(name, "cookie")
	case 13:
		return equalFoldASCII(name, "authorization")
	case 19:
		return equalFoldASCII(name, "proxy-authorization")
	}
	return false
}

// AppendTraceLine appends the first line of rustle's echo of a TRACE
// request: method, target and protocol ("HTTP/1.1", "HTTP/2", "HTTP/3")
// as received, CRLF-terminated.
func AppendTraceLine[T ~string | ~[]byte](dst []byte, method, target T, proto string) []byte {
	dst = append(dst, method...)
	dst = append(dst, ' ')
	dst = append(dst, target...)
	dst = append(dst, ' ')
	dst = append(dst, proto...)
	return append(dst, "\r\n"...)
}

// AppendTraceField appends one field of rustle's echo of a TRACE
// request, "name: value" CRLF-terminated, as received; nothing for a
// field TraceHidden leaves out.
func AppendTraceField[T ~string | ~[]byte](dst []byte, name, value T) []byte {
	if TraceHidden(name) {
		return dst
	}
	dst = append(dst, name...)
	dst = append(dst, ": "...)
	dst = append(dst, value...)
	return append(dst, "\r\n"...)
}

// equalFoldASCII reports whether s equals lower, which is lower case
// ASCII, ignoring ASCII case.
func equalFoldASCII[T ~string | ~[]byte](s T, lower string) bool {
	if len(s) != len(lower) {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}
