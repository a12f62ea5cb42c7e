package dialer

import (
	"net/netip"
	"strings"
	"testing"
)

// TestParseHost checks every inet_aton spelling of an IPv4 address, the
// literals netip reads, names, and hosts that end in a number but are no
// address.
func TestParseHost(t *testing.T) {
	tests := []struct {
		host string
		want string // the address; "" = a name
		err  bool   // ErrNumericHost
	}{
		{"127.0.0.1", "127.0.0.1", false},
		{"127.1", "127.0.0.1", false},
		{"127.0.1", "127.0.0.1", false},
		{"2130706433", "127.0.0.1", false},
		{"0x7f000001", "127.0.0.1", false},
		{"0X7F000001", "127.0.0.1", false},
		{"0177.0.0.1", "127.0.0.1", false},
		{"0x7f.0.0.1", "127.0.0.1", false},
		{"0x7f.1", "127.0.0.1", false},
		{"127.0.0.1.", "127.0.0.1", false},
		{"127.0.0.1..", "127.0.0.1", false},
		{"017700000001", "127.0.0.1", false},
		{"127.000.000.001", "127.0.0.1", false},
		{"0", "0.0.0.0", false},
		{"0x", "0.0.0.0", false},
		{"0x.0x.0x.0x", "0.0.0.0", false},
		{"169.254.43518", "169.254.169.254", false},
		{"0xa9fea9fe", "169.254.169.254", false},
		{"10.0x10203", "10.1.2.3", false},
		{"4294967295", "255.255.255.255", false},
		{"::1", "::1", false},
		{"::ffff:127.0.0.1", "::ffff:127.0.0.1", false},
		{"fe80::1%eth0", "fe80::1%eth0", false},
		{"example.com", "", false},
		{"example.com.", "", false},
		{"localhost", "", false},
		{"1e100.net", "", false},
		{"0x7f000001.example", "", false},
		{"0x1g", "", false},
		{"", "", false},
		{".", "", false},
		{"::g", "", false},
		{"4294967296", "", true},
		{"127.0.0.256", "", true},
		{"256.0.0.1", "", true},
		{"1.2.3.4.5", "", true},
		{"08.0.0.1", "", true},
		{"0x100.1", "", true},
		{"1.16777216", "", true},
		{"127..1", "", true},
		{".1", "", true},
		{"example.0x1", "", true},
		{"example.123", "", true},
		{"99999999999999999999999", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.host, func(t *testing.T) {
			ip, ok, err := ParseHost(tt.host)
			if (err == ErrNumericHost) != tt.err || (err != nil && err != ErrNumericHost) {
				t.Fatalf("ParseHost(%q) error = %v, want numeric-host error %v", tt.host, err, tt.err)
			}
			got := ""
			if ok {
				got = ip.String()
			}
			if got != tt.want {
				t.Errorf("ParseHost(%q) = %q (ok %v), want %q", tt.host, got, ok, tt.want)
			}
			if bip, bok, berr := ParseHost([]byte(tt.host)); bip != ip || bok != ok || berr != err {
				t.Errorf("ParseHost([]byte(%q)) = %v, %v, %v; string form %v, %v, %v", tt.host, bip, bok, berr, ip, ok, err)
			}
		})
	}
}

// TestParseHostAllocs checks that an IPv4 host or a name costs nothing.
func TestParseHostAllocs(t *testing.T) {
	for _, h := range []string{"0x7f.1", "example.com", "127.0.0.1"} {
		b := []byte(h)
		if n := testing.AllocsPerRun(100, func() { ParseHost(b) }); n != 0 {
			t.Errorf("ParseHost(%q) allocates %v times", h, n)
		}
	}
}

// FuzzParseHost checks ParseHost against netip.ParseAddr (every address
// netip reads is the same address to ParseHost) and its own invariants:
// an IPv4 result is the same for the dotted-decimal form it prints, a
// name never ends in a number, and it never panics.
func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"127.1", "0x7f000001", "0177.0.0.1", "127.0.0.1.", "1.2.3.256", "::1", "a.b", "0x", "08", "1..2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ip, ok, err := ParseHost(s)
		if ok && err != nil {
			t.Fatalf("ParseHost(%q): an address and an error %v", s, err)
		}
		if want, werr := netip.ParseAddr(s); werr == nil && (!ok || ip != want) {
			t.Fatalf("ParseHost(%q) = %v, %v; netip reads %v", s, ip, ok, want)
		}
		if ok && ip.Is4() {
			again, aok, _ := ParseHost(ip.String())
			if !aok || again != ip {
				t.Fatalf("ParseHost(%q) = %v, which reads back as %v, %v", s, ip, again, aok)
			}
		}
		if !ok && err == nil && !strings.Contains(s, ":") && endsInNumber(strings.TrimRight(s, ".")) && strings.Trim(s, ".") != "" {
			t.Fatalf("ParseHost(%q): a name that ends in a number", s)
		}
	})
}

// TestSplitHostPort checks the one host:port splitter: the host without
// brackets, the port 0-65535, and the errors of what is not host:port.
func TestSplitHostPort(t *testing.T) {
	tests := []struct {
		in      string
		host    string
		port    uint16
		wantErr string // "" = none
	}{
		{"example.com:80", "example.com", 80, ""},
		{"[::1]:443", "::1", 443, ""},
		{"127.0.0.1:0", "127.0.0.1", 0, ""},
		{"h:65535", "h", 65535, ""},
		{":80", "", 80, ""},
		{"h:65536", "", 0, `bad port "65536"`},
		{"h:http", "", 0, `bad port "http"`},
		{"h:-1", "", 0, `bad port "-1"`},
		{"h", "", 0, "missing port in address"},
		{"::1:80", "", 0, "too many colons in address"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			host, port, err := SplitHostPort(tt.in)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("SplitHostPort(%q): %v", tt.in, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("SplitHostPort(%q) = %q, %d, %v; want an error saying %q", tt.in, host, port, err, tt.wantErr)
			}
			if host != tt.host || port != tt.port {
				t.Errorf("SplitHostPort(%q) = %q, %d, want %q, %d", tt.in, host, port, tt.host, tt.port)
			}
		})
	}
	if n := testing.AllocsPerRun(100, func() { SplitHostPort("[2001:db8::1]:8080") }); n != 0 {
		t.Errorf("SplitHostPort allocates %v times", n)
	}
}
