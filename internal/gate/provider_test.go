package gate_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// directory is an identity provider for the tests: carl's password is
// "dir-pw" and puts him in the group "builders", dora's "dir-pw2" and no
// group, erin's "dir-pw3" and "builders"; the token "tok.en.ci" names the user "octo/app" in "ci"; while
// down, every verdict is Unavailable.
type directory struct {
	down  atomic.Bool
	calls atomic.Int64
}

func (d *directory) Name() string { return "directory" }

func (d *directory) VerifyPassword(user, pass []byte) auth.Verdict {
	d.calls.Add(1)
	if d.down.Load() {
		return auth.Verdict{Outcome: auth.Unavailable}
	}
	switch string(user) + ":" + string(pass) {
	case "carl:dir-pw":
		return auth.Verdict{User: "carl", Groups: []string{"builders"}, Outcome: auth.Accepted}
	case "dora:dir-pw2":
		return auth.Verdict{User: "dora", Outcome: auth.Accepted}
	case "erin:dir-pw3":
		return auth.Verdict{User: "erin", Groups: []string{"builders"}, Outcome: auth.Accepted}
	}
	return auth.Verdict{}
}

func (d *directory) VerifyToken(tok []byte) auth.Verdict {
	d.calls.Add(1)
	if d.down.Load() {
		return auth.Verdict{Outcome: auth.Unavailable}
	}
	if string(tok) == "tok.en.ci" {
		return auth.Verdict{User: "octo/app", Groups: []string{"ci"}, Outcome: auth.Accepted}
	}
	return auth.Verdict{}
}

// TestAuthorizeProviders drives Authorize and Login with an identity
// provider before the local users: its users and tokens are let in with
// their groups, which access rules match; while it is down, credentials
// it might have accepted are refused AuthUnavailable (503, reason
// auth-unavailable), neither let in nor counted as failures towards a
// cool-down, while local users still get in.
func TestAuthorizeProviders(t *testing.T) {
	dir := &directory{}
	cfg := proxytest.PolicyConfig{
		Users: users, Providers: []auth.Provider{dir, auth.Local}, ProviderGroups: []string{"builders", "ci"},
		Rules: []acl.Rule{
			{Name: "builders", Action: acl.Allow, Groups: []string{"builders"}, Hosts: []string{"build.example"}},
			{Name: "ci", Action: acl.Allow, Groups: []string{"ci"}, Hosts: []string{"registry.example"}},
			{Name: "alice", Action: acl.Allow, Users: []string{"alice"}},
		},
		Limits: &limits.Config{AuthFailures: 2, AuthFailuresPerAddress: 3, AuthWindow: time.Minute, AuthCooldown: time.Minute},
	}
	o := observe(t, &cfg)
	p := proxytest.NewPolicy(t, cfg)
	tests := []struct {
		name   string
		down   bool
		host   string
		authz  []byte
		want   gate.Kind
		user   string
		reason string
	}{
		{"directory user, group rule", false, "build.example", basicAuth("carl", "dir-pw"), gate.OK, "carl", ""},
		{"directory user, another host", false, "registry.example", basicAuth("carl", "dir-pw"), gate.Denied, "carl", "denied"},
		{"directory user without groups", false, "build.example", basicAuth("dora", "dir-pw2"), gate.Denied, "dora", "denied"},
		{"bearer token, claim group rule", false, "registry.example", []byte("Bearer tok.en.ci"), gate.OK, "octo/app", ""},
		{"local user", false, "example.com", basicAuth("alice", "pw"), gate.OK, "alice", ""},
		{"directory down, a verdict cached", true, "build.example", basicAuth("carl", "dir-pw"), gate.OK, "carl", ""},
		{"directory down", true, "build.example", basicAuth("erin", "dir-pw3"), gate.AuthUnavailable, "", "auth-unavailable"},
		{"directory down, again", true, "build.example", basicAuth("erin", "dir-pw3"), gate.AuthUnavailable, "", "auth-unavailable"},
		{"directory down, a token", true, "registry.example", []byte("Bearer tok.en.ci2"), gate.AuthUnavailable, "", "auth-unavailable"},
		{"directory down, wrong password", true, "build.example", basicAuth("carl", "nope"), gate.AuthUnavailable, "", "auth-unavailable"},
		{"directory down, local user", true, "example.com", basicAuth("alice", "pw"), gate.OK, "alice", ""},
		{"directory back", false, "build.example", basicAuth("erin", "dir-pw3"), gate.OK, "erin", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir.down.Store(tt.down)
			s := newSession(t, p)
			var g gate.Grant
			k := s.Authorize(connectReq(tt.host, tt.authz), &g)
			if k != tt.want || g.User != tt.user {
				t.Errorf("Authorize = %v as %q, want %v as %q", k, g.User, tt.want, tt.user)
			}
			g.Answer(k.Status(), k.Status())
			g.Finish(0, 0)
			rec := o.records(t, i+1)[i]
			if r, _ := rec["reason"].(string); r != tt.reason {
				t.Errorf("access log reason %q, want %q", r, tt.reason)
			}
		})
	}
	if n := proxytest.Metric(t, o.m, "rustle_auth_failures_total"); n != 0 {
		t.Errorf("%v authentication failures counted: an unavailable provider is no failure", n)
	}

	t.Run("SOCKS5 login keeps the groups", func(t *testing.T) {
		s := newSession(t, p)
		var lg gate.Grant
		if _, k := s.Login([]byte("carl"), []byte("dir-pw"), &lg); k != gate.OK {
			t.Fatalf("Login: %v", k)
		}
		for host, want := range map[string]gate.Kind{"build.example": gate.OK, "registry.example": gate.Denied} {
			var g gate.Grant
			r := connectReq(host, nil)
			r.Protocol = acl.SOCKS5
			if k := s.Authorize(r, &g); k != want {
				t.Errorf("%s after the login: %v, want %v", host, k, want)
			}
			g.Finish(0, 0)
		}
	})
	t.Run("SOCKS5 login with the directory down", func(t *testing.T) {
		dir.down.Store(true)
		defer dir.down.Store(false)
		var lg gate.Grant
		if _, k := newSession(t, p).Login([]byte("carl"), []byte("dir-pw3"), &lg); k != gate.AuthUnavailable {
			t.Errorf("Login: %v, want auth-unavailable", k)
		}
		lg.Finish(0, 0)
	})
}

