package acl_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
)

// testConfig is the policy most tests decide against.
var testConfig = acl.Config{
	Groups: map[string][]string{"admins": {"alice", "bob"}},
	Rules: []acl.Rule{
		{Name: "admins-anywhere", Action: acl.Allow, Groups: []string{"admins"}},
		{Name: "no-metadata", Action: acl.Deny, Hosts: []string{"metadata.google.internal"}},
		{Name: "intranet", Action: acl.Allow, Clients: []string{"10.0.0.0/8"}, Hosts: []string{".corp.example", "10.1.0.0/16"},
			AllowPrivate: []string{"10.1.0.0/16"}},
		{Name: "no-social", Action: acl.Deny, Hosts: []string{"*.social.example", "social.example"}},
		{Name: "tls-only", Action: acl.Allow, Protocols: []string{"connect", "socks5"}, Ports: []string{"443", "8443-8444"}},
		{Name: "web", Action: acl.Allow, Protocols: []string{"http", "websocket"}, Methods: []string{"GET", "HEAD"}, Ports: []string{"80"}},
		{Name: "carol-udp", Action: acl.Allow, Users: []string{"carol"}, Protocols: []string{"socks5-udp"}},
	},
}

func mustPolicy(t testing.TB, cfg acl.Config) *acl.Policy {
	t.Helper()
	p, err := acl.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return p
}

var (
	outside = netip.MustParseAddr("203.0.113.7")
	inside  = netip.MustParseAddr("10.9.8.7")
)

func TestDecide(t *testing.T) {
	p := mustPolicy(t, testConfig)
	tests := []struct {
		name      string
		req       acl.Request
		allow     bool
		rule      string
		pending   bool
		permitted map[string][2]bool // address -> ok, private (for pending or allow_private)
	}{
		{name: "group member goes anywhere", req: acl.Request{Client: outside, User: "bob", Host: "169.254.169.254", Port: 80, Method: "GET", Protocol: acl.HTTP},
			allow: true, rule: "admins-anywhere"},
		{name: "metadata name, any case, trailing dot", req: acl.Request{Client: outside, Host: "Metadata.Google.Internal.", Port: 443, Method: "CONNECT", Protocol: acl.Connect},
			allow: false, rule: "no-metadata"},
		{name: "intranet apex from inside", req: acl.Request{Client: inside, Host: "corp.example", Port: 80, Method: "POST", Protocol: acl.HTTP},
			allow: true, rule: "intranet", permitted: map[string][2]bool{"10.1.2.3": {true, true}, "10.2.0.1": {true, false}}},
		{name: "intranet name resolving outside the range", req: acl.Request{Client: inside, Host: "a.example", Port: 80, Method: "GET", Protocol: acl.HTTP},
			allow: true, pending: true, permitted: map[string][2]bool{"10.1.0.9": {true, true}, "198.51.100.1": {true, false}}},
		{name: "intranet subdomain from inside", req: acl.Request{Client: inside, Host: "wiki.corp.example", Port: 8080, Protocol: acl.Connect},
			allow: true, rule: "intranet"},
		{name: "intranet from outside falls through", req: acl.Request{Client: outside, Host: "wiki.corp.example", Port: 8080, Protocol: acl.Connect},
			allow: false, rule: acl.DefaultRule},
		{name: "IPv4-mapped client", req: acl.Request{Client: netip.MustParseAddr("::ffff:10.0.0.1"), Host: "10.1.0.5", Port: 22, Protocol: acl.SOCKS5, Method: "CONNECT"},
			allow: true, rule: "intranet"},
		{name: "social subdomain", req: acl.Request{Client: outside, Host: "www.social.example", Port: 443, Protocol: acl.Connect},
			allow: false, rule: "no-social"},
		{name: "social apex", req: acl.Request{Client: outside, Host: "social.example", Port: 443, Protocol: acl.Connect},
			allow: false, rule: "no-social"},
		{name: "lookalike is not a subdomain", req: acl.Request{Client: outside, Host: "antisocial.example", Port: 443, Protocol: acl.Connect},
			allow: true, rule: "tls-only"},
		{name: "port range", req: acl.Request{Client: outside, Host: "a.example", Port: 8444, Protocol: acl.SOCKS5},
			allow: true, rule: "tls-only"},
		{name: "port outside range", req: acl.Request{Client: outside, Host: "a.example", Port: 8445, Protocol: acl.SOCKS5},
			allow: false, rule: acl.DefaultRule},
		{name: "protocol not listed", req: acl.Request{Client: outside, Host: "a.example", Port: 443, Protocol: acl.SOCKS4},
			allow: false, rule: acl.DefaultRule},
		{name: "web GET", req: acl.Request{Client: outside, Host: "a.example", Port: 80, Method: "GET", Protocol: acl.WebSocket},
			allow: true, rule: "web"},
		{name: "web POST", req: acl.Request{Client: outside, Host: "a.example", Port: 80, Method: "POST", Protocol: acl.HTTP},
			allow: false, rule: acl.DefaultRule},
		{name: "methods are case-sensitive", req: acl.Request{Client: outside, Host: "a.example", Port: 80, Method: "get", Protocol: acl.HTTP},
			allow: false, rule: acl.DefaultRule},
		{name: "user", req: acl.Request{Client: outside, User: "carol", Host: "a.example", Port: 53, Protocol: acl.SOCKS5UDP},
			allow: true, rule: "carol-udp"},
		{name: "no user matches no users criterion", req: acl.Request{Client: outside, Host: "a.example", Port: 53, Protocol: acl.SOCKS5UDP},
			allow: false, rule: acl.DefaultRule},
		{name: "IPv6 literal", req: acl.Request{Client: outside, Host: "2001:db8::1", Port: 443, Protocol: acl.Connect},
			allow: true, rule: "tls-only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(tt.req)
			if d.Allow != tt.allow || d.Rule != tt.rule && !tt.pending || d.Pending() != tt.pending {
				t.Fatalf("Decide = allow %v rule %q pending %v, want %v %q %v", d.Allow, d.Rule, d.Pending(), tt.allow, tt.rule, tt.pending)
			}
			allow, rule := p.Check(tt.req)
			if !tt.pending && (allow != tt.allow || rule != tt.rule) {
				t.Errorf("Check = %v %q, want %v %q", allow, rule, tt.allow, tt.rule)
			}
			for a, want := range tt.permitted {
				ok, private := d.Permit(netip.MustParseAddr(a))
				if ok != want[0] || private != want[1] {
					t.Errorf("Permit(%s) = %v, %v; want %v, %v", a, ok, private, want[0], want[1])
				}
			}
		})
	}
}

