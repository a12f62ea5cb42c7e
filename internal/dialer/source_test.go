package dialer

import (
	"net/netip"
	"testing"
)

func TestSourcePick(t *testing.T) {
	if !freebindSupported {
		t.Skip("source prefixes need IP_FREEBIND (Linux)")
	}
	v4, v6 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8:ff::1")
	s, err := NewSource(SourceConfig{Bind: []string{"203.0.113.7", "2001:db8:1::/64"}})
	if err != nil {
		t.Fatal(err)
	}
	if a, fb := s.pick(v4, "", netip.Addr{}); a != netip.MustParseAddr("203.0.113.7") || fb {
		t.Fatalf("IPv4 destination: %v freebind %v", a, fb)
	}
	p := netip.MustParsePrefix("2001:db8:1::/64")
	seen := make(map[netip.Addr]bool)
	for range 1000 {
		a, fb := s.pick(v6, "", netip.Addr{})
		if !p.Contains(a) || !fb || a == p.Addr() {
			t.Fatalf("pick %v (freebind %v) not a host of %v", a, fb, p)
		}
		seen[a] = true
	}
	if len(seen) != 1000 {
		t.Fatalf("1000 picks gave %d addresses", len(seen))
	}
	k1, _ := s.pick(v6, "42", netip.Addr{})
	k2, _ := s.pick(v6, "42", netip.Addr{})
	k3, _ := s.pick(v6, "43", netip.Addr{})
	if k1 != k2 || k1 == k3 || !p.Contains(k1) {
		t.Fatalf("session keys: %v %v %v", k1, k2, k3)
	}
	if !s.Owns(k1, v6, "42", netip.Addr{}) || s.Owns(k3, v6, "42", netip.Addr{}) || !s.Owns(k3, v6, "", netip.Addr{}) {
		t.Fatal("Owns disagrees with pick")
	}
	if s.Owns(netip.MustParseAddr("2001:db8:2::1"), v6, "", netip.Addr{}) {
		t.Fatal("Owns an address outside the prefix")
	}

	only4, _ := NewSource(SourceConfig{Bind: []string{"203.0.113.7"}})
	if only4.serves(v6, netip.Addr{}) || !only4.serves(v4, netip.Addr{}) {
		t.Fatal("an IPv4-only source serves IPv6")
	}
	same, _ := NewSource(SourceConfig{BindSame: true})
	reached := netip.MustParseAddr("198.51.100.9")
	if !same.serves(v4, reached) || same.serves(v6, reached) {
		t.Fatal("bind_same serves the other family")
	}
	if a, _ := same.pick(v4, "", reached); a != reached {
		t.Fatalf("bind_same picks %v", a)
	}
}

func TestInPrefix(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		bits   [16]byte
		want   string
	}{
		{"192.0.2.0/24", [16]byte{}, "192.0.2.1"},                                 // not the network
		{"192.0.2.0/30", [16]byte{0xff, 0xff, 0xff, 0xff}, "192.0.2.2"},           // not the broadcast
		{"2001:db8:1::/64", [16]byte{}, "2001:db8:1::1"},                          // not subnet-router anycast
		{"2001:db8:1::/64", [16]byte{8: 0xab, 15: 0xcd}, "2001:db8:1:0:ab00::cd"}, // host bits from bits
		{"2001:db8:1::/60", [16]byte{7: 0xff, 15: 2}, "2001:db8:1:f::2"},          // a partial byte
	} {
		p := netip.MustParsePrefix(tc.prefix)
		if got := inPrefix(p, tc.bits[:p.Addr().BitLen()/8]); got != netip.MustParseAddr(tc.want) {
			t.Errorf("inPrefix(%s, %x) = %v, want %s", tc.prefix, tc.bits, got, tc.want)
		}
	}
}

func TestNewSourceErrors(t *testing.T) {
	for _, cfg := range []SourceConfig{
		{Bind: []string{"nope"}},
		{Bind: []string{"2001:db8::/127"}},
		{Bind: []string{"0.0.0.0"}},
		{Bind: []string{"192.0.2.1"}, BindSame: true},
	} {
		if _, err := NewSource(cfg); err == nil {
			t.Errorf("NewSource(%+v) succeeded", cfg)
		}
	}
}
