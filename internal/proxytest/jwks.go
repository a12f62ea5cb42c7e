package proxytest

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
	"sync"
	"sync/atomic"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// Signer is a token issuer's signing key, published under KID.
type Signer struct {
	KID string
	alg jwt.SigningMethod
	key crypto.Signer
}

// NewRSASigner returns a new RS256 key (2048 bits).
func NewRSASigner(t testing.TB, kid string) *Signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return &Signer{kid, jwt.SigningMethodRS256, k}
}

// NewECSigner returns a new ES256 key.
func NewECSigner(t testing.TB, kid string) *Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Signer{kid, jwt.SigningMethodES256, k}
}

// NewEdSigner returns a new EdDSA (Ed25519) key.
func NewEdSigner(t testing.TB, kid string) *Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return &Signer{kid, jwt.SigningMethodEdDSA, k}
}

// JWK returns the public key as a JSON Web Key.
func (s *Signer) JWK() map[string]string {
	b64 := base64.RawURLEncoding.EncodeToString
	switch k := s.key.Public().(type) {
	case *rsa.PublicKey:
		return map[string]string{"kty": "RSA", "kid": s.KID, "use": "sig", "alg": "RS256",
			"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
	case *ecdsa.PublicKey:
		raw, err := k.Bytes()
		if err != nil {
			panic(err)
		}
		return map[string]string{"kty": "EC", "kid": s.KID, "crv": "P-256", "x": b64(raw[1:33]), "y": b64(raw[33:])}
	case ed25519.PublicKey:
		return map[string]string{"kty": "OKP", "kid": s.KID, "crv": "Ed25519", "x": b64(k)}
	}
	panic("proxytest: unknown key type")
}

// Mint returns a token of claims signed by s, its header naming only
// the algorithm and the key id.
func (s *Signer) Mint(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(s.alg, claims)
	delete(tok.Header, "typ")
	tok.Header["kid"] = s.KID
	str, err := tok.SignedString(s.key)
	if err != nil {
		t.Fatal(err)
	}
	return str
}

// JWKS is an origin serving a JSON Web Key Set that the test changes,
// counting fetches. URL is its address.
type JWKS struct {
	URL     string
	mu      sync.Mutex
	keys    []*Signer
	down    bool
	fetches atomic.Int64
}

// StartJWKS serves keys at URL + "/jwks" (any path, in fact) on a
// loopback port; t.Cleanup closes it.
func StartJWKS(t testing.TB, keys ...*Signer) *JWKS {
	t.Helper()
	o := &JWKS{keys: keys}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
			doc.Keys = append(doc.Keys, k.JWK())
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(doc)
	}))
	t.Cleanup(srv.Close)
	o.URL = srv.URL + "/jwks"
	return o
}

// Set replaces the keys served; down answers every fetch 503.
func (o *JWKS) Set(down bool, keys ...*Signer) {
	o.mu.Lock()
	o.keys, o.down = keys, down
	o.mu.Unlock()
}

// Fetches returns the number of fetches so far.
func (o *JWKS) Fetches() int64 { return o.fetches.Load() }
