package gate_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
)

// routedPolicy is a policy with a user, a rule and a route table: CONNECT
// to port 443 goes through the parents, the rest direct.
func routedPolicy(t testing.TB) *gate.Policy {
	t.Helper()
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{"alice-session-42": "pw"},
		Rules: []acl.Rule{{Name: "all", Action: acl.Allow}},
	})
	tab, err := route.New(proxytest.RouteDefaults(route.Config{
		Parents: []route.ParentConfig{{Name: "a", URL: "http://127.0.0.1:3128"}, {Name: "b", URL: "socks5://127.0.0.1:1080"}},
		Routes: []route.RouteConfig{
			{Name: "tls", Match: acl.Rule{Ports: []string{"443"}}, Via: []string{"a", "b"}, Select: "hash-session"},
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	p.Routes = tab
	return p
}

// TestAuthorizeRoute checks that Authorize chooses the route from the
// request's fields, and that doing so on the keep-alive path (a reused
// grant, a remembered credential) allocates nothing.
func TestAuthorizeRoute(t *testing.T) {
	p := routedPolicy(t)
	s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40010"), nil, nil)
	defer s.Close()
	var g gate.Grant
	tls := connectReq("www.example.com", basicAuth("alice-session-42", "pw"))
	plain := connectReq("www.example.com", basicAuth("alice-session-42", "pw"))
	plain.Port = 80
	if k := s.Authorize(tls, &g); k != gate.OK || g.Route().Name() != "tls" || !g.ViaParent() {
		t.Fatalf("port 443: %v, route %q", k, g.Route().Name())
	}
	g.Finish(0, 0)
	if k := s.Authorize(plain, &g); k != gate.OK || g.Route() != nil || g.ViaParent() {
		t.Fatalf("port 80: %v, route %q", k, g.Route().Name())
	}
	g.Finish(0, 0)
	if n := testing.AllocsPerRun(100, func() {
		s.Authorize(tls, &g)
		g.Finish(0, 0)
	}); n != 0 {
		t.Errorf("Authorize with a route allocates %v times", n)
	}
}

// BenchmarkAuthorizeRoute measures Authorize with a route table on the
// keep-alive path.
func BenchmarkAuthorizeRoute(b *testing.B) {
	p := routedPolicy(b)
	s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40011"), nil, nil)
	defer s.Close()
	var g gate.Grant
	r := connectReq("www.example.com", basicAuth("alice-session-42", "pw"))
	b.ReportAllocs()
	for b.Loop() {
		s.Authorize(r, &g)
		g.Finish(0, 0)
	}
}

// TestSessionKeyLogin checks that a user name with a session key
// authenticates as its base user with that user's password, as a SOCKS5
// login and as Proxy-Authorization, and stays whole as the grant's user;
// a wrong password, or a base user that does not exist, is refused.
func TestSessionKeyLogin(t *testing.T) {
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{"alice": "pw", "bob-session-1": "bpw"},
		Rules: []acl.Rule{{Name: "all", Action: acl.Allow}},
	})
	tests := []struct {
		user, pass string
		ok         bool
	}{
		{"alice-session-42", "pw", true},
		{"alice-session-42", "wrong", false},
		{"alice", "pw", true},
		{"carol-session-1", "pw", false},
		{"bob-session-1", "bpw", true}, // a configured name with a session key is itself
		{"bob-session-2", "bpw", false},
		{"alice-session-", "pw", false}, // no key after the mark
	}
	for _, tt := range tests {
		t.Run(tt.user+" "+tt.pass, func(t *testing.T) {
			s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40011"), nil, nil)
			defer s.Close()
			var g gate.Grant
			name, k := s.Login([]byte(tt.user), []byte(tt.pass), &g)
			if (k == gate.OK) != tt.ok || tt.ok && name != tt.user {
				t.Errorf("Login = %q, %v; want ok %v", name, k, tt.ok)
			}
			g.Finish(0, 0)
			s2 := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40012"), nil, nil)
			defer s2.Close()
			k = s2.Authorize(connectReq("www.example.com", basicAuth(tt.user, tt.pass)), &g)
			if (k == gate.OK) != tt.ok || tt.ok && g.User != tt.user {
				t.Errorf("Authorize = %v, user %q; want ok %v", k, g.User, tt.ok)
			}
			g.Finish(0, 0)
		})
	}
}

// TestAuthoritySpellings checks that every front-end's authority parser
// takes an IPv4 address in any inet_aton spelling as that address (its
// dial address and pool key in dotted decimal) and refuses a host that
// ends in a number but is no address.
func TestAuthoritySpellings(t *testing.T) {
	tests := []struct {
		authority string
		want      string // the dial address; "" = refused
	}{
		{"127.1:80", "127.0.0.1:80"},
		{"2130706433", "127.0.0.1:80"},
		{"0x7F000001:443", "127.0.0.1:443"},
		{"0177.0.0.1", "127.0.0.1:80"},
		{"127.0.0.1.:80", "127.0.0.1:80"},
		{"127.000.000.001", "127.0.0.1:80"},
		{"169.254.43518", "169.254.169.254:80"},
		{"Example.COM.:81", "example.com.:81"},
		{"[::1]:80", "[::1]:80"},
		{"127.0.0.256", ""},
		{"1.2.3.4.5:80", ""},
		{"host.123", ""},
	}
	for _, tt := range tests {
		t.Run(tt.authority, func(t *testing.T) {
			host, port, ipv6, err := gate.ParseAuthority(tt.authority, 80)
			if tt.want == "" {
				if err != gate.ErrAuthority {
					t.Fatalf("ParseAuthority(%q) = %q, %v; want ErrAuthority", tt.authority, host, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAuthority(%q): %v", tt.authority, err)
			}
			if got := string(gate.AppendHostPort(nil, host, port, ipv6)); got != tt.want {
				t.Errorf("dial address of %q = %q, want %q", tt.authority, got, tt.want)
			}
		})
	}
}
