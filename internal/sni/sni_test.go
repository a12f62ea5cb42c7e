package sni_test

import (
	"bytes"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// TLS wire values the tests build hellos with.
const (
	recordHandshake = 0x16
	typeClientHello = 1
	extServerName   = 0x0000
	extALPN         = 0x0010
	nameTypeHost    = 0
)

// goHello, message and records are proxytest's.
var (
	goHello = proxytest.ClientHello
	message = proxytest.HelloMessage
	records = proxytest.HelloRecords
)

// ext returns one extension.
func ext(typ int, data []byte) []byte {
	return append([]byte{byte(typ >> 8), byte(typ), byte(len(data) >> 8), byte(len(data))}, data...)
}

// vec16 prefixes b with its two-byte length.
func vec16(b ...[]byte) []byte {
	j := bytes.Join(b, nil)
	return append([]byte{byte(len(j) >> 8), byte(len(j))}, j...)
}

// sniExt returns a server_name extension's data with one entry per name
// (host_name type).
func sniData(names ...string) []byte {
	var entries [][]byte
	for _, n := range names {
		entries = append(entries, append([]byte{nameTypeHost, byte(len(n) >> 8), byte(len(n))}, n...))
	}
	return vec16(entries...)
}

// helloMsg builds a ClientHello message with the extensions exts (nil:
// no extensions block at all).
func helloMsg(exts ...[]byte) []byte {
	body := []byte{3, 3}
	body = append(body, make([]byte, 32)...) // random
	body = append(body, 0)                   // session id
	body = append(body, 0, 2, 0x13, 0x01)    // one cipher suite
	body = append(body, 1, 0)                // null compression
	if exts != nil {
		body = append(body, vec16(exts...)...)
	}
	return append([]byte{typeClientHello, byte(len(body) >> 16), byte(len(body) >> 8), byte(len(body))}, body...)
}

func TestParseGoClient(t *testing.T) {
	for _, tc := range []struct {
		name       string
		cfg        *tls.Config
		serverName string
		alpn       []string
	}{
		{"name", &tls.Config{ServerName: "api.example.com"}, "api.example.com", nil},
		{"upper case kept", &tls.Config{ServerName: "API.Example.COM"}, "API.Example.COM", nil},
		{"alpn", &tls.Config{ServerName: "example.org", NextProtos: []string{"h2", "http/1.1"}}, "example.org", []string{"h2", "http/1.1"}},
		{"IP literal: no server_name", &tls.Config{ServerName: "192.0.2.1"}, "", nil},
		{"TLS 1.2 only", &tls.Config{ServerName: "old.example", MaxVersion: tls.VersionTLS12}, "old.example", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := goHello(t, tc.cfg)
			h, n, err := sni.Parse(b)
			if err != nil {
				t.Fatal(err)
			}
			if n != len(b) {
				t.Errorf("n = %d, want %d", n, len(b))
			}
			if h.ServerName != tc.serverName || h.ECH {
				t.Errorf("got %q ECH %v, want %q", h.ServerName, h.ECH, tc.serverName)
			}
			if got := h.ALPN(); !slices.Equal(got, tc.alpn) {
				t.Errorf("ALPN %q, want %q", got, tc.alpn)
			}
		})
	}
}

// echConfigList returns an ECHConfigList (RFC 9849 §4) of one X25519
// configuration with public_name public, and its private key.
func echConfigList(t *testing.T, public string) ([]byte, []byte) {
	t.Helper()
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := key.PublicKey().Bytes()
	var c []byte
	c = append(c, 7)          // config_id
	c = append(c, 0x00, 0x20) // DHKEM(X25519, HKDF-SHA256)
	c = append(c, vec16(pub)...)
	c = append(c, vec16([]byte{0x00, 0x01, 0x00, 0x01})...) // HKDF-SHA256, AES-128-GCM
	c = append(c, 0)                                        // maximum_name_length
	c = append(c, byte(len(public)))
	c = append(c, public...)
	c = append(c, 0, 0) // extensions
	cfg := append([]byte{0xfe, 0x0d}, vec16(c)...)
	return vec16(cfg), key.Bytes()
}

