package config

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestDNSAndEgressMessages checks that [dns] and [egress] errors name the
// key, its line, and what is wrong.
func TestDNSAndEgressMessages(t *testing.T) {
	src := lines(
		`[dns]`,
		`resolvers = ["udp://192.0.2.53", "quic://192.0.2.54",`,
		`  "https://dns.example"]`,
		`prefer = "ipv5"`,
		`only = "auto"`,
		`min_ttl = "2h"`,
		`[dns.hosts]`,
		`"intranet.example" = ["192.0.2.1", "nope"]`,
		``,
		`[egress]`,
		`bind = ["203.0.113.7", "2001:db8:1::1/64", "host"]`,
		`interface = "eth 0"`,
		`[[egress.rules]]`,
		`users = ["alice"]`,
		`groups = ["nobody"]`,
		`bind = ["0.0.0.0"]`,
		`[[egress.rules]]`,
		`interface = "eth1"`,
		``,
		`[[listen]]`,
		`address = "127.0.0.1:3128"`,
		`egress = { bind = ["192.0.2.9"], bind_same = true }`,
	)
	c, err := Parse([]byte(src), "e.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`e.toml:2: dns.resolvers[1]: resolver "quic://192.0.2.54": scheme "quic" is not udp, tcp, tls or https`,
		`e.toml:3: dns.resolvers[2]: resolver "https://dns.example": an https resolver needs its path, as in https://dns.example/dns-query`,
		`e.toml:6: dns.min_ttl: 2h0m0s is more than max_ttl (1h0m0s)`,
		`e.toml:4: dns.prefer: "ipv5" is not one of ipv4, ipv6, auto`,
		`e.toml:5: dns.only: "auto" is not one of ipv4, ipv6`,
		`e.toml:8: dns.hosts.intranet.example[1]: "nope" is not an IP address`,
		`e.toml:11: egress.bind[1]: "2001:db8:1::1/64" has host bits set: write 2001:db8:1::/64`,
		`e.toml:11: egress.bind[2]: "host" is not an IP address or a CIDR prefix`,
		`e.toml:12: egress.interface: "eth 0" is not an interface name`,
		`e.toml:15: egress.rules[0].groups[0]: group "nobody" is not defined in [acl.groups] nor by an [[auth.providers]] entry's groups`,
		`e.toml:16: egress.rules[0].bind[0]: "0.0.0.0" cannot be a source address`,
		`e.toml:17: egress.rules[1]: names no users and no groups`,
		`e.toml:22: listen[0].egress.bind_same: excludes bind: connections come from the address the client reached`,
	}
	if diff := cmp.Diff(want, errorStrings(t, c.Validate())); diff != "" {
		t.Errorf("Validate messages (-want +got):\n%s", diff)
	}
}

// TestDNSKeysNeedResolvers: [dns] keys without resolvers are refused, a
// valid table passes and its defaults are set.
func TestDNSKeysNeedResolvers(t *testing.T) {
	c, err := Parse([]byte(lines(`[dns]`, `prefer = "ipv4"`, `[[listen]]`, `address = "127.0.0.1:3128"`)), "d.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`d.toml:2: dns.prefer: needs dns.resolvers (or a route's resolvers): without them the system resolver is used`}
	if diff := cmp.Diff(want, errorStrings(t, c.Validate())); diff != "" {
		t.Errorf("Validate messages (-want +got):\n%s", diff)
	}
	c, err = Parse([]byte(lines(`[dns]`, `resolvers = ["tls://192.0.2.53", "https://u:p@dns.example/dns-query"]`, `ca = "ca.pem"`,
		`[dns.hosts]`, `"a.example" = ["192.0.2.1", "2001:db8::1"]`, `[[listen]]`, `address = "127.0.0.1:3128"`)), "d.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !c.DNS.Enabled() || c.DNS.Timeout.Duration != 2*time.Second || c.DNS.CacheSize != 10000 {
		t.Fatalf("dns = %+v", c.DNS)
	}
	if got := c.DNS.HostAddrs()["a.example"]; len(got) != 2 {
		t.Fatalf("hosts = %v", got)
	}
}
