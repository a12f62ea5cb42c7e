package transparent

import "testing"

// TestFirstKind checks how a connection's first bytes are told apart: a
// TLS handshake record, the start of an HTTP/1.x request line (a method
// of capitals and a space), anything else, and a start that needs more.
func TestFirstKind(t *testing.T) {
	for _, tc := range []struct {
		b    string
		want int
	}{
		{"", kindMore},
		{"\x16\x03\x01", kindTLS},
		{"\x16", kindTLS},
		{"GET / HTTP/1.1\r\n", kindHTTP},
		{"PROPFIND /x HTTP/1.1", kindHTTP},
		{"G", kindMore},
		{"GET", kindMore},
		{"get / HTTP/1.1", kindOther},
		{" GET /", kindOther},
		{"SSH-2.0-OpenSSH_9.2\r\n", kindOther},
		{"\x05\x01\x00", kindOther},
		{"ABCDEFGHIJKLMNOPQRSTUVWXYZ ", kindOther},
	} {
		if got := firstKind([]byte(tc.b)); got != tc.want {
			t.Errorf("firstKind(%q) = %d, want %d", tc.b, got, tc.want)
		}
	}
}