// TestParseECH: the outer server_name, the public name, is what Parse
// reads of a hello with ECH; the name the client means to reach is in
// the encrypted inner hello.
func TestParseECH(t *testing.T) {
	list, _ := echConfigList(t, "public.example")
	b := goHello(t, &tls.Config{ServerName: "secret.example", EncryptedClientHelloConfigList: list, MinVersion: tls.VersionTLS13})
	h, _, err := sni.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.ServerName != "public.example" || !h.ECH {
		t.Fatalf("got %q ECH %v, want the outer public.example with ECH", h.ServerName, h.ECH)
	}
	if bytes.Contains(b, []byte("secret.example")) {
		t.Fatal("the inner name is in the clear: ECH was not used")
	}
}

// TestParseSplit: a hello split over many records (down to one byte of
// it per record) reads as one, and one that arrives a byte at a time is
// sni.ErrShort until its last byte.
func TestParseSplit(t *testing.T) {
	whole := goHello(t, &tls.Config{ServerName: "split.example", NextProtos: []string{"h2"}})
	msg := message(t, whole)
	for _, size := range []int{1, 2, 7, 100, len(msg) - 1} {
		t.Run("records of "+itoa(size), func(t *testing.T) {
			b := records(msg, size)
			h, n, err := sni.Parse(b)
			if err != nil || h.ServerName != "split.example" || n != len(b) {
				t.Fatalf("got %q n=%d err %v", h.ServerName, n, err)
			}
		})
	}
	t.Run("byte by byte", func(t *testing.T) {
		b := records(msg, 3)
		for i := 1; i < len(b); i++ {
			if _, _, err := sni.Parse(b[:i]); err != sni.ErrShort {
				t.Fatalf("Parse of %d of %d bytes: %v, want sni.ErrShort", i, len(b), err)
			}
		}
		if h, _, err := sni.Parse(b); err != nil || h.ServerName != "split.example" {
			t.Fatalf("whole: %q %v", h.ServerName, err)
		}
	})
	t.Run("Read from a trickle", func(t *testing.T) {
		b := records(msg, 5)
		got, h, err := sni.Read(&trickle{b: append(slices.Clone(b), "early data"...)}, nil)
		if err != nil || h.ServerName != "split.example" {
			t.Fatalf("got %q %v", h.ServerName, err)
		}
		if !bytes.Equal(got, b) {
			t.Fatalf("Read returned %d bytes, want the %d of the records", len(got), len(b))
		}
	})
	t.Run("Read keeps what it was given", func(t *testing.T) {
		got, h, err := sni.Read(bytes.NewReader(whole[10:]), slices.Clone(whole[:10]))
		if err != nil || h.ServerName != "split.example" || !bytes.Equal(got, whole) {
			t.Fatalf("got %q %v, %d bytes", h.ServerName, err, len(got))
		}
	})
}

// trickle reads one byte at a time.
type trickle struct{ b []byte }

func (r *trickle) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	p[0] = r.b[0]
	r.b = r.b[1:]
	return 1, nil
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

// longerExts returns a hello whose extensions block claims a byte more
// than the hello holds.
func longerExts() []byte {
	msg := helloMsg(ext(extServerName, sniData("a.example")))
	const at = 4 + 2 + 32 + 1 + 4 + 2 // the extensions' length
	msg[at+1]++
	return msg
}

