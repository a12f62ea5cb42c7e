package http1

import (
	"slices"
	"testing"
)

// TestTrailerBytes checks that the trailer section a caller collects with
// TrailerBytes from the framing runs is the section's bytes, however the
// body is split, and that ParseTrailers reads its fields.
func TestTrailerBytes(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		section string
		fields  []string
	}{
		{"none", "3\r\nabc\r\n0\r\n\r\n", "\r\n", nil},
		{"one", "3\r\nabc\r\n0\r\nX-Sum: 3\r\n\r\n", "X-Sum: 3\r\n\r\n", []string{"X-Sum: 3"}},
		{"two", "0\r\nA: 1\r\nB:2\r\n\r\n", "A: 1\r\nB:2\r\n\r\n", []string{"A: 1", "B:2"}},
	}
	for _, tt := range tests {
		for cut := 1; cut <= len(tt.body); cut++ {
			var cs ChunkedScanner
			var section []byte
			for _, p := range [][]byte{[]byte(tt.body[:cut]), []byte(tt.body[cut:])} {
				for m := 0; m < len(p) && !cs.Done(); {
					t0 := cs.TrailerBytes()
					k, data, err := cs.Step(p[m:])
					if err != nil {
						t.Fatalf("%s cut %d: %v", tt.name, cut, err)
					}
					if n := cs.TrailerBytes() - t0; !data && n > 0 {
						section = append(section, p[m+k-n:m+k]...)
					}
					m += k
				}
			}
			if !cs.Done() || string(section) != tt.section {
				t.Fatalf("%s cut %d: done %v, section %q, want %q", tt.name, cut, cs.Done(), section, tt.section)
			}
		}
		var h Head
		if err := h.ParseTrailers([]byte(tt.section)); err != nil {
			t.Fatalf("%s: ParseTrailers: %v", tt.name, err)
		}
		var got []string
		for _, f := range h.Fields {
			got = append(got, string(f.Line.Of(h.Buf)))
		}
		if !slices.Equal(got, tt.fields) {
			t.Errorf("%s: fields %q, want %q", tt.name, got, tt.fields)
		}
	}
	var h Head
	if err := h.ParseTrailers([]byte("Bad Name: 1\r\n\r\n")); err != ErrBadResponseHead {
		t.Errorf("ParseTrailers of a malformed section = %v, want ErrBadResponseHead", err)
	}
}

// TestConnectionLists checks which names a head's Connection fields list.
func TestConnectionLists(t *testing.T) {
	var h Head
	if err := h.ParseResponse(rawHead("HTTP/1.1 200 OK", "Connection: X-A, close", "Proxy-Connection: x-b", "X-A: 1")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		want bool
	}{
		{"x-a", true}, {"X-A", true}, {"X-B", true}, {"close", false}, {"x-c", false},
	} {
		if got := h.ConnectionLists([]byte(tt.name)); got != tt.want {
			t.Errorf("ConnectionLists(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
