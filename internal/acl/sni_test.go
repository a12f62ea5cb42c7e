package acl_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// sniConfig has rules on the server_name of a tunnel's ClientHello.
var sniConfig = acl.Config{
	Rules: []acl.Rule{
		{Name: "cdn-good", Action: acl.Allow, Hosts: []string{".cdn.example"}, SNIHosts: []string{"*.good.example"}},
		{Name: "fronted-evil", Action: acl.Deny, SNIHosts: []string{"evil.example"}},
		{Name: "strict", Action: acl.Allow, Hosts: []string{"strict.example"}, SNI: "match"},
		{Name: "web", Action: acl.Allow, Protocols: []string{"http"}},
		{Name: "cdn-ip", Action: acl.Allow, Hosts: []string{"192.0.2.0/24"}, SNIHosts: []string{"ip.good.example"}},
	},
}

// TestDecideSNI: a tunnel whose hello is not read is pending on the
// first rule with sni_hosts that could match it, and decided by the
// server_name once read (case aside); requests that carry no hello never
// match such a rule, and a pending decision asked for a verdict anyway
// is made as if the hello had no name.
func TestDecideSNI(t *testing.T) {
	p := mustPolicy(t, sniConfig)
	cdn := acl.Request{Client: outside, Host: "x.cdn.example", Port: 443, Method: "CONNECT", Protocol: acl.Connect}
	read := func(r acl.Request, name string) acl.Request {
		r.HelloRead, r.SNI = true, name
		return r
	}
	with := func(r acl.Request, f func(*acl.Request)) acl.Request { f(&r); return r }
	tests := []struct {
		name       string
		req        acl.Request
		allow      bool
		rule       string
		pendingSNI bool
		mode       sni.Mode
	}{
		{"hello not read: pending", cdn, true, "", true, sni.Unset},
		{"socks5 too", with(cdn, func(r *acl.Request) { r.Protocol = acl.SOCKS5 }), true, "", true, sni.Unset},
		{"socks4 too", with(cdn, func(r *acl.Request) { r.Protocol = acl.SOCKS4 }), true, "", true, sni.Unset},
		{"hello names a good host", read(cdn, "www.good.example"), true, "cdn-good", false, sni.Unset},
		{"in any case", read(cdn, "WWW.Good.EXAMPLE"), true, "cdn-good", false, sni.Unset},
		{"hello names the fronted host", read(cdn, "evil.example"), false, "fronted-evil", false, sni.Unset},
		{"hello without a name", read(cdn, ""), false, acl.DefaultRule, false, sni.Unset},
		{"another host entirely: the first sni rule with no hosts pends", with(cdn, func(r *acl.Request) { r.Host = "other.example" }), true, "", true, sni.Unset},
		{"a plain HTTP request matches no sni rule", with(cdn, func(r *acl.Request) { r.Protocol, r.Method = acl.HTTP, "GET" }), true, "web", false, sni.Unset},
		{"a WebSocket neither", with(cdn, func(r *acl.Request) { r.Protocol, r.Method = acl.WebSocket, "GET" }), false, acl.DefaultRule, false, sni.Unset},
		{"the rule's mode", read(with(cdn, func(r *acl.Request) { r.Host = "strict.example" }), "strict.example"), true, "strict", false, sni.Match},
		{"an IP literal and its name", read(with(cdn, func(r *acl.Request) { r.Host = "192.0.2.7" }), "ip.good.example"), true, "cdn-ip", false, sni.Unset},
		{"an IP literal and another name", read(with(cdn, func(r *acl.Request) { r.Host = "192.0.2.7" }), "www.bad.example"), false, acl.DefaultRule, false, sni.Unset},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(tt.req)
			if d.Allow != tt.allow || d.Rule != tt.rule || d.PendingSNI() != tt.pendingSNI || d.SNIMode() != tt.mode {
				t.Fatalf("Decide = allow %v rule %q pendingSNI %v mode %v, want %v %q %v %v",
					d.Allow, d.Rule, d.PendingSNI(), d.SNIMode(), tt.allow, tt.rule, tt.pendingSNI, tt.mode)
			}
		})
	}
	// Asked for a verdict while pending: as if the hello named nothing.
	if allow, rule := p.Check(cdn); allow || rule != acl.DefaultRule {
		t.Errorf("Check of a pending tunnel = %v %q, want the default's deny", allow, rule)
	}
	d := p.Decide(cdn)
	if ok, _ := d.Permit(netip.MustParseAddr("198.51.100.1")); ok || d.PendingSNI() {
		t.Errorf("Permit of a pending tunnel = %v (still pending %v), want the default's deny", ok, d.PendingSNI())
	}
	d = p.Decide(cdn)
	if d.PermitUnresolved() {
		t.Error("PermitUnresolved of a pending tunnel allowed it")
	}
	r := read(cdn, "www.good.example")
	if n := testing.AllocsPerRun(100, func() { p.Decide(r); p.Decide(cdn) }); n != 0 {
		t.Errorf("Decide with a server name allocates %v times", n)
	}
}

func TestSNIRuleErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		rule acl.Rule
		want string
	}{
		{"an IP in sni_hosts", acl.Rule{Action: acl.Allow, SNIHosts: []string{"192.0.2.1"}}, "sni_hosts"},
		{"a prefix in sni_hosts", acl.Rule{Action: acl.Allow, SNIHosts: []string{"10.0.0.0/8"}}, "sni_hosts"},
		{"a bad name", acl.Rule{Action: acl.Allow, SNIHosts: []string{"a b"}}, "sni_hosts"},
		{"a bad mode", acl.Rule{Action: acl.Allow, SNI: "strict"}, `sni: "strict"`},
		{"a mode on a deny rule", acl.Rule{Action: acl.Deny, SNI: "match"}, "only for allow rules"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := acl.New(acl.Config{Rules: []acl.Rule{tt.rule}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error with %q", err, tt.want)
			}
		})
	}
	if _, err := acl.NewMatcher([]acl.Rule{{SNI: "log"}}, nil, nil); err == nil {
		t.Error("NewMatcher took a mode as a criterion")
	}
	if err := acl.ParseSNIHost("*.ok.example"); err != nil {
		t.Error(err)
	}
}

// TestMatchHello: a matcher entry with sni_hosts leaves a tunnel whose
// hello is unread pending, and matches its server name once read.
func TestMatchHello(t *testing.T) {
	m, err := acl.NewMatcher([]acl.Rule{
		{Name: "fronted", SNIHosts: []string{".blocked.example"}},
		{Name: "any-443", Ports: []string{"443"}},
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := acl.Request{Host: "cdn.example", Port: 443, Method: "CONNECT", Protocol: acl.Connect}
	if i, pending := m.MatchHello(r); i != 1 || !pending {
		t.Errorf("unread: %d %v, want 1 pending", i, pending)
	}
	if i := m.Match(r); i != 1 {
		t.Errorf("Match of an unread hello = %d, want 1 (as if no name)", i)
	}
	r.HelloRead, r.SNI = true, "www.Blocked.example"
	if i, pending := m.MatchHello(r); i != 0 || pending {
		t.Errorf("read: %d %v, want 0", i, pending)
	}
	r.Protocol = acl.HTTP
	r.HelloRead, r.SNI = false, ""
	if i, pending := m.MatchHello(r); i != 1 || pending {
		t.Errorf("plain HTTP: %d %v, want 1 not pending", i, pending)
	}
	names, err := acl.NewSNINames([]string{"*.cdn.example", "api.example"})
	if err != nil {
		t.Fatal(err)
	}
	if !names.Match("a.CDN.example") || names.Match("cdn.example") || !names.Match("API.example") || names.Match("") {
		t.Error("SNINames.Match")
	}
	if _, err := acl.NewSNINames([]string{"::1"}); err == nil {
		t.Error("NewSNINames took an address")
	}
	var none *acl.SNINames
	if !none.Match("") {
		t.Error("a nil SNINames matches everything")
	}
}