func TestParseRefused(t *testing.T) {
	good := helloMsg(ext(extServerName, sniData("ok.example")))
	for _, tc := range []struct {
		name string
		b    []byte
		want error
	}{
		{"SSH banner", []byte("SSH-2.0-OpenSSH_9.2\r\n"), sni.ErrNotTLS},
		{"HTTP", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), sni.ErrNotTLS},
		{"zeros", make([]byte, 64), sni.ErrNotTLS},
		{"0x16 then no TLS version", []byte{0x16, 0x00, 0x01, 0x00, 0x10}, sni.ErrNotTLS},
		{"SSLv2 hello", []byte{0x80, 0x2e, 0x01, 0x03, 0x01, 0x00, 0x15, 0x00, 0x00, 0x00, 0x10}, sni.ErrSSLv2},
		{"SSLv2 hello, SSL 2.0", []byte{0x80, 0x2e, 0x01, 0x00, 0x02, 0x00, 0x15}, sni.ErrSSLv2},
		{"alert record first", []byte{0x15, 3, 3, 0, 2, 2, 40}, sni.ErrNotTLS},
		{"another record type inside", append(records(good[:10], 10), 0x15, 3, 3, 0, 2, 2, 40), sni.ErrMalformed},
		{"empty record", []byte{0x16, 3, 1, 0, 0}, sni.ErrMalformed},
		{"record over 16 KiB", []byte{0x16, 3, 1, 0x40, 0x01}, sni.ErrMalformed},
		{"not a ClientHello", records(append([]byte{2}, good[1:]...), 1000), sni.ErrMalformed},
		{"bytes after the hello", records(append(slices.Clone(good), 20, 0, 0, 0), 1000), sni.ErrMalformed},
		{"two server_name extensions", records(helloMsg(ext(extServerName, sniData("a.example")), ext(extServerName, sniData("b.example"))), 1000), sni.ErrMalformed},
		{"two host names", records(helloMsg(ext(extServerName, sniData("a.example", "b.example"))), 1000), sni.ErrMalformed},
		{"trailing dot", records(helloMsg(ext(extServerName, sniData("a.example."))), 1000), sni.ErrMalformed},
		{"empty host name", records(helloMsg(ext(extServerName, sniData(""))), 1000), sni.ErrMalformed},
		{"NUL in the name", records(helloMsg(ext(extServerName, sniData("a.example\x00.b.example"))), 1000), sni.ErrMalformed},
		{"space in the name", records(helloMsg(ext(extServerName, sniData("a example"))), 1000), sni.ErrMalformed},
		{"empty server_name list", records(helloMsg(ext(extServerName, vec16())), 1000), sni.ErrMalformed},
		{"server_name list longer than its extension", records(helloMsg(ext(extServerName, []byte{0, 9, 0, 0, 1, 'a'})), 1000), sni.ErrMalformed},
		{"extensions longer than the hello", records(longerExts(), 1000), sni.ErrMalformed},
		{"two ALPN extensions", records(helloMsg(ext(extALPN, vec16([]byte{2, 'h', '2'})), ext(extALPN, vec16([]byte{2, 'h', '2'}))), 1000), sni.ErrMalformed},
		{"declared hello over the bound", []byte{0x16, 3, 1, 0, 4, 1, 0x01, 0x00, 0x00}, sni.ErrTooLarge},
		{"over the bound in one-byte records", records(helloMsg(ext(0x15, make([]byte, 3000))), 1), sni.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := sni.Parse(tc.b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Parse: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestParseMinimal: a hello with no extensions at all (TLS 1.2 and
// older may end before them) or unknown name types only has no server
// name, and is no error.
func TestParseMinimal(t *testing.T) {
	for name, msg := range map[string][]byte{
		"no extensions":        helloMsg(),
		"other name type only": helloMsg(ext(extServerName, vec16([]byte{7, 0, 1, 'x'}))),
		"padding only":         helloMsg(ext(0x15, make([]byte, 300))),
	} {
		t.Run(name, func(t *testing.T) {
			h, _, err := sni.Parse(records(msg, 1000))
			if err != nil || h.ServerName != "" {
				t.Fatalf("got %q %v", h.ServerName, err)
			}
		})
	}
}

// TestParseMatchesCryptoTLS: the server name Parse reads of a hello is
// the one Go's TLS server reads of it, and what Parse refuses as
// malformed Go's server refuses too.
func TestParseMatchesCryptoTLS(t *testing.T) {
	for name, b := range map[string][]byte{
		"go client":          goHello(t, &tls.Config{ServerName: "crypto.example"}),
		"one-byte records":   records(message(t, goHello(t, &tls.Config{ServerName: "frag.example"})), 1),
		"two host names":     records(helloMsg(ext(extServerName, sniData("a.example", "b.example"))), 1000),
		"two sni extensions": records(helloMsg(ext(extServerName, sniData("a.example")), ext(extServerName, sniData("b.example"))), 1000),
		"trailing dot":       records(helloMsg(ext(extServerName, sniData("dot.example."))), 1000),
	} {
		t.Run(name, func(t *testing.T) {
			h, _, perr := sni.Parse(b)
			seen, serr := cryptoTLSServerName(t, b)
			if perr != nil {
				if !errors.Is(perr, sni.ErrMalformed) || serr == nil {
					t.Fatalf("Parse: %v; crypto/tls: %q %v", perr, seen, serr)
				}
				return
			}
			if serr != nil || seen != h.ServerName {
				t.Fatalf("Parse read %q; crypto/tls read %q (%v)", h.ServerName, seen, serr)
			}
		})
	}
}

// cryptoTLSServerName feeds b to Go's TLS server and returns the server
// name its GetConfigForClient saw, or the handshake's error when it
// never got there.
func cryptoTLSServerName(t *testing.T, b []byte) (string, error) {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	var seen string
	got := errors.New("no hello")
	srv := tls.Server(s, &tls.Config{GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		seen, got = hi.ServerName, nil
		return nil, errors.New("stop here")
	}})
	go func() { c.Write(b); io.Copy(io.Discard, c) }()
	s.SetDeadline(time.Now().Add(5 * time.Second))
	err := srv.Handshake()
	if got == nil {
		return seen, nil
	}
	return "", err
}

func TestMode(t *testing.T) {
	for _, s := range []string{"", "off", "log", "match"} {
		m, err := sni.ParseMode(s)
		if err != nil || m.String() != s {
			t.Errorf("ParseMode(%q) = %v %v", s, m, err)
		}
	}
	if _, err := sni.ParseMode("on"); err == nil || !strings.Contains(err.Error(), `"on"`) {
		t.Errorf("ParseMode(on): %v", err)
	}
	if sni.Unset.Or(sni.Match) != sni.Match || sni.Log.Or(sni.Match) != sni.Log || !sni.Match.Reads() || sni.Off.Reads() {
		t.Error("Or or Reads")
	}
}

// BenchmarkParse is the cost of reading the server name of a browser-
// sized hello (Go's, with ALPN and a post-quantum key share).
func BenchmarkParse(b *testing.B) {
	hello := goHello(b, &tls.Config{ServerName: "bench.example.com", NextProtos: []string{"h2", "http/1.1"}})
	b.SetBytes(int64(len(hello)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := sni.Parse(hello); err != nil {
			b.Fatal(err)
		}
	}
}

// TestScannerReadsEachRecordOnce: a hello in one-byte records, arriving
// a byte at a time, costs a Scanner a few allocations (its copy of the
// hello growing), not one per record or per byte: each Scan reads only
// the records that came since the last.
func TestScannerReadsEachRecordOnce(t *testing.T) {
	msg := message(t, goHello(t, &tls.Config{ServerName: "slow.example", NextProtos: []string{"h2", "http/1.1"}}))
	b := records(msg, 1)
	if len(b) > sni.MaxBytes {
		t.Fatalf("%d bytes: over the bound", len(b))
	}
	allocs := testing.AllocsPerRun(5, func() {
		var s sni.Scanner
		for i := 1; i <= len(b); i++ {
			h, _, err := s.Scan(b[:i])
			if i < len(b) && err != sni.ErrShort || i == len(b) && (err != nil || h.ServerName != "slow.example") {
				t.Fatalf("Scan of %d of %d bytes: %q %v", i, len(b), h.ServerName, err)
			}
		}
	})
	if allocs > 20 {
		t.Errorf("%v allocations for a hello of %d records", allocs, len(msg))
	}
}
