package auth

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Defaults of a JWT provider.
const (
	// DefaultJWKSRefresh is how old a fetched key set may get before a
	// verification fetches it again, when JWTConfig.JWKSRefresh is zero.
	DefaultJWKSRefresh = time.Hour
	// DefaultJWKSMinInterval is how often at most an unknown key id
	// fetches the key set again, when JWTConfig.JWKSMinInterval is zero.
	DefaultJWKSMinInterval = 10 * time.Second
	// DefaultJWTTimeout bounds a key set fetch when JWTConfig.Timeout is
	// zero.
	DefaultJWTTimeout = 5 * time.Second
	// DefaultJWTLeeway is the clock skew allowed on a token's nbf and iat
	// when JWTConfig.Leeway is zero; exp is honoured exactly.
	DefaultJWTLeeway = 30 * time.Second
)

// DefaultJWTAlgorithms are the signature algorithms a token may use when
// JWTConfig.Algorithms is nil: asymmetric ones only, verified with the
// key set's public keys.
var DefaultJWTAlgorithms = []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}

// JWTConfig configures a JWT provider made by [NewJWT].
type JWTConfig struct {
	// Name names the provider in logs; "" means "jwt".
	Name string
	// Issuer is the iss claim a token must carry, exactly, as
	// "https://token.actions.githubusercontent.com". Required.
	Issuer string
	// Audience is a value the token's aud claim must hold. Required.
	Audience string
	// JWKSURL is where the issuer's public keys are fetched from (a JSON
	// Web Key Set), https:// unless InsecurePlaintext. Required.
	JWKSURL string
	// InsecurePlaintext allows an http:// JWKSURL, whose keys anyone on
	// the path could replace: only to a loopback address (tests). false
	// refuses it.
	InsecurePlaintext bool
	// TLS configures TLS towards the JWKS URL's host; nil means the
	// system's roots.
	TLS *tls.Config
	// UserClaim names the claim that becomes the user name, or is a
	// template of claims in braces ("{repository}", "{sub}@{iss}"); ""
	// means "sub". A token whose claim is missing or not a string is
	// refused.
	UserClaim string
	// GroupClaim names the claim whose values (a string or an array of
	// strings) Groups maps to rustle groups, or is a template of claims
	// giving one value ("{repository}@{ref}"); "" means none.
	GroupClaim string
	// Groups maps a rustle group to the values of GroupClaim whose
	// tokens are in it; nil means no rustle groups.
	Groups map[string][]string
	// BasicUser is the user name with which a Basic credential's
	// password is taken as a token; "" means any user name.
	BasicUser string
	// Algorithms are the signature algorithms accepted; nil means
	// DefaultJWTAlgorithms. "none" and HMAC ones are refused.
	Algorithms []string
	// JWKSRefresh is how old the key set may get before a verification
	// fetches it again (keeping the old one if that fails); 0 means
	// DefaultJWKSRefresh.
	JWKSRefresh time.Duration
	// JWKSMinInterval is the least time between two fetches that a
	// token with an unknown key id causes (a rotation); 0 means
	// DefaultJWKSMinInterval.
	JWKSMinInterval time.Duration
	// Timeout bounds a key set fetch; 0 means DefaultJWTTimeout.
	Timeout time.Duration
	// Leeway is the clock skew allowed for nbf and iat; 0 means
	// DefaultJWTLeeway, negative none.
	Leeway time.Duration
	// CacheTTL bounds how long an accepted token is cached, which is
	// never past its exp; 0 means DefaultCacheTTL.
	// NegativeCacheTTL is how long a refused token is; 0 means
	// DefaultNegativeCacheTTL.
	CacheTTL, NegativeCacheTTL time.Duration
	// Logger receives the key set becoming unreachable (warn), reachable
	// again (info) and rotations (info), each line naming the provider
	// (provider=Name); nil = discard.
	Logger *slog.Logger
	// Now returns the time; nil means time.Now. For tests.
	Now func() time.Time
}

// JWT is a [Provider] that verifies bearer tokens (JSON Web Tokens)
// locally, against the public keys of the issuer's key set, fetched on
// first use and kept, fetched again when older than JWKSRefresh or, at
// most every JWKSMinInterval, for a key id it does not know (a
// rotation). A token is accepted when its signature verifies, its iss
// is Issuer, its aud holds Audience, it has an exp in the future and its
// nbf and iat are not ahead of the clock by more than the leeway. The
// user name and groups come from its claims. A key set that cannot be
// fetched while no key is known answers Unavailable. The password of a
// Basic credential is verified as a token too (see BasicUser). It is
// safe for concurrent use.
type JWT struct {
	cfg    JWTConfig
	name   string
	parser *jwt.Parser
	keys   *keySet
	user   claimTemplate
	group  claimTemplate
	groups map[string][]string // a GroupClaim value → the rustle groups it is in
	now    func() time.Time
}

