package gate_test

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
)

// FuzzParseAuthority checks that ParseAuthority reads a string and its
// bytes alike, and that an authority it accepts makes a dial address that
// net.SplitHostPort reads back the same, with the host unchanged but for
// case (an IPv4 spelling in dotted decimal) and a port in range.
func FuzzParseAuthority(f *testing.F) {
	for _, s := range []string{"example.com", "example.com:8080", "[::1]:443", "127.0.0.1:0", "[fe80::1%eth0]:1",
		"a:b:c", "u@h:1", "[1.2.3.4]:80", "h:65536", "h:00080", "127.1:80", "0x7f.1", "1.2.3.256:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		host, port, ipv6, err := gate.ParseAuthority(s, 80)
		bhost, bport, bipv6, berr := gate.ParseAuthority([]byte(s), 80)
		if (err == nil) != (berr == nil) || string(bhost) != host && err == nil || bport != port || bipv6 != ipv6 {
			t.Fatalf("%q: string gives %q %d %v %v, bytes %q %d %v %v", s, host, port, ipv6, err, bhost, bport, bipv6, berr)
		}
		if err != nil {
			return
		}
		if port < 1 || port > 65535 || strings.ContainsAny(host, "@[]%") {
			t.Fatalf("%q: accepted host %q port %d", s, host, port)
		}
		want := host
		if ip, ok, _ := dialer.ParseHost(host); ok && ip.Is4() {
			want = ip.String()
		}
		h, p, err := net.SplitHostPort(string(gate.AppendHostPort(nil, host, port, ipv6)))
		if err != nil || !strings.EqualFold(h, want) || p != strconv.Itoa(port) {
			t.Fatalf("%q: host %q port %d, which reads back as %q %q (%v)", s, host, port, h, p, err)
		}
	})
}