func TestDefault(t *testing.T) {
	req := acl.Request{Host: "example.com", Port: 80, Protocol: acl.HTTP}
	for _, tt := range []struct {
		def  string
		want bool
	}{{"", false}, {acl.Deny, false}, {acl.Allow, true}} {
		p := mustPolicy(t, acl.Config{Default: tt.def, Rules: []acl.Rule{{Action: acl.Deny, Ports: []string{"25"}}}})
		if allow, rule := p.Check(req); allow != tt.want || rule != acl.DefaultRule {
			t.Errorf("default %q: Check = %v %q, want %v %q", tt.def, allow, rule, tt.want, acl.DefaultRule)
		}
	}
	p := mustPolicy(t, acl.Config{Rules: []acl.Rule{{Action: acl.Deny, Ports: []string{"25"}}}})
	if _, rule := p.Check(acl.Request{Port: 25}); rule != "rules[0]" {
		t.Errorf("unnamed rule is %q, want rules[0]", rule)
	}
	var zero acl.Decision
	if ok, private := zero.Permit(outside); ok || private {
		t.Errorf("zero Decision permits")
	}
}

// TestPendingCheck checks that Check decides a pending request as if the
// name resolved to nothing: IP rules do not match it.
func TestPendingCheck(t *testing.T) {
	p := mustPolicy(t, acl.Config{Default: acl.Allow, Rules: []acl.Rule{
		{Name: "no-ten", Action: acl.Deny, Hosts: []string{"10.0.0.0/8"}},
	}})
	req := acl.Request{Host: "example.com", Port: 80}
	if allow, rule := p.Check(req); !allow || rule != acl.DefaultRule {
		t.Errorf("Check = %v %q", allow, rule)
	}
	d := p.Decide(req)
	if !d.Pending() || !d.AddrDependent() {
		t.Fatalf("not pending")
	}
	if ok, _ := d.Permit(netip.MustParseAddr("10.1.1.1")); ok || d.Rule != "no-ten" {
		t.Errorf("Permit(10.1.1.1) = %v rule %q", ok, d.Rule)
	}
	if ok, _ := d.Permit(netip.MustParseAddr("::ffff:192.0.2.1")); !ok || d.Rule != acl.DefaultRule {
		t.Errorf("Permit(192.0.2.1) = %v rule %q", ok, d.Rule)
	}
	req.Addr = netip.MustParseAddr("10.0.0.1")
	if allow, rule := p.Check(req); allow || rule != "no-ten" {
		t.Errorf("Check with Addr = %v %q", allow, rule)
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		rule acl.Rule
		want string
	}{
		{"action", acl.Rule{Action: "permit"}, "action"},
		{"client", acl.Rule{Action: acl.Allow, Clients: []string{"10.0.0.0/33"}}, "clients"},
		{"user", acl.Rule{Action: acl.Allow, Users: []string{"a:b"}}, "users"},
		{"group", acl.Rule{Action: acl.Allow, Groups: []string{"nobody"}}, "nobody"},
		{"host", acl.Rule{Action: acl.Allow, Hosts: []string{"bad host"}}, "hosts"},
		{"wildcard in the middle", acl.Rule{Action: acl.Allow, Hosts: []string{"a.*.example"}}, "hosts"},
		{"non-ASCII letter folding to ASCII", acl.Rule{Action: acl.Allow, Hosts: []string{"\u212a.example"}}, "hosts"},
		{"port zero", acl.Rule{Action: acl.Allow, Ports: []string{"0"}}, "ports"},
		{"port range reversed", acl.Rule{Action: acl.Allow, Ports: []string{"90-80"}}, "ports"},
		{"port too big", acl.Rule{Action: acl.Allow, Ports: []string{"65536"}}, "ports"},
		{"method", acl.Rule{Action: acl.Allow, Methods: []string{"GE T"}}, "methods"},
		{"protocol", acl.Rule{Action: acl.Allow, Protocols: []string{"gopher"}}, "gopher"},
		{"allow_private on deny", acl.Rule{Action: acl.Deny, AllowPrivate: []string{"10.0.0.0/8"}}, "allow_private"},
		{"allow_private prefix", acl.Rule{Action: acl.Allow, AllowPrivate: []string{"10.0.0.0"}}, ""},
		{"allow_private junk", acl.Rule{Action: acl.Allow, AllowPrivate: []string{"ten"}}, "allow_private"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := acl.New(acl.Config{Rules: []acl.Rule{tt.rule}})
			if tt.want == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "rules[0]") {
				t.Fatalf("New = %v, want an error naming rules[0] and %q", err, tt.want)
			}
		})
	}
	if _, err := acl.New(acl.Config{Default: "maybe"}); err == nil {
		t.Errorf("New accepted default \"maybe\"")
	}
}

func TestParsePrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.1.2.3":            "10.1.2.3/32",
		"10.1.2.3/8":          "10.0.0.0/8",
		"::1":                 "::1/128",
		"[::1]":               "::1/128",
		"::ffff:10.0.0.0/104": "10.0.0.0/8",
		"fc00::/7":            "fc00::/7",
	} {
		p, err := acl.ParsePrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, bad := range []string{"", "ten", "10.0.0.0/", "fe80::1%eth0", "::ffff:0:0/90"} {
		if _, err := acl.ParsePrefix(bad); err == nil {
			t.Errorf("ParsePrefix(%q) succeeded", bad)
		}
	}
}

func TestProtocolNames(t *testing.T) {
	for _, name := range acl.ProtocolNames() {
		p, err := acl.ParseProtocol(name)
		if err != nil || p.String() != name {
			t.Errorf("ParseProtocol(%q) = %v, %v", name, p, err)
		}
	}
}

// TestDecideAllocs checks that deciding allocates nothing, for names,
// wildcards, IP literals and pending decisions alike.
func TestDecideAllocs(t *testing.T) {
	p := mustPolicy(t, testConfig)
	reqs := []acl.Request{
		{Client: outside, User: "alice", Host: "example.com", Port: 443, Method: "CONNECT", Protocol: acl.Connect},
		{Client: outside, Host: "A-Rather-Long-Host-Name-That-Needs-Lowering.www.social.example", Port: 443, Protocol: acl.Connect},
		{Client: inside, Host: "10.1.2.3", Port: 80, Method: "GET", Protocol: acl.HTTP},
		{Client: outside, Host: "unknown.example", Port: 443, Method: "CONNECT", Protocol: acl.Connect},
	}
	ip := netip.MustParseAddr("198.51.100.1")
	allocs := testing.AllocsPerRun(200, func() {
		for _, r := range reqs {
			d := p.Decide(r)
			d.Permit(ip)
			p.Check(r)
		}
	})
	if allocs != 0 {
		t.Errorf("Decide, Permit and Check allocate %.1f times per run", allocs)
	}
}

