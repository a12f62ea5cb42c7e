package gate_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
)

// newSession opens a session of p for a client at 127.0.0.1, closed at
// the end of the test.
func newSession(t *testing.T, p *gate.Policy) *gate.Session {
	t.Helper()
	s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40000"), nil, nil)
	t.Cleanup(s.Close)
	return s
}

// associateReq is a UDP ASSOCIATE as the SOCKS front-end asks it.
func associateReq() *gate.Request {
	return &gate.Request{
		Protocol: acl.SOCKS5UDP, Method: "UDP ASSOCIATE",
		Addr: netip.IPv4Unspecified(), Target: []byte("127.0.0.1:5000"),
	}
}

// TestAuthorizeAssociation checks that an association is decided on its
// user alone: a login is needed where the policy authenticates, the user's
// connection limit applies, and rules that would refuse a request without
// a destination (a default deny) do not refuse it.
func TestAuthorizeAssociation(t *testing.T) {
	users := map[string]string{"alice": "pw"}
	denyAll := []acl.Rule{{Name: "dns", Action: acl.Allow, Protocols: []string{"socks5-udp"}, Ports: []string{"53"}}}
	tests := []struct {
		name  string
		cfg   proxytest.PolicyConfig
		login bool
		held  bool // another session of the user holds its only connection
		want  gate.Kind
		user  string
		// The access log record's reason; the challenges counted.
		reason     string
		challenges float64
	}{
		{name: "open", cfg: proxytest.PolicyConfig{}, want: gate.OK},
		{name: "open, rules deny by default", cfg: proxytest.PolicyConfig{Rules: denyAll}, want: gate.OK},
		{name: "no login", cfg: proxytest.PolicyConfig{Users: users}, want: gate.NeedAuth, reason: "auth-missing", challenges: 1},
		{name: "login", cfg: proxytest.PolicyConfig{Users: users, Rules: denyAll}, login: true, want: gate.OK, user: "alice"},
		{name: "user limit", cfg: proxytest.PolicyConfig{Users: users, Limits: &limits.Config{MaxConnsPerUser: 1}},
			login: true, held: true, want: gate.UserLimit, user: "alice", reason: "user-limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			o := observe(t, &cfg)
			p := proxytest.NewPolicy(t, cfg)
			if tt.held {
				other := newSession(t, p)
				var lg gate.Grant
				if _, k := other.Login([]byte("alice"), []byte("pw"), &lg); k != gate.OK {
					t.Fatalf("Login: %v", k)
				}
				var g gate.Grant
				if k := other.AuthorizeAssociation(associateReq(), &g); k != gate.OK {
					t.Fatalf("first association: %v", k)
				}
			}
			s := newSession(t, p)
			if tt.login {
				var lg gate.Grant
				if _, k := s.Login([]byte("alice"), []byte("pw"), &lg); k != gate.OK {
					t.Fatalf("Login: %v", k)
				}
			}
			var g gate.Grant
			if k := s.AuthorizeAssociation(associateReq(), &g); k != tt.want {
				t.Fatalf("AuthorizeAssociation = %v, want %v", k, tt.want)
			}
			if g.User != tt.user {
				t.Errorf("User = %q, want %q", g.User, tt.user)
			}
			g.Answer(int(tt.want), tt.want.Status())
			g.Finish(0, 0)
			recs := o.records(t, 1)
			if got, _ := recs[len(recs)-1]["reason"].(string); got != tt.reason {
				t.Errorf("access log reason %q, want %q", got, tt.reason)
			}
			if got := proxytest.Metric(t, o.m, "rustle_auth_challenges_total"); got != tt.challenges {
				t.Errorf("challenges counted %v, want %v", got, tt.challenges)
			}
			if got := proxytest.Metric(t, o.m, "rustle_auth_failures_total"); got != 0 {
				t.Errorf("auth failures counted %v, want 0", got)
			}
		})
	}
}

