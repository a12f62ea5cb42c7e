package socks5

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// checkPrefixes checks the framing of a parser on b, of which it consumed
// n bytes with err: each shorter prefix of b[:n] is incomplete (errShort),
// and b[:n] alone parses the same as b.
func checkPrefixes[T any](t *testing.T, parse func([]byte) (T, int, error), b []byte, v T, n int, err error) {
	t.Helper()
	if n < 0 || n > len(b) {
		t.Fatalf("consumed %d of %d bytes", n, len(b))
	}
	if err == errShort {
		if n != 0 {
			t.Fatalf("errShort with %d bytes consumed", n)
		}
		for k := range len(b) {
			if _, _, err := parse(b[:k]); err != errShort {
				t.Fatalf("prefix of %d bytes of an incomplete message: %v, want errShort", k, err)
			}
		}
		return
	}
	if n == 0 {
		return // refused outright
	}
	for k := range n {
		if _, _, err := parse(b[:k]); err != errShort && err != errVersion && err != errAuthVersion {
			t.Fatalf("prefix of %d of %d bytes: %v, want errShort", k, n, err)
		}
	}
	v2, n2, err2 := parse(b[:n])
	if n2 != n || err2 != err || !cmp.Equal(v, v2, cmp.AllowUnexported(greeting{}, userPass{}, request{}, addr{}, udpHeader{}, socks4Request{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b })) {
		t.Fatalf("b[:%d] parses as %+v, %d, %v; b as %+v, %d, %v", n, v2, n2, err2, v, n, err)
	}
}

// checkAddr checks that a parsed address is what the bytes say.
func checkAddr(t *testing.T, raw []byte, a addr, err error) {
	t.Helper()
	if err != nil && err != errBadHost && err != errUnspecified {
		return
	}
	if got := binary.BigEndian.Uint16(raw[len(raw)-2:]); a.port != got {
		t.Fatalf("port %d, bytes say %d", a.port, got)
	}
	if err == errBadHost {
		if a.ip.IsValid() || a.host != "" {
			t.Fatalf("bad host parsed as %+v", a)
		}
		return
	}
	if a.ip.IsValid() == (a.host != "") {
		t.Fatalf("address %+v has both or neither of ip and host", a)
	}
	if (err == errUnspecified) != (a.ip.IsValid() && a.ip.IsUnspecified()) {
		t.Fatalf("address %v with error %v", a.ip, err)
	}
	switch raw[0] {
	case atypIPv4:
		if a4 := a.ip.As4(); !a.ip.Is4() || !bytes.Equal(a4[:], raw[1:5]) {
			t.Fatalf("IPv4 %v from %x", a.ip, raw[1:5])
		}
	case atypIPv6:
		if a16 := a.ip.As16(); !bytes.Equal(a16[:], raw[1:17]) || a.ip.Is4In6() {
			t.Fatalf("IPv6 %v from %x", a.ip, raw[1:17])
		}
	case atypDomain:
		name := string(raw[2 : len(raw)-2])
		if a.host != "" && (a.host != name || !validHost(name) || strings.ContainsAny(name, ":%")) {
			t.Fatalf("host %q from %q", a.host, name)
		}
		if a.ip.IsValid() && (a.ip.Zone() != "" || a.ip.Is4In6()) {
			t.Fatalf("IP %v from %q", a.ip, name)
		}
	default:
		t.Fatalf("address type %d accepted", raw[0])
	}
}

