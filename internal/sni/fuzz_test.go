package sni_test

import (
	"crypto/tls"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/sni"
)

// FuzzParse checks that Parse never panics, that what it accepts it
// accepts from the records it says it read, alone, and with more bytes
// behind them, that a name it returns is a host name, that sni.ErrShort
// means a longer input can still be a hello, and that Read reaches the
// same verdict from the bytes coming one at a time.
func FuzzParse(f *testing.F) {
	f.Add(goHello(f, &tls.Config{ServerName: "fuzz.example", NextProtos: []string{"h2", "http/1.1"}}))
	f.Add(records(message(f, goHello(f, &tls.Config{ServerName: "frag.example"})), 3))
	f.Add(records(helloMsg(ext(extServerName, sniData("a.example", "b.example"))), 100))
	f.Add(records(helloMsg(), 100))
	f.Add([]byte{0x80, 0x2e, 0x01, 0x03, 0x01})
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := sni.Parse(b)
		switch {
		case err == nil:
			if n <= 0 || n > len(b) {
				t.Fatalf("n = %d of %d bytes", n, len(b))
			}
			if h.ServerName != "" && !hostName(h.ServerName) {
				t.Fatalf("accepted server name %q", h.ServerName)
			}
			h2, n2, err2 := sni.Parse(b[:n])
			if err2 != nil || n2 != n || h2.ServerName != h.ServerName || h2.ECH != h.ECH || !slices.Equal(h2.ALPN(), h.ALPN()) {
				t.Fatalf("the records alone: %q %d %v; all of it: %q %d", h2.ServerName, n2, err2, h.ServerName, n)
			}
			h.ALPN()
		case err == sni.ErrShort:
			if len(b) >= sni.MaxBytes {
				t.Fatalf("ErrShort with %d bytes", len(b))
			}
		case errors.Is(err, sni.ErrNotTLS), errors.Is(err, sni.ErrSSLv2), errors.Is(err, sni.ErrMalformed), errors.Is(err, sni.ErrTooLarge):
		default:
			t.Fatalf("unexpected error %v", err)
		}
		got, rh, rerr := sni.Read(&trickle{b: b}, nil)
		if err == sni.ErrShort {
			if rerr == nil || len(got) != len(b) {
				t.Fatalf("Read of a short hello: %v, %d of %d bytes", rerr, len(got), len(b))
			}
			return
		}
		if (rerr == nil) != (err == nil) || rh.ServerName != h.ServerName {
			t.Fatalf("Read: %q %v; sni.Parse: %q %v", rh.ServerName, rerr, h.ServerName, err)
		}
	})
}

// hostName reports whether s is a host name as a server_name may carry
// it: letters, digits, '-', '_' and non-empty labels, no trailing dot.
func hostName(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" {
			return false
		}
		for _, c := range []byte(label) {
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
