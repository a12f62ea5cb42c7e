package auth_test

import (
	"encoding/base64"
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// This file tests the JWT provider against a JWKS origin the test runs,
// with tokens it mints.

const (
	testIssuer   = "https://token.actions.githubusercontent.com"
	testAudience = "rustle"
)

// claims returns the claims of a GitHub Actions token for repository
// and ref, expiring in ttl.
func claims(repo, ref string, ttl time.Duration) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{
		"iss": testIssuer, "aud": testAudience, "sub": "repo:" + repo + ":ref:" + ref,
		"repository": repo, "ref": ref, "repository_owner": "octo-org",
		"iat": now.Unix(), "nbf": now.Unix(), "exp": now.Add(ttl).Unix(),
	}
}

func with(c jwt.MapClaims, key string, v any) jwt.MapClaims {
	c = maps(c)
	if v == nil {
		delete(c, key)
	} else {
		c[key] = v
	}
	return c
}

func maps(c jwt.MapClaims) jwt.MapClaims {
	out := jwt.MapClaims{}
	for k, v := range c {
		out[k] = v
	}
	return out
}

func newJWT(t testing.TB, o *proxytest.JWKS, modify func(c *auth.JWTConfig)) *auth.Authenticator {
	t.Helper()
	cfg := auth.JWTConfig{
		Issuer: testIssuer, Audience: testAudience, JWKSURL: o.URL, InsecurePlaintext: true,
		UserClaim: "repository", GroupClaim: "{repository}@{ref}",
		Groups: map[string][]string{"ci-main": {"octo-org/app@refs/heads/main"}, "ci-any": {"octo-org/app@refs/heads/main", "octo-org/app@refs/heads/dev"}},
	}
	if modify != nil {
		modify(&cfg)
	}
	p, err := auth.NewJWT(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{Providers: []auth.Provider{p}})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func bearer(tok string) []byte { return []byte("Bearer " + tok) }

// TestJWT checks the verdicts on tokens: valid ones of each key type
// with their user and groups, and refusals for expired, not yet valid,
// wrong issuer, wrong audience, missing exp, missing user claim, a
// foreign key, an unknown key id, "none" and an HMAC token keyed with
// the public key; as a bearer token and as a Basic password.
func TestJWT(t *testing.T) {
	rs, es, ed := proxytest.NewRSASigner(t, "rs"), proxytest.NewECSigner(t, "es"), proxytest.NewEdSigner(t, "ed")
	foreign := proxytest.NewRSASigner(t, "rs") // same kid, another key
	o := proxytest.StartJWKS(t, rs, es, ed)
	a := newJWT(t, o, nil)
	main := claims("octo-org/app", "refs/heads/main", time.Hour)

	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, main).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	hmacTok := jwt.NewWithClaims(jwt.SigningMethodHS256, main)
	hmacTok.Header["kid"] = "rs"
	pub := rs.JWK()["n"]
	hmac, err := hmacTok.SignedString([]byte(pub))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		value  []byte
		want   auth.Outcome
		user   string
		groups []string
	}{
		{"RS256", bearer(rs.Mint(t, main)), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"ES256", bearer(es.Mint(t, main)), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"EdDSA", bearer(ed.Mint(t, main)), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"another branch", bearer(rs.Mint(t, claims("octo-org/app", "refs/heads/dev", time.Hour))), auth.Accepted, "octo-org/app", []string{"ci-any"}},
		{"no group", bearer(rs.Mint(t, claims("octo-org/lib", "refs/heads/main", time.Hour))), auth.Accepted, "octo-org/lib", nil},
		{"scheme in lower case", []byte("bearer " + rs.Mint(t, main)), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"as a Basic password", basicValue("x-token", rs.Mint(t, main)), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"expired", bearer(rs.Mint(t, claims("octo-org/app", "refs/heads/main", -time.Minute))), auth.Refused, "", nil},
		{"expired within the leeway", bearer(rs.Mint(t, claims("octo-org/app", "refs/heads/main", -5*time.Second))), auth.Refused, "", nil},
		{"issued a little ahead of the clock", bearer(rs.Mint(t, with(main, "iat", time.Now().Add(10*time.Second).Unix()))), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"not yet valid", bearer(rs.Mint(t, with(main, "nbf", time.Now().Add(time.Hour).Unix()))), auth.Refused, "", nil},
		{"wrong issuer", bearer(rs.Mint(t, with(main, "iss", "https://evil.example"))), auth.Refused, "", nil},
		{"wrong audience", bearer(rs.Mint(t, with(main, "aud", "someone-else"))), auth.Refused, "", nil},
		{"audience among others", bearer(rs.Mint(t, with(main, "aud", []string{"x", testAudience}))), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"no exp", bearer(rs.Mint(t, with(main, "exp", nil))), auth.Refused, "", nil},
		{"no user claim", bearer(rs.Mint(t, with(main, "repository", nil))), auth.Refused, "", nil},
		{"user claim not a string", bearer(rs.Mint(t, with(main, "repository", 7))), auth.Refused, "", nil},
		{"foreign key, known kid", bearer(foreign.Mint(t, main)), auth.Refused, "", nil},
		{"unknown kid", bearer(proxytest.NewRSASigner(t, "other").Mint(t, main)), auth.Refused, "", nil},
		{"alg none", bearer(none), auth.Refused, "", nil},
		{"HS256 keyed with the public key", bearer(hmac), auth.Refused, "", nil},
		{"tampered payload", bearer(tamper(rs.Mint(t, main))), auth.Refused, "", nil},
		{"not a token", bearer("abc"), auth.Refused, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := a.Authenticate(tt.value)
			if r.Outcome != tt.want || r.User != tt.user || !slices.Equal(r.Groups, tt.groups) {
				t.Errorf("got %v %q %q, want %v %q %q", r.Outcome, r.User, r.Groups, tt.want, tt.user, tt.groups)
			}
		})
	}
	if n := o.Fetches(); n > 2 {
		t.Errorf("%d key set fetches: an unknown kid fetched more than once in JWKSMinInterval", n)
	}
}

