package masque

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"
)

// FuzzParseDatagram checks that a datagram's context ID reads back as it
// was written, and that whatever a client sends is either taken or
// refused, never read past.
func FuzzParseDatagram(f *testing.F) {
	for _, s := range [][]byte{{0}, []byte("\x00payload"), {0x40, 0x01}, {0xc0}, {0x80, 0, 0, 1, 'x'}, nil} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		id, payload, err := ParseDatagram(b)
		if err != nil {
			return
		}
		if id > maxVarint || len(payload) >= len(b)+1 || !bytes.HasSuffix(b, payload) {
			t.Fatalf("%x: context %d payload %x", b, id, payload)
		}
		n := len(b) - len(payload)
		if v, m, err := ParseVarint(AppendVarint(nil, id)); err != nil || v != id || m > n {
			t.Fatalf("%x: context %d does not read back (%d, %d, %v)", b, id, v, m, err)
		}
	})
}

// FuzzCapsuleReader checks that a stream of capsules is read to its end
// or refused with an error, that a DATAGRAM capsule's value is never
// longer than the limit, and that well-formed capsules written around the
// input read back.
func FuzzCapsuleReader(f *testing.F) {
	for _, s := range [][]byte{
		AppendCapsule(nil, CapsuleDatagram, []byte("\x00dns")),
		AppendCapsule(AppendCapsule(nil, 0x2a, []byte("skip")), CapsuleDatagram, nil),
		{0x00, 0x80, 0x01}, {0xff}, {0x00, 0x7f, 0xff},
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cr := NewCapsuleReader(bytes.NewReader(b), 64)
		for range len(b) + 1 {
			v, err := cr.Next()
			if err != nil {
				if err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, ErrCapsuleTooLarge) {
					t.Fatalf("%x: unexpected error %v", b, err)
				}
				return
			}
			if len(v) > 64 {
				t.Fatalf("%x: a %d-byte value past the limit", b, len(v))
			}
		}
		t.Fatalf("%x: more capsules than bytes", b)
	})
}

// FuzzTemplateMatch checks that a path the default template matches names
// a valid host and port, and that an expanded template matches back to
// what it was expanded from.
func FuzzTemplateMatch(f *testing.F) {
	for _, s := range []string{
		"/.well-known/masque/udp/dns.example/53/", "/.well-known/masque/udp/2001%3Adb8%3A%3A1/53/",
		"/.well-known/masque/udp/%zz/53/", "/.well-known/masque/udp/a/b/c/", "/.well-known/masque/udp/x/00053/",
	} {
		f.Add(s)
	}
	tmpl, err := ParseTemplate(DefaultTemplate)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path string) {
		host, port, err := tmpl.Match(path)
		if err != nil {
			return
		}
		if port == 0 || host == "" || strings.ContainsAny(host, "/?#%[] ") {
			t.Fatalf("%q: host %q port %d", path, host, port)
		}
		enc := host
		if a, err := netip.ParseAddr(host); err == nil && a.Is6() {
			enc = strings.ReplaceAll(host, ":", "%3A")
		}
		again := "/.well-known/masque/udp/" + enc + "/" + itoa(port) + "/"
		if h, p, err := tmpl.Match(again); err != nil || h != host || p != port {
			t.Fatalf("%q: %q %d expands to %q, which matches %q %d %v", path, host, port, again, h, p, err)
		}
	})
}

func itoa(p uint16) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + p%10)}, b...)
		if p /= 10; p == 0 {
			return string(b)
		}
	}
}