// claimTemplate is a UserClaim or GroupClaim, parsed: one claim, or
// literal text and claims in turn.
type claimTemplate struct {
	claim string         // the one claim; "" for a template
	parts []templatePart // a template's parts
}

type templatePart struct {
	text  string // literal text; "" for a claim
	claim string
}

// NewJWT returns the provider cfg describes, without fetching its keys.
func NewJWT(cfg JWTConfig) (*JWT, error) {
	p := &JWT{cfg: cfg, name: cfg.Name, now: cfg.Now}
	if p.name == "" {
		p.name = "jwt"
	}
	if p.now == nil {
		p.now = time.Now
	}
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, fmt.Errorf("auth: jwt %s: issuer and audience are required", p.name)
	}
	u, err := url.Parse(cfg.JWKSURL)
	switch {
	case err != nil || u.Host == "":
		return nil, fmt.Errorf("auth: jwt %s: jwks_url %q: want https://host/path", p.name, cfg.JWKSURL)
	case u.Scheme == "https":
	case u.Scheme == "http" && cfg.InsecurePlaintext:
		if !loopbackHost(u.Hostname()) {
			return nil, fmt.Errorf("auth: jwt %s: insecure_plaintext is only for a loopback address, not %q", p.name, u.Hostname())
		}
	case u.Scheme == "http":
		return nil, fmt.Errorf("auth: jwt %s: an http:// jwks_url lets anyone on the path forge tokens: use https://, or insecure_plaintext = true for a loopback address", p.name)
	default:
		return nil, fmt.Errorf("auth: jwt %s: jwks_url %q: the scheme is not https", p.name, cfg.JWKSURL)
	}
	if cfg.CacheTTL < 0 || cfg.NegativeCacheTTL < 0 || cfg.JWKSRefresh < 0 || cfg.JWKSMinInterval < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("auth: jwt %s: negative duration", p.name)
	}
	algs := cfg.Algorithms
	if algs == nil {
		algs = DefaultJWTAlgorithms
	}
	for _, a := range algs {
		if !slices.Contains(DefaultJWTAlgorithms, a) {
			return nil, fmt.Errorf("auth: jwt %s: algorithm %q: want one of %s", p.name, a, strings.Join(DefaultJWTAlgorithms, ", "))
		}
	}
	if p.user, err = parseClaimTemplate(cmpOr(cfg.UserClaim, "sub")); err != nil {
		return nil, fmt.Errorf("auth: jwt %s: user_claim: %w", p.name, err)
	}
	if cfg.GroupClaim != "" {
		if p.group, err = parseClaimTemplate(cfg.GroupClaim); err != nil {
			return nil, fmt.Errorf("auth: jwt %s: group_claim: %w", p.name, err)
		}
	} else if len(cfg.Groups) > 0 {
		return nil, fmt.Errorf("auth: jwt %s: groups need a group_claim", p.name)
	}
	p.groups = make(map[string][]string)
	for g, values := range cfg.Groups {
		for _, v := range values {
			p.groups[v] = append(p.groups[v], g)
		}
	}
	leeway := cfg.Leeway
	switch {
	case leeway == 0:
		leeway = DefaultJWTLeeway
	case leeway < 0:
		leeway = 0
	}
	p.parser = jwt.NewParser(jwt.WithValidMethods(algs), jwt.WithIssuer(cfg.Issuer), jwt.WithAudience(cfg.Audience),
		jwt.WithExpirationRequired(), jwt.WithIssuedAt(), jwt.WithLeeway(leeway), jwt.WithTimeFunc(p.now), jwt.WithStrictDecoding())
	timeout := cmpOr(cfg.Timeout, DefaultJWTTimeout)
	// Fetches are rare: no idle connection is kept, so that a provider
	// a reload drops leaves nothing open behind.
	client := &http.Client{Timeout: timeout, Transport: &http.Transport{
		TLSClientConfig: cfg.TLS, Proxy: nil, TLSHandshakeTimeout: timeout, ResponseHeaderTimeout: timeout,
		DisableKeepAlives: true,
	}}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p.keys = &keySet{
		name: p.name, url: cfg.JWKSURL, client: client, log: log, now: p.now,
		refresh:     cmpOr(cfg.JWKSRefresh, DefaultJWKSRefresh),
		minInterval: cmpOr(cfg.JWKSMinInterval, DefaultJWKSMinInterval),
	}
	return p, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// parseClaimTemplate parses a claim name, or a template with claims in
