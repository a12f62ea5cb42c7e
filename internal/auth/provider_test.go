package auth_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// countingProvider accepts the password "pw" for any user, with the
// group "g", and counts its verifications; an "unavailable" password is
// answered Unavailable.
type countingProvider struct {
	calls atomic.Int64
	ttl   time.Duration
	down  atomic.Bool // every verdict Unavailable
}

func (p *countingProvider) Name() string { return "counting" }

func (p *countingProvider) VerifyPassword(user, pass []byte) auth.Verdict {
	p.calls.Add(1)
	if p.down.Load() {
		return auth.Verdict{Outcome: auth.Unavailable}
	}
	switch string(pass) {
	case "pw":
		return auth.Verdict{User: string(user), Groups: []string{"g"}, Outcome: auth.Accepted, TTL: p.ttl}
	case "unavailable":
		return auth.Verdict{Outcome: auth.Unavailable}
	}
	return auth.Verdict{}
}

func (p *countingProvider) VerifyToken([]byte) auth.Verdict {
	p.calls.Add(1)
	return auth.Verdict{}
}

// TestProviderChain checks the order providers are tried in and how
// their verdicts combine: the first acceptance wins, an Unavailable
// provider makes a refusal by the others Unavailable (never a 407, never
// let in) and is not cached, while a later acceptance stands; the local
// users are tried where auth.Local stands; a view made by Only restricts
// the local users only.
func TestProviderChain(t *testing.T) {
	p := &countingProvider{}
	a := newAuth(t, auth.Config{Providers: []auth.Provider{p, auth.Local}})
	tests := []struct {
		name       string
		value      []byte
		want       auth.Outcome
		user       string
		calls      int64 // provider calls on the first try
		cachedCall int64 // provider calls on a second try
	}{
		{"provider accepts", basic("zed", "pw"), auth.Accepted, "zed", 1, 0},
		{"local user after the provider refused", basic("alice", alicePW), auth.Accepted, "alice", 1, 0},
		{"both refuse", basic("alice", "nope"), auth.Refused, "", 1, 0},
		{"provider unavailable, local refuses", basic("alice", "unavailable"), auth.Unavailable, "", 1, 1},
		{"a token: the provider only", bearer("a.b.c"), auth.Refused, "", 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := p.calls.Load()
			r := a.Authenticate(tt.value)
			if r.Outcome != tt.want || r.User != tt.user {
				t.Errorf("got %v %q, want %v %q", r.Outcome, r.User, tt.want, tt.user)
			}
			if n := p.calls.Load() - before; n != tt.calls {
				t.Errorf("%d provider calls, want %d", n, tt.calls)
			}
			before = p.calls.Load()
			if r := a.Authenticate(tt.value); r.Outcome != tt.want {
				t.Errorf("again: %v", r.Outcome)
			}
			if n := p.calls.Load() - before; n != tt.cachedCall {
				t.Errorf("%d provider calls the second time, want %d", n, tt.cachedCall)
			}
		})
	}

	// A local user accepted although the provider before it is down.
	p.down.Store(true)
	if r := a.Authenticate(basic("bob", bobPW)); r.Outcome != auth.Accepted || r.User != "bob" {
		t.Errorf("bob with the provider before the local users down: %v %q", r.Outcome, r.User)
	}
	if r := a.Authenticate(basic("bob", "nope")); r.Outcome != auth.Unavailable {
		t.Errorf("a wrong password with a provider down: %v, want unavailable", r.Outcome)
	}
	p.down.Store(false)
	v := a.Only([]string{"bob"})
	if r := v.Authenticate(basic("alice", alicePW)); r.Outcome != auth.Refused {
		t.Errorf("a view without alice let her in: %v", r.Outcome)
	}
	if r := v.Authenticate(basic("zed", "pw")); r.Outcome != auth.Accepted || r.User != "zed" || len(r.Groups) != 1 {
		t.Errorf("a view restricts the provider's users: %v %q %q", r.Outcome, r.User, r.Groups)
	}
}

// TestProviderCacheHitAllocs checks that a cached verdict of an LDAP
// user and of a bearer token costs no allocation and no call to the
// provider, as a local user's does.
func TestProviderCacheHitAllocs(t *testing.T) {
	for _, tt := range providerCases(t) {
		t.Run(tt.name, func(t *testing.T) {
			if r := tt.a.Authenticate(tt.value); r.Outcome != auth.Accepted {
				t.Fatalf("first check: %v", r.Outcome)
			}
			allocs := testing.AllocsPerRun(100, func() {
				if r := tt.a.Authenticate(tt.value); r.Outcome != auth.Accepted || r.User == "" {
					t.Fatalf("a hit: %v", r.Outcome)
				}
			})
			if allocs != 0 {
				t.Errorf("Authenticate on a cache hit: %v allocations, want 0", allocs)
			}
			if tt.stop != nil {
				tt.stop() // the directory gone: only the cache can answer
				if r := tt.a.Authenticate(tt.value); r.Outcome != auth.Accepted {
					t.Errorf("a hit with the directory stopped: %v", r.Outcome)
				}
			}
		})
	}
}

type providerCase struct {
	name  string
	a     *auth.Authenticator
	value []byte
	stop  func()
}

// providerCases returns an Authenticator and accepted credentials of
// each kind: a local user, an LDAP user (when slapd is installed; the
// test is skipped otherwise, failed under CI) and a bearer token.
func providerCases(t testing.TB) []providerCase {
	t.Helper()
	local := newAuth(t, auth.Config{})
	rs := proxytest.NewRSASigner(t, "rs")
	jwtAuth := newJWT(t, proxytest.StartJWKS(t, rs), nil)
	tok := rs.Mint(t, claims("octo-org/app", "refs/heads/main", time.Hour))
	d := proxytest.StartSlapd(t, proxytest.DirectoryLDIF)
	lp, err := auth.NewLDAP(auth.LDAPConfig{
		URL: d.URL, InsecurePlaintext: true, BindDN: "cn=svc,dc=example,dc=org", BindPassword: "svc-pw",
		BaseDN: "ou=people,dc=example,dc=org", UserFilter: activeFilter, GroupAttribute: "memberOf", Groups: ldapGroups,
	})
	if err != nil {
		t.Fatal(err)
	}
	ldapAuth, err := auth.New(auth.Config{Providers: []auth.Provider{lp}})
	if err != nil {
		t.Fatal(err)
	}
	return []providerCase{
		{"local bcrypt user", local, basic("alice", alicePW), nil},
		{"LDAP user", ldapAuth, basicValue("alice", "alice-pw"), d.Stop},
		{"bearer token", jwtAuth, bearer(tok), nil},
		{"token as a Basic password", jwtAuth, basicValue("x", tok), nil},
	}
}

// BenchmarkAuthenticateHit measures a cached verdict of each kind of
// credential: what every request of a client that the session's memo
// does not cover (another connection, after a second) costs.
func BenchmarkAuthenticateHit(b *testing.B) {
	for _, tt := range providerCases(b) {
		b.Run(tt.name, func(b *testing.B) {
			if r := tt.a.Authenticate(tt.value); r.Outcome != auth.Accepted {
				b.Fatalf("first check: %v", r.Outcome)
			}
			b.ReportAllocs()
			for b.Loop() {
				tt.a.Authenticate(tt.value)
			}
		})
	}
}