func BenchmarkDecide(b *testing.B) {
	p := mustPolicy(b, testConfig)
	r := acl.Request{Client: outside, Host: "www.example.com", Port: 80, Method: "GET", Protocol: acl.HTTP}
	b.ReportAllocs()
	for b.Loop() {
		p.Decide(r)
	}
}

// TestProviderGroups checks groups that identity providers give users
// (Request.Groups): a rule naming one matches a user the request says is
// in it, whatever the user's name; a group both configured and provided
// has the members of either; a group neither configured nor provided is
// an error; and deciding allocates nothing.
func TestProviderGroups(t *testing.T) {
	cfg := acl.Config{
		Groups:         map[string][]string{"devs": {"zoe"}},
		ProviderGroups: []string{"devs", "ci-main"},
		Rules: []acl.Rule{
			{Name: "ci", Action: acl.Allow, Groups: []string{"ci-main"}, Hosts: []string{"registry.example"}},
			{Name: "devs", Action: acl.Allow, Groups: []string{"devs"}},
		},
	}
	p := mustPolicy(t, cfg)
	tests := []struct {
		name  string
		req   acl.Request
		allow bool
		rule  string
	}{
		{"provided group", acl.Request{User: "octo-org/app", Groups: []string{"ci-main"}, Host: "registry.example", Port: 443}, true, "ci"},
		{"provided group, other host", acl.Request{User: "octo-org/app", Groups: []string{"ci-main"}, Host: "example.com", Port: 443}, false, acl.DefaultRule},
		{"no group", acl.Request{User: "octo-org/app", Host: "registry.example", Port: 443}, false, acl.DefaultRule},
		{"configured member", acl.Request{User: "zoe", Host: "example.com", Port: 443}, true, "devs"},
		{"provided member of a configured group", acl.Request{User: "alice", Groups: []string{"devs"}, Host: "example.com", Port: 443}, true, "devs"},
		{"a group no rule names", acl.Request{User: "alice", Groups: []string{"staff"}, Host: "example.com", Port: 443}, false, acl.DefaultRule},
		{"groups without a user", acl.Request{Groups: []string{"devs"}, Host: "example.com", Port: 443}, false, acl.DefaultRule},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if allow, rule := p.Check(tt.req); allow != tt.allow || rule != tt.rule {
				t.Errorf("Check = %v %q, want %v %q", allow, rule, tt.allow, tt.rule)
			}
		})
	}
	r := tests[0].req
	if n := testing.AllocsPerRun(100, func() { p.Decide(r) }); n != 0 {
		t.Errorf("Decide with groups allocates %v times", n)
	}
	cfg.ProviderGroups = []string{"devs"}
	if _, err := acl.New(cfg); err == nil || !strings.Contains(err.Error(), `"ci-main" is not defined`) {
		t.Errorf("New with a group neither configured nor provided: %v", err)
	}
}
