package origin

// Idempotent reports whether a request with method m may be sent again
// after its connection failed before any byte of the response (RFC 9110
// §9.2.2).
func Idempotent[T ~string | ~[]byte](m T) bool {
	switch string(m) {
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}
