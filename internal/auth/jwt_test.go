package auth_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/rustle-proxy/rustle/internal/auth"
)

// This file tests the JWT provider against a JWKS origin the test runs,
// with tokens it mints.

const (
	testIssuer   = "https://token.actions.githubusercontent.com"
	testAudience = "rustle"
)

// signer is a key the test signs tokens with, published under kid.
type signer struct {
	kid string
	alg jwt.SigningMethod
	key crypto.Signer
}

func newRSASigner(t testing.TB, kid string) signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid, jwt.SigningMethodRS256, k}
}

func newECSigner(t testing.TB, kid string) signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid, jwt.SigningMethodES256, k}
}

func newEdSigner(t testing.TB, kid string) signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signer{kid, jwt.SigningMethodEdDSA, k}
}

// jwk returns the public JWK of s.
func (s signer) jwk() map[string]string {
	b64 := base64.RawURLEncoding.EncodeToString
	switch k := s.key.Public().(type) {
	case *rsa.PublicKey:
		return map[string]string{"kty": "RSA", "kid": s.kid, "use": "sig", "alg": "RS256",
			"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
	case *ecdsa.PublicKey:
		raw, _ := k.Bytes()
		return map[string]string{"kty": "EC", "kid": s.kid, "crv": "P-256", "x": b64(raw[1:33]), "y": b64(raw[33:])}
	case ed25519.PublicKey:
		return map[string]string{"kty": "OKP", "kid": s.kid, "crv": "Ed25519", "x": b64(k)}
	}
	panic("unknown key")
}

// mint returns a token of claims signed by s.
func (s signer) mint(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(s.alg, claims)
	tok.Header["kid"] = s.kid
	str, err := tok.SignedString(s.key)
	if err != nil {
		t.Fatal(err)
	}
	return str
}

// jwksOrigin serves a key set the test changes, counting fetches.
type jwksOrigin struct {
	*httptest.Server
	mu      sync.Mutex
	keys    []signer
	down    bool
	fetches atomic.Int64
}

func startJWKS(t testing.TB, keys ...signer) *jwksOrigin {
	t.Helper()
	o := &jwksOrigin{keys: keys}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.fetches.Add(1)
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		var doc struct {
			Keys []map[string]string `json:"keys"`
		}
		for _, k := range o.keys {
			doc.Keys = append(doc.Keys, k.jwk())
		}
		json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *jwksOrigin) set(down bool, keys ...signer) {
	o.mu.Lock()
	o.keys, o.down = keys, down
	o.mu.Unlock()
}

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

func newJWT(t testing.TB, o *jwksOrigin, modify func(c *auth.JWTConfig)) *auth.Authenticator {
	t.Helper()
	cfg := auth.JWTConfig{
		Issuer: testIssuer, Audience: testAudience, JWKSURL: o.URL + "/jwks", InsecurePlaintext: true,
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
	rs, es, ed := newRSASigner(t, "rs"), newECSigner(t, "es"), newEdSigner(t, "ed")
	foreign := newRSASigner(t, "rs") // same kid, another key
	o := startJWKS(t, rs, es, ed)
	a := newJWT(t, o, nil)
	main := claims("octo-org/app", "refs/heads/main", time.Hour)

	none, err := jwt.NewWithClaims(jwt.SigningMethodNone, main).SignedString(jwt.UnsafeAllowNoneSignatureType)
	if err != nil {
		t.Fatal(err)
	}
	hmacTok := jwt.NewWithClaims(jwt.SigningMethodHS256, main)
	hmacTok.Header["kid"] = "rs"
	pub := rs.jwk()["n"]
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
		{"RS256", bearer(rs.mint(t, main)), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"ES256", bearer(es.mint(t, main)), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"EdDSA", bearer(ed.mint(t, main)), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"another branch", bearer(rs.mint(t, claims("octo-org/app", "refs/heads/dev", time.Hour))), auth.Accepted, "octo-org/app", []string{"ci-any"}},
		{"no group", bearer(rs.mint(t, claims("octo-org/lib", "refs/heads/main", time.Hour))), auth.Accepted, "octo-org/lib", nil},
		{"scheme in lower case", []byte("bearer " + rs.mint(t, main)), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"as a Basic password", basicValue("x-token", rs.mint(t, main)), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"expired", bearer(rs.mint(t, claims("octo-org/app", "refs/heads/main", -time.Minute))), auth.Refused, "", nil},
		{"not yet valid", bearer(rs.mint(t, with(main, "nbf", time.Now().Add(time.Hour).Unix()))), auth.Refused, "", nil},
		{"wrong issuer", bearer(rs.mint(t, with(main, "iss", "https://evil.example"))), auth.Refused, "", nil},
		{"wrong audience", bearer(rs.mint(t, with(main, "aud", "someone-else"))), auth.Refused, "", nil},
		{"audience among others", bearer(rs.mint(t, with(main, "aud", []string{"x", testAudience}))), auth.Accepted, "octo-org/app", []string{"ci-any", "ci-main"}},
		{"no exp", bearer(rs.mint(t, with(main, "exp", nil))), auth.Refused, "", nil},
		{"no user claim", bearer(rs.mint(t, with(main, "repository", nil))), auth.Refused, "", nil},
		{"user claim not a string", bearer(rs.mint(t, with(main, "repository", 7))), auth.Refused, "", nil},
		{"foreign key, known kid", bearer(foreign.mint(t, main)), auth.Refused, "", nil},
		{"unknown kid", bearer(newRSASigner(t, "other").mint(t, main)), auth.Refused, "", nil},
		{"alg none", bearer(none), auth.Refused, "", nil},
		{"HS256 keyed with the public key", bearer(hmac), auth.Refused, "", nil},
		{"tampered payload", bearer(tamper(rs.mint(t, main))), auth.Refused, "", nil},
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
	if n := o.fetches.Load(); n > 2 {
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
	rs := newRSASigner(t, "rs")
	a := newJWT(t, startJWKS(t, rs), func(c *auth.JWTConfig) { c.BasicUser = "x-oidc" })
	tok := rs.mint(t, claims("octo-org/app", "refs/heads/main", time.Hour))
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
	old, next := newRSASigner(t, "2026-11"), newECSigner(t, "2026-12")
	o := startJWKS(t, old)
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
	if r := a.Authenticate(bearer(old.mint(t, main))); r.Outcome != auth.Accepted {
		t.Fatalf("a token of the first key: %v", r.Outcome)
	}
	o.set(false, old, next) // the issuer publishes its next key
	newTok := next.mint(t, main)
	if r := a.Authenticate(bearer(newTok)); r.Outcome != auth.Refused {
		t.Fatalf("a token of the new key within 10s of the last fetch: %v, want refused", r.Outcome)
	}
	tick(11 * time.Second)
	if r := a.Authenticate(bearer(newTok)); r.Outcome != auth.Accepted {
		t.Fatalf("the same token later (the refusal was not cached): %v", r.Outcome)
	}
	if n := o.fetches.Load(); n != 2 {
		t.Errorf("%d fetches, want 2: the unknown key id fetches the set again", n)
	}
	o.set(false, next) // and retires the old one
	retired := old.mint(t, with(main, "jti", "1"))
	before := o.fetches.Load()
	for range 5 {
		// Still in the fetched set: accepted until it is fetched again.
		if r := a.Authenticate(bearer(retired)); r.Outcome != auth.Accepted {
			t.Fatalf("a token of the old key before the refresh: %v", r.Outcome)
		}
	}
	tick(time.Hour) // the set is stale: the next miss fetches it
	retired2 := old.mint(t, with(main, "jti", "2"))
	if r := a.Authenticate(bearer(retired2)); r.Outcome != auth.Refused {
		t.Errorf("a token of the retired key after the refresh: %v", r.Outcome)
	}
	unknown := newRSASigner(t, "unknown")
	for i := range 5 {
		if r := a.Authenticate(bearer(unknown.mint(t, with(main, "jti", i)))); r.Outcome != auth.Refused {
			t.Errorf("a token of an unknown key: %v", r.Outcome)
		}
	}
	if n := o.fetches.Load() - before; n != 1 {
		t.Errorf("%d fetches for the refresh and 5 unknown key ids within 10s, want 1", n)
	}
}

// TestJWTCacheUntilExp checks that a verified token is cached no longer
// than its exp, and that an unreachable key set before any fetch is
// Unavailable, then recovers.
func TestJWTCacheUntilExp(t *testing.T) {
	rs := newRSASigner(t, "rs")
	o := startJWKS(t, rs)
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	at := func() time.Time { return time.Unix(0, clock.Load()) }
	a := newJWT(t, o, func(c *auth.JWTConfig) { c.Now = at; c.CacheTTL = time.Hour; c.Leeway = -1 })
	auth.SetClock(a, at)

	o.set(true, rs)
	tok := bearer(rs.mint(t, claims("octo-org/app", "refs/heads/main", 2*time.Minute)))
	if r := a.Authenticate(tok); r.Outcome != auth.Unavailable {
		t.Fatalf("with the key set unreachable: %v, want unavailable", r.Outcome)
	}
	o.set(false, rs)
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