// braces.
func parseClaimTemplate(s string) (claimTemplate, error) {
	if !strings.ContainsAny(s, "{}") {
		return claimTemplate{claim: s}, nil
	}
	var t claimTemplate
	for s != "" {
		i := strings.IndexByte(s, '{')
		if j := strings.IndexByte(s, '}'); j >= 0 && (i < 0 || j < i) {
			return claimTemplate{}, fmt.Errorf("%q: '}' without '{'", s)
		}
		if i < 0 {
			t.parts = append(t.parts, templatePart{text: s})
			break
		}
		if i > 0 {
			t.parts = append(t.parts, templatePart{text: s[:i]})
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return claimTemplate{}, fmt.Errorf("%q: '{' without '}'", s)
		}
		name := s[i+1 : i+j]
		if name == "" || strings.ContainsAny(name, "{") {
			return claimTemplate{}, fmt.Errorf("%q: empty or nested claim name", s)
		}
		t.parts = append(t.parts, templatePart{claim: name})
		s = s[i+j+1:]
	}
	return t, nil
}

// values returns what t gives for claims: a template's one value, or the
// claim's value (a string) or values (an array of strings); nil when a
// claim is missing or of another type.
func (t claimTemplate) values(claims jwt.MapClaims) []string {
	if t.claim != "" {
		switch v := claims[t.claim].(type) {
		case string:
			return []string{v}
		case []any:
			out := make([]string, 0, len(v))
			for _, e := range v {
				s, ok := e.(string)
				if !ok {
					return nil
				}
				out = append(out, s)
			}
			return out
		}
		return nil
	}
	var b strings.Builder
	for _, part := range t.parts {
		if part.claim == "" {
			b.WriteString(part.text)
			continue
		}
		s, ok := claims[part.claim].(string)
		if !ok {
			return nil
		}
		b.WriteString(s)
	}
	return []string{b.String()}
}

// Name returns the provider's name.
func (p *JWT) Name() string { return p.name }

// VerifyPassword verifies pass as a token when user is BasicUser (any
// user when that is ""); the user name the token gives is the user's,
// whatever user was.
func (p *JWT) VerifyPassword(user, pass []byte) Verdict {
	if p.cfg.BasicUser != "" && string(user) != p.cfg.BasicUser || bytes.Count(pass, []byte{'.'}) != 2 {
		return Verdict{TTL: p.negativeTTL()}
	}
	return p.VerifyToken(pass)
}

func (p *JWT) negativeTTL() time.Duration {
	return cmpOr(p.cfg.NegativeCacheTTL, DefaultNegativeCacheTTL)
}

// errUnknownKey and errNoKeys are the key lookup's failures: a key id
// the key set does not have, and no key set at all.
var (
	errUnknownKey = errors.New("auth: jwt: unknown key id")
	errNoKeys     = errors.New("auth: jwt: key set unavailable")
)

// VerifyToken verifies a JSON Web Token.
func (p *JWT) VerifyToken(token []byte) Verdict {
	refused := Verdict{TTL: p.negativeTTL()}
	claims := jwt.MapClaims{}
	_, err := p.parser.ParseWithClaims(string(token), claims, p.keyFunc)
	switch {
	case errors.Is(err, errNoKeys):
		return Verdict{Outcome: Unavailable}
	case errors.Is(err, errUnknownKey):
		return Verdict{TTL: -1} // the key may be published soon
	case err != nil:
		return refused
	}
	users := p.user.values(claims)
	if len(users) != 1 || !validName([]byte(users[0])) {
		return refused
	}
	exp, err := claims.GetExpirationTime()
	if err != nil || exp == nil {
		return refused
	}
	// The parser allows the leeway past exp too; rustle does not: a
	// token is good until its exp, and cached no longer.
	ttl := min(exp.Sub(p.now()), cmpOr(p.cfg.CacheTTL, DefaultCacheTTL))
	if ttl <= 0 {
		return refused
	}
	var groups []string
	if p.group.claim != "" || p.group.parts != nil {
		for _, v := range p.group.values(claims) {
			groups = append(groups, p.groups[v]...)
		}
	}
	return Verdict{User: users[0], Groups: SortGroups(groups), Outcome: Accepted, TTL: ttl}
}

// keyFunc returns the key of the token's key id.
func (p *JWT) keyFunc(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	return p.keys.key(kid, t.Method.Alg())
}