// tamper changes the repository claim of a signed token, keeping its
// signature.
func tamper(tok string) string {
	parts := splitDots(tok)
	payload, _ := base64.RawURLEncoding.DecodeString(parts[1])
	var c map[string]any
	json.Unmarshal(payload, &c)
	c["repository"] = "octo-org/other"
	b, _ := json.Marshal(c)
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString(b) + "." + parts[2]
}

func splitDots(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// TestJWTBasicUser checks that with a basic_user set, a token is taken
// as the password of that user name only.
func TestJWTBasicUser(t *testing.T) {
	rs := proxytest.NewRSASigner(t, "rs")
	a := newJWT(t, proxytest.StartJWKS(t, rs), func(c *auth.JWTConfig) { c.BasicUser = "x-oidc" })
	tok := rs.Mint(t, claims("octo-org/app", "refs/heads/main", time.Hour))
	if r := a.Authenticate(basicValue("x-oidc", tok)); r.Outcome != auth.Accepted || r.User != "octo-org/app" {
		t.Errorf("the configured user name: %v %q", r.Outcome, r.User)
	}
	if r := a.Authenticate(basicValue("octo-org", tok)); r.Outcome != auth.Refused {
		t.Errorf("another user name: %v", r.Outcome)
	}
}

// TestJWTRotation rotates the issuer's keys: a token with a new key id
// is accepted once the key set has it (an unknown key id fetches again,
// at most every JWKSMinInterval), and a token signed with a key taken
// out is refused once the set is fetched again.
func TestJWTRotation(t *testing.T) {
	old, next := proxytest.NewRSASigner(t, "2026-11"), proxytest.NewECSigner(t, "2026-12")
	o := proxytest.StartJWKS(t, old)
	now := time.Now()
	var clock atomic.Int64
	clock.Store(now.UnixNano())
	tick := func(d time.Duration) { clock.Add(int64(d)) }
	at := func() time.Time { return time.Unix(0, clock.Load()) }
	a := newJWT(t, o, func(c *auth.JWTConfig) {
		c.Now, c.JWKSMinInterval, c.JWKSRefresh = at, 10*time.Second, time.Hour
	})
	auth.SetClock(a, at)
	main := claims("octo-org/app", "refs/heads/main", 2*time.Hour)
	if r := a.Authenticate(bearer(old.Mint(t, main))); r.Outcome != auth.Accepted {
		t.Fatalf("a token of the first key: %v", r.Outcome)
	}
	o.Set(false, old, next) // the issuer publishes its next key
	newTok := next.Mint(t, main)
	if r := a.Authenticate(bearer(newTok)); r.Outcome != auth.Refused {
		t.Fatalf("a token of the new key within 10s of the last fetch: %v, want refused", r.Outcome)
	}
	tick(11 * time.Second)
	if r := a.Authenticate(bearer(newTok)); r.Outcome != auth.Accepted {
		t.Fatalf("the same token later (the refusal was not cached): %v", r.Outcome)
	}
	if n := o.Fetches(); n != 2 {
		t.Errorf("%d fetches, want 2: the unknown key id fetches the set again", n)
	}
	o.Set(false, next) // and retires the old one
	retired := old.Mint(t, with(main, "jti", "1"))
	before := o.Fetches()
	for range 5 {
		// Still in the fetched set: accepted until it is fetched again.
		if r := a.Authenticate(bearer(retired)); r.Outcome != auth.Accepted {
			t.Fatalf("a token of the old key before the refresh: %v", r.Outcome)
		}
	}
	tick(time.Hour) // the set is stale: the next miss fetches it
	retired2 := old.Mint(t, with(main, "jti", "2"))
	if r := a.Authenticate(bearer(retired2)); r.Outcome != auth.Refused {
		t.Errorf("a token of the retired key after the refresh: %v", r.Outcome)
	}
	unknown := proxytest.NewRSASigner(t, "unknown")
	for i := range 5 {
		if r := a.Authenticate(bearer(unknown.Mint(t, with(main, "jti", i)))); r.Outcome != auth.Refused {
			t.Errorf("a token of an unknown key: %v", r.Outcome)
		}
	}
	if n := o.Fetches() - before; n != 1 {
		t.Errorf("%d fetches for the refresh and 5 unknown key ids within 10s, want 1", n)
	}
}

// TestJWTCacheUntilExp checks that a verified token is cached no longer
// than its exp, and that an unreachable key set before any fetch is
// Unavailable, then recovers.
func TestJWTCacheUntilExp(t *testing.T) {
	rs := proxytest.NewRSASigner(t, "rs")
	o := proxytest.StartJWKS(t, rs)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	at := func() time.Time { return time.Unix(0, clock.Load()) }
	a := newJWT(t, o, func(c *auth.JWTConfig) { c.Now = at; c.CacheTTL = time.Hour; c.Leeway = -1 })
	auth.SetClock(a, at)

	o.Set(true, rs)
	tok := bearer(rs.Mint(t, claims("octo-org/app", "refs/heads/main", 2*time.Minute)))
	if r := a.Authenticate(tok); r.Outcome != auth.Unavailable {
		t.Fatalf("with the key set unreachable: %v, want unavailable", r.Outcome)
	}
	o.Set(false, rs)
	clock.Add(int64(2 * time.Second)) // past the retry interval
	if r := a.Authenticate(tok); r.Outcome != auth.Accepted {
		t.Fatalf("with the key set back: %v", r.Outcome)
	}
	clock.Add(int64(time.Minute))
	if r := a.Authenticate(tok); r.Outcome != auth.Accepted {
		t.Fatalf("a minute later: %v", r.Outcome)
	}
	clock.Add(int64(2 * time.Minute))
	if r := a.Authenticate(tok); r.Outcome != auth.Refused {
		t.Errorf("after its exp: %v, want refused (the cache holds it until exp only)", r.Outcome)
	}
}

// TestJWTConfig checks NewJWT's refusals.
func TestJWTConfig(t *testing.T) {
	ok := auth.JWTConfig{Issuer: testIssuer, Audience: testAudience, JWKSURL: "https://token.actions.githubusercontent.com/.well-known/jwks"}
	tests := []struct {
		name   string
		modify func(c *auth.JWTConfig)
		ok     bool
	}{
		{"https", func(*auth.JWTConfig) {}, true},
		{"no issuer", func(c *auth.JWTConfig) { c.Issuer = "" }, false},
		{"no audience", func(c *auth.JWTConfig) { c.Audience = "" }, false},
		{"http", func(c *auth.JWTConfig) { c.JWKSURL = "http://example.org/jwks" }, false},
		{"http allowed, not loopback", func(c *auth.JWTConfig) { c.JWKSURL, c.InsecurePlaintext = "http://example.org/jwks", true }, false},
		{"http allowed, loopback", func(c *auth.JWTConfig) { c.JWKSURL, c.InsecurePlaintext = "http://127.0.0.1:1/jwks", true }, true},
		{"HS256", func(c *auth.JWTConfig) { c.Algorithms = []string{"HS256"} }, false},
		{"none", func(c *auth.JWTConfig) { c.Algorithms = []string{"none"} }, false},
		{"template", func(c *auth.JWTConfig) { c.UserClaim = "{repository}@{ref}" }, true},
		{"bad template", func(c *auth.JWTConfig) { c.UserClaim = "{repository" }, false},
		{"groups without a claim", func(c *auth.JWTConfig) { c.Groups = map[string][]string{"g": {"v"}} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.modify(&c)
			_, err := auth.NewJWT(c)
			if (err == nil) != tt.ok {
				t.Errorf("NewJWT: %v, want ok %v", err, tt.ok)
			}
		})
	}
}