// TestEgressProviderGroups checks that an egress rule naming a group an
// identity provider gives chooses the source of that group's users: a
// user's own entry first, then the first rule's group it is in, else the
// listener's default; a bearer token's claim group alike.
func TestEgressProviderGroups(t *testing.T) {
	src := func(addr string) *dialer.Source {
		s, err := dialer.NewSource(dialer.SourceConfig{Bind: []string{addr}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	def, builders, ci, own := src("127.0.0.10"), src("127.0.0.11"), src("127.0.0.12"), src("127.0.0.13")
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: users, Providers: []auth.Provider{&directory{}, auth.Local}, ProviderGroups: []string{"builders", "ci"},
	})
	provided := []string{"builders", "ci"}
	p.Egress = &gate.Egress{Default: def, Rules: []gate.EgressRule{
		{Who: acl.NewSelector(acl.Who{Groups: []string{"ci"}}, nil, provided), Source: ci},
		{Who: acl.NewSelector(acl.Who{Groups: []string{"builders"}}, nil, provided), Source: builders},
		{Who: acl.NewSelector(acl.Who{Users: []string{"erin"}}, nil, provided), Source: own},
	}}
	for _, tt := range []struct {
		name  string
		authz []byte
		want  *dialer.Source
	}{
		{"a directory user in builders", basicAuth("carl", "dir-pw"), builders},
		{"a directory user in no group", basicAuth("dora", "dir-pw2"), def},
		{"a user's own rule before its group's", basicAuth("erin", "dir-pw3"), own},
		{"a token's claim group", []byte("Bearer tok.en.ci"), ci},
		{"a local user", basicAuth("alice", "pw"), def},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var g gate.Grant
			if k := newSession(t, p).Authorize(connectReq("example.com", tt.authz), &g); k != gate.OK {
				t.Fatalf("Authorize: %v", k)
			}
			if got := g.DialOptions().Source; got != tt.want {
				t.Errorf("the source of %s is not the one its rule names", g.User)
			}
			g.Finish(0, 0)
		})
	}
	groups := []string{"x", "builders"}
	if n := testing.AllocsPerRun(100, func() { p.Egress.For("carl-session-1", groups) }); n != 0 {
		t.Errorf("choosing a user's source allocates %v times", n)
	}
}
