package masque

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestVarint(t *testing.T) {
	tests := []struct {
		v   uint64
		enc []byte
	}{
		{0, []byte{0x00}},
		{37, []byte{0x25}},
		{15293, []byte{0x7b, 0xbd}},
		{494878333, []byte{0x9d, 0x7f, 0x3e, 0x7d}},
		{151288809941952652, []byte{0xc2, 0x19, 0x7c, 0x5e, 0xff, 0x14, 0xe8, 0x8c}}, // RFC 9000 §A.1
	}
	for _, tt := range tests {
		if got := AppendVarint(nil, tt.v); !bytes.Equal(got, tt.enc) {
			t.Errorf("AppendVarint(%d) = %x, want %x", tt.v, got, tt.enc)
		}
		v, n, err := ParseVarint(append(tt.enc, 0xff))
		if err != nil || v != tt.v || n != len(tt.enc) {
			t.Errorf("ParseVarint(%x) = %d, %d, %v", tt.enc, v, n, err)
		}
		if _, _, err := ParseVarint(tt.enc[:len(tt.enc)-1]); err == nil {
			t.Errorf("ParseVarint(%x) of a truncated varint: no error", tt.enc[:len(tt.enc)-1])
		}
	}
}

func TestParseDatagram(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		ctx     uint64
		payload string
		err     bool
	}{
		{"udp payload", []byte("\x00hello"), 0, "hello", false},
		{"empty payload", []byte{0}, 0, "", false},
		{"other context", []byte("\x40\x02x"), 2, "x", false},
		{"empty", nil, 0, "", true},
		{"truncated context ID", []byte{0x80, 0}, 0, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, p, err := ParseDatagram(tt.in)
			if (err != nil) != tt.err || err == nil && (ctx != tt.ctx || string(p) != tt.payload) {
				t.Fatalf("got %d %q %v", ctx, p, err)
			}
		})
	}
}

func TestCapsuleReader(t *testing.T) {
	var stream []byte
	stream = AppendCapsule(stream, 0x2a, []byte("unknown, skipped"))
	stream = AppendCapsule(stream, CapsuleDatagram, []byte("\x00one"))
	stream = AppendCapsule(stream, 0x1234, bytes.Repeat([]byte{1}, 300)) // longer than Max: skipped unread
	stream = AppendCapsule(stream, CapsuleDatagram, nil)
	cr := NewCapsuleReader(bytes.NewReader(stream), 100)
	for _, want := range []string{"\x00one", ""} {
		got, err := cr.Next()
		if err != nil || string(got) != want {
			t.Fatalf("Next = %q %v, want %q", got, err, want)
		}
	}
	if _, err := cr.Next(); err != io.EOF {
		t.Fatalf("at the end: %v, want io.EOF", err)
	}

	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"cut in the type", []byte{0x40}, io.ErrUnexpectedEOF},
		{"cut in the length", []byte{0x00, 0x80, 0x01}, io.ErrUnexpectedEOF},
		{"cut in the value", []byte{0x00, 0x05, 'a'}, io.ErrUnexpectedEOF},
		{"cut in a skipped value", []byte{0x21, 0x05, 'a'}, io.ErrUnexpectedEOF},
		{"datagram too large", AppendCapsule(nil, CapsuleDatagram, make([]byte, 101)), ErrCapsuleTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewCapsuleReader(bytes.NewReader(tt.in), 100).Next()
			if !errors.Is(err, tt.want) {
				t.Fatalf("Next: %v, want %v", err, tt.want)
			}
			if err := NewCapsuleReader(bytes.NewReader(tt.in), 100).Skip(); !errors.Is(err, tt.want) {
				t.Fatalf("Skip: %v, want %v", err, tt.want)
			}
		})
	}
}

// TestCapsuleReaderSkip skips every capsule, a DATAGRAM capsule's too,
// one per call, from a reader read directly (an io.ByteReader) and from
// one read through the CapsuleReader's own buffer, keeping no buffer for
// their values.
func TestCapsuleReaderSkip(t *testing.T) {
	var stream []byte
	stream = AppendCapsule(stream, 0x2a, []byte("unknown"))
	stream = AppendCapsule(stream, CapsuleDatagram, bytes.Repeat([]byte{2}, 100))
	stream = AppendCapsule(stream, 0x1234, bytes.Repeat([]byte{1}, 300))
	for _, tt := range []struct {
		name string
		r    io.Reader
	}{
		{"io.ByteReader", bytes.NewReader(stream)},
		{"io.Reader", struct{ io.Reader }{bytes.NewReader(stream)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cr := NewCapsuleReader(tt.r, 100)
			for i := range 3 {
				if err := cr.Skip(); err != nil {
					t.Fatalf("Skip %d: %v", i, err)
				}
			}
			if err := cr.Skip(); err != io.EOF {
				t.Fatalf("at the end: %v, want io.EOF", err)
			}
			if cr.buf != nil {
				t.Fatalf("Skip kept a buffer of %d bytes", cap(cr.buf))
			}
		})
	}
}

func TestTemplate(t *testing.T) {
	def, err := ParseTemplate(DefaultTemplate)
	if err != nil {
		t.Fatal(err)
	}
	query, err := ParseTemplate("/masque?h={target_host}&p={target_port}")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		t    *Template
		path string
		host string
		port uint16
		err  bool
	}{
		{"name", def, "/.well-known/masque/udp/dns.example/53/", "dns.example", 53, false},
		{"IPv4", def, "/.well-known/masque/udp/192.0.2.1/443/", "192.0.2.1", 443, false},
		{"IPv6 percent-encoded", def, "/.well-known/masque/udp/2001%3Adb8%3A%3A1/53/", "2001:db8::1", 53, false},
		{"query form", query, "/masque?h=dns.example&p=853", "dns.example", 853, false},
		{"no trailing slash", def, "/.well-known/masque/udp/dns.example/53", "", 0, true},
		{"port 0", def, "/.well-known/masque/udp/dns.example/0/", "", 0, true},
		{"port too large", def, "/.well-known/masque/udp/dns.example/65536/", "", 0, true},
		{"port signed", def, "/.well-known/masque/udp/dns.example/+53/", "", 0, true},
		{"empty host", def, "/.well-known/masque/udp//53/", "", 0, true},
		{"extra segment", def, "/.well-known/masque/udp/a/b/53/", "", 0, true},
		{"host with a zone", def, "/.well-known/masque/udp/fe80%3A%3A1%25eth0/53/", "", 0, true},
		{"host with a space", def, "/.well-known/masque/udp/a%20b/53/", "", 0, true},
		{"other path", def, "/elsewhere", "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host, port, err := tt.t.Match(tt.path)
			if (err != nil) != tt.err || host != tt.host || port != tt.port {
				t.Fatalf("Match(%q) = %q %d %v", tt.path, host, port, err)
			}
		})
	}
}

func TestParseTemplateRefuses(t *testing.T) {
	for _, s := range []string{
		"", "no-slash/{target_host}/{target_port}", "/{target_host}", "/{target_port}",
		"/{target_host}{target_port}", "/{target_host}/{target_host}/{target_port}",
		"/{target_host}/{target_port}/{other}", "/{target_host/{target_port}", "/}{target_host}/{target_port}",
	} {
		if _, err := ParseTemplate(s); err == nil {
			t.Errorf("ParseTemplate(%q): no error", s)
		}
	}
}