func FuzzParseGreeting(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		g, n, err := parseGreeting(b)
		checkPrefixes(t, parseGreeting, b, g, n, err)
		switch err {
		case nil:
			if b[0] != version5 || n != 2+int(b[1]) || !bytes.Equal(g.methods, b[2:n]) {
				t.Fatalf("greeting %x parsed as %x, %d", b, g.methods, n)
			}
		case errVersion:
			if len(b) == 0 || b[0] == version5 {
				t.Fatalf("errVersion for %x", b)
			}
		case errShort:
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

func FuzzParseUserPass(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		up, n, err := parseUserPass(b)
		checkPrefixes(t, parseUserPass, b, up, n, err)
		switch err {
		case nil:
			if !bytes.Equal(userPassMsg(string(up.user), string(up.pass)), b[:n]) {
				t.Fatalf("%x parsed as user %q pass %q", b[:n], up.user, up.pass)
			}
		case errAuthVersion:
			if len(b) == 0 || b[0] == userPassVersion {
				t.Fatalf("errAuthVersion for %x", b)
			}
		case errShort:
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

func FuzzParseRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		req, n, err := parseRequest(b)
		checkPrefixes(t, parseRequest, b, req, n, err)
		switch err {
		case nil, errBadHost, errUnspecified:
			if b[0] != version5 || req.cmd != b[1] {
				t.Fatalf("request %x parsed as %+v", b[:n], req)
			}
			checkAddr(t, b[3:n], req.dst, err)
		case errVersion:
			if b[0] == version5 {
				t.Fatalf("errVersion for %x", b)
			}
		case errAddrType:
			if a := b[3]; a == atypIPv4 || a == atypIPv6 || a == atypDomain {
				t.Fatalf("errAddrType for %x", b)
			}
		case errShort:
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

func FuzzParseUDPHeader(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		h, n, err := parseUDPHeader(b)
		switch err {
		case nil:
			if n > len(b) || h.frag != b[2] {
				t.Fatalf("header %x parsed as %+v, %d", b, h, n)
			}
			checkAddr(t, b[3:n], h.dst, nil)
			// The reply header for an IP destination is the same bytes,
			// IPv4-mapped addresses aside (they come back as IPv4).
			mapped := b[3] == atypIPv6 && h.dst.ip.Is4()
			if h.dst.ip.IsValid() && b[3] != atypDomain && b[2] == 0 && !mapped {
				want := appendAddrPort([]byte{0, 0, 0}, netip.AddrPortFrom(h.dst.ip, h.dst.port))
				if !bytes.Equal(want[3:], b[3:n]) {
					t.Fatalf("header %x re-encodes as %x", b[:n], want)
				}
			}
		case errShort, errAddrType, errBadHost, errUnspecified:
			if n != 0 {
				t.Fatalf("error %v with %d bytes consumed", err, n)
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

func FuzzParseSOCKS4(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		req, n, err := parseSOCKS4(b)
		checkPrefixes(t, parseSOCKS4, b, req, n, err)
		switch err {
		case nil, errBadHost, errUnspecified:
			if b[0] != version4 || req.cmd != b[1] || req.dst.port != binary.BigEndian.Uint16(b[2:4]) || b[n-1] != 0 {
				t.Fatalf("request %x parsed as %+v", b[:n], req)
			}
			if n-8 > 2*(maxSOCKS4Field+1) {
				t.Fatalf("request of %d bytes accepted", n)
			}
			is4a := b[4] == 0 && b[5] == 0 && b[6] == 0 && b[7] != 0
			if !is4a && err == nil && req.dst.ip != netip.AddrFrom4([4]byte(b[4:8])) {
				t.Fatalf("SOCKS4 address %v from %x", req.dst.ip, b[4:8])
			}
			if is4a && err == nil && req.dst.host != "" && !validHost(req.dst.host) {
				t.Fatalf("SOCKS4a host %q", req.dst.host)
			}
		case errVersion:
			if b[0] == version4 {
				t.Fatalf("errVersion for %x", b)
			}
		case errUserIDTooBig, errShort:
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

func TestParseRequest(t *testing.T) {
	port80 := []byte{0, 80}
	tests := []struct {
		name    string
		in      []byte
		want    addr
		wantN   int
		wantErr error
	}{
		{"IPv4", append([]byte{5, 1, 0, atypIPv4, 10, 0, 0, 1}, port80...), addr{ip: netip.MustParseAddr("10.0.0.1"), port: 80}, 10, nil},
		{"IPv6", append(append([]byte{5, 1, 0, atypIPv6}, netip.MustParseAddr("2001:db8::1").AsSlice()...), port80...),
			addr{ip: netip.MustParseAddr("2001:db8::1"), port: 80}, 22, nil},
		{"IPv4-mapped IPv6", append(append([]byte{5, 1, 0, atypIPv6}, netip.MustParseAddr("::ffff:10.0.0.1").AsSlice()...), port80...),
			addr{ip: netip.MustParseAddr("10.0.0.1"), port: 80}, 22, nil},
		{"domain", domainRequestMsg(1, "Example.COM.", 443), addr{host: "Example.COM.", port: 443}, 19, nil},
		{"domain with underscore", domainRequestMsg(1, "_dmarc.example", 53), addr{host: "_dmarc.example", port: 53}, 21, nil},
		{"IPv4 literal as domain", domainRequestMsg(1, "192.0.2.7", 80), addr{ip: netip.MustParseAddr("192.0.2.7"), port: 80}, 16, nil},
		{"bracketed IPv6 as domain", domainRequestMsg(1, "[2001:db8::2]", 80), addr{ip: netip.MustParseAddr("2001:db8::2"), port: 80}, 20, nil},
		{"253-byte name", domainRequestMsg(1, strings.Repeat("abcdefgh.", 28)+"a", 80),
			addr{host: strings.Repeat("abcdefgh.", 28) + "a", port: 80}, 4 + 1 + 253 + 2, nil},
		{"extra bytes left", append(domainRequestMsg(1, "a", 1), "data"...), addr{host: "a", port: 1}, 8, nil},

		{"IPv6 with a zone", domainRequestMsg(1, "fe80::1%eth0", 80), addr{port: 80}, 19, errBadHost},
		{"bracketed IPv4", domainRequestMsg(1, "[10.0.0.1]", 80), addr{port: 80}, 17, errBadHost},
		{"254-byte name without final dot", domainRequestMsg(1, strings.Repeat("abcdefgh.", 28)+"ab", 80), addr{port: 80}, 4 + 1 + 254 + 2, errBadHost},
		{"empty label", domainRequestMsg(1, "a..b", 80), addr{port: 80}, 11, errBadHost},
		{"space", domainRequestMsg(1, "a b", 80), addr{port: 80}, 10, errBadHost},
		{"slash", domainRequestMsg(1, "a/b", 80), addr{port: 80}, 10, errBadHost},
		{"unspecified IPv6", append(append([]byte{5, 1, 0, atypIPv6}, make([]byte, 16)...), port80...),
			addr{ip: netip.IPv6Unspecified(), port: 80}, 22, errUnspecified},
		{"unspecified as domain", domainRequestMsg(1, "0.0.0.0", 80), addr{ip: netip.IPv4Unspecified(), port: 80}, 14, errUnspecified},

		{"version 4", []byte{4, 1, 0, atypIPv4, 1, 2, 3, 4, 0, 80}, addr{}, 0, errVersion},
		{"address type 2", []byte{5, 1, 0, 2, 1, 2, 3, 4, 0, 80}, addr{}, 0, errAddrType},
		{"short IPv6", []byte{5, 1, 0, atypIPv6, 1, 2, 3, 4, 0, 80}, addr{}, 0, errShort},
		{"empty", nil, addr{}, 0, errShort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, n, err := parseRequest(tt.in)
			if err != tt.wantErr || n != tt.wantN || req.dst != tt.want {
				t.Errorf("parseRequest(%x) = %+v, %d, %v; want %+v, %d, %v", tt.in, req.dst, n, err, tt.want, tt.wantN, tt.wantErr)
			}
		})
	}
}

func TestParseSOCKS4(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    socks4Request
		wantN   int
		wantErr error
	}{
		{"socks4", "\x04\x01\x00\x50\x0a\x00\x00\x01bob\x00", socks4Request{cmdConnect, addr{ip: netip.MustParseAddr("10.0.0.1"), port: 80}}, 12, nil},
		{"socks4 no user", "\x04\x01\x01\xbb\x0a\x00\x00\x01\x00rest", socks4Request{cmdConnect, addr{ip: netip.MustParseAddr("10.0.0.1"), port: 443}}, 9, nil},
		{"socks4a", "\x04\x01\x00\x50\x00\x00\x00\x09bob\x00example.com\x00", socks4Request{cmdConnect, addr{host: "example.com", port: 80}}, 24, nil},
		{"socks4a IPv6 literal", "\x04\x01\x00\x50\x00\x00\x00\x09\x00::1\x00", socks4Request{cmdConnect, addr{ip: netip.IPv6Loopback(), port: 80}}, 13, nil},
		{"socks4a bad host", "\x04\x01\x00\x50\x00\x00\x00\x09\x00a b\x00", socks4Request{cmdConnect, addr{port: 80}}, 13, errBadHost},
		{"socks4 0.0.0.0", "\x04\x01\x00\x50\x00\x00\x00\x00\x00", socks4Request{cmdConnect, addr{ip: netip.IPv4Unspecified(), port: 80}}, 9, errUnspecified},
		{"255-byte user id", "\x04\x01\x00\x50\x0a\x00\x00\x01" + strings.Repeat("u", 255) + "\x00", socks4Request{cmdConnect, addr{ip: netip.MustParseAddr("10.0.0.1"), port: 80}}, 264, nil},
		{"256-byte user id", "\x04\x01\x00\x50\x0a\x00\x00\x01" + strings.Repeat("u", 256) + "\x00", socks4Request{}, 0, errUserIDTooBig},
		{"256-byte host", "\x04\x01\x00\x50\x00\x00\x00\x01\x00" + strings.Repeat("h", 256), socks4Request{}, 0, errUserIDTooBig},
		{"no NUL yet", "\x04\x01\x00\x50\x0a\x00\x00\x01bob", socks4Request{}, 0, errShort},
		{"socks4a no host NUL yet", "\x04\x01\x00\x50\x00\x00\x00\x01\x00exa", socks4Request{}, 0, errShort},
		{"version 5", "\x05\x01\x00", socks4Request{}, 0, errVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, n, err := parseSOCKS4([]byte(tt.in))
			if err != tt.wantErr || n != tt.wantN || req != tt.want {
				t.Errorf("parseSOCKS4(%q) = %+v, %d, %v; want %+v, %d, %v", tt.in, req, n, err, tt.want, tt.wantN, tt.wantErr)
			}
		})
	}
}

func TestAppendReply(t *testing.T) {
	tests := []struct {
		bnd  netip.AddrPort
		want []byte
	}{
		{netip.MustParseAddrPort("127.0.0.1:1080"), []byte{5, 0, 0, atypIPv4, 127, 0, 0, 1, 0x04, 0x38}},
		{netip.MustParseAddrPort("[::ffff:127.0.0.1]:80"), []byte{5, 0, 0, atypIPv4, 127, 0, 0, 1, 0, 80}},
		{netip.MustParseAddrPort("[::1]:80"), append(append([]byte{5, 0, 0, atypIPv6}, netip.IPv6Loopback().AsSlice()...), 0, 80)},
		{netip.AddrPort{}, []byte{5, 0, 0, atypIPv4, 0, 0, 0, 0, 0, 0}},
	}
	for _, tt := range tests {
		if got := appendReply(nil, repSucceeded, tt.bnd); !bytes.Equal(got, tt.want) {
			t.Errorf("appendReply(%v) = %x, want %x", tt.bnd, got, tt.want)
		}
	}
}