// TestPermitDatagram checks each datagram's destination against the
// rules (as a socks5-udp request without a method) and the guard, and
// that the deciding rule becomes the grant's.
func TestPermitDatagram(t *testing.T) {
	rules := []acl.Rule{
		{Name: "dns", Action: acl.Allow, Protocols: []string{"socks5-udp"}, Ports: []string{"53"}},
		{Name: "methods", Action: acl.Allow, Methods: []string{"CONNECT"}}, // never matches a datagram
	}
	tests := []struct {
		name  string
		cfg   proxytest.PolicyConfig
		host  string
		dst   string
		allow bool
		rule  string
	}{
		{"no rules", proxytest.PolicyConfig{}, "", "127.0.0.1:9", true, ""},
		{"allowed by a rule", proxytest.PolicyConfig{Rules: rules}, "", "127.0.0.1:53", true, "dns"},
		{"allowed by name", proxytest.PolicyConfig{Rules: rules}, "localhost", "127.0.0.1:53", true, "dns"},
		{"denied by default", proxytest.PolicyConfig{Rules: rules}, "", "127.0.0.1:54", false, acl.DefaultRule},
		{"refused by the guard", proxytest.PolicyConfig{Rules: rules, Guard: true}, "", "127.0.0.1:53", false, "dns"},
		{"guard without rules", proxytest.PolicyConfig{Guard: true}, "", "10.0.0.1:53", false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSession(t, proxytest.NewPolicy(t, tt.cfg))
			var g gate.Grant
			if k := s.AuthorizeAssociation(associateReq(), &g); k != gate.OK {
				t.Fatalf("AuthorizeAssociation = %v", k)
			}
			err := g.PermitDatagram(tt.host, netip.MustParseAddrPort(tt.dst))
			if (err == nil) != tt.allow {
				t.Errorf("PermitDatagram(%q, %s) = %v, want allowed %v", tt.host, tt.dst, err, tt.allow)
			}
			if g.Rule != tt.rule {
				t.Errorf("Rule = %q, want %q", g.Rule, tt.rule)
			}
			g.Finish(0, 0)
		})
	}
}

// TestDatagramParent checks the route of a datagram: a direct route (or
// none) gives no parent, a route through a socks5 parent gives it, one
// through an http parent (which cannot carry UDP) or through parents all
// down without a fallback is an error, never a direct send; and a name
// for a socks5h parent is decided by the rules as unresolved.
func TestDatagramParent(t *testing.T) {
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{})
	tab, err := route.New(proxytest.RouteDefaults(route.Config{
		Parents: []route.ParentConfig{
			{Name: "up", URL: "socks5://127.0.0.1:1080"},
			{Name: "web", URL: "http://127.0.0.1:3128"},
			{Name: "gone", URL: "socks5h://127.0.0.1:1081", Health: route.HealthConfig{MaxFails: 1}},
		},
		Routes: []route.RouteConfig{
			{Name: "dns", Match: acl.Rule{Ports: []string{"53"}}, Via: []string{"direct"}},
			{Name: "http", Match: acl.Rule{Ports: []string{"80"}}, Via: []string{"web"}},
			{Name: "down", Match: acl.Rule{Ports: []string{"81"}}, Via: []string{"gone"}},
			{Name: "rest", Match: acl.Rule{Ports: []string{"1-52", "54-65535"}}, Via: []string{"up"}},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	tab.Parent("gone").Health().Failed(time.Now())
	p.Routes = tab
	s := newSession(t, p)
	var g gate.Grant
	if k := s.AuthorizeAssociation(associateReq(), &g); k != gate.OK {
		t.Fatalf("AuthorizeAssociation = %v", k)
	}
	lo := netip.MustParseAddr("127.0.0.1")
	tests := []struct {
		port    uint16
		parent  string
		wantErr string
	}{
		{53, "", ""},
		{123, "up", ""},
		{80, "", "cannot carry UDP"},
		{81, "", "no parent of the route is up"},
	}
	for _, tt := range tests {
		got, err := g.DatagramParent("", lo, tt.port)
		if got.Name() != tt.parent || (tt.wantErr == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("port %d: parent %q, %v; want %q, error with %q", tt.port, got.Name(), err, tt.parent, tt.wantErr)
		}
	}
	if got, err := g.DatagramParent("example.test", netip.Addr{}, 123); got.Name() != "up" || err != nil {
		t.Errorf("a name on route rest: %q, %v", got.Name(), err)
	}
	if err := g.PermitDatagramName("example.test", 123); err != nil {
		t.Errorf("PermitDatagramName with no rules: %v", err)
	}
	g.Finish(0, 0)
}
