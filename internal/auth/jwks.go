package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// maxJWKSBytes bounds a key set document.
const maxJWKSBytes = 1 << 20

// minRSABits is the smallest RSA key a key set may hold.
const minRSABits = 2048

// keySet is a JWT provider's cache of the issuer's public keys.
type keySet struct {
	name        string
	url         string
	client      *http.Client
	log         *slog.Logger
	now         func() time.Time
	refresh     time.Duration // refetch keys older than this
	minInterval time.Duration // the least time between fetches for an unknown key id

	cur    atomic.Pointer[keys] // nil until the first fetch succeeds
	mu     sync.Mutex           // serialises fetches
	tried  time.Time            // the last fetch's start; guarded by mu
	health health
}

// keys is one fetched key set.
type keys struct {
	byID    map[string]publicKey
	fetched time.Time
}

// publicKey is one usable key of a key set.
type publicKey struct {
	key any    // *rsa.PublicKey, *ecdsa.PublicKey or ed25519.PublicKey
	alg string // the JWK's alg; "" = any algorithm of its type
}

// find returns the key for a token with the key id kid ("" when the
// token names none: the set's only key) signed with alg.
func (ks *keys) find(kid, alg string) (any, bool) {
	var k publicKey
	var ok bool
	if kid == "" {
		if len(ks.byID) != 1 {
			return nil, false
		}
		for _, k = range ks.byID {
		}
		ok = true
	} else {
		k, ok = ks.byID[kid]
	}
	if !ok || k.alg != "" && k.alg != alg || !fits(k.key, alg) {
		return nil, false
	}
	return k.key, true
}

// fits reports whether key is of the type alg verifies with.
func fits(key any, alg string) bool {
	switch key.(type) {
	case *rsa.PublicKey:
		return alg[:2] == "RS" || alg[:2] == "PS"
	case *ecdsa.PublicKey:
		return alg[:2] == "ES"
	case ed25519.PublicKey:
		return alg == "EdDSA"
	}
	return false
}

// key returns the public key for kid and alg: from the keys held while
// they are fresh; else, or for a key id they lack, fetched again, at most
// every minInterval (every retryInterval while none is held). A failed
// fetch keeps the keys held, stale or not. It fails with
// errNoKeys when no key set could ever be fetched, errUnknownKey when
// the key set has no such key.
func (s *keySet) key(kid, alg string) (any, error) {
	now := s.now()
	if ks := s.cur.Load(); ks != nil && now.Sub(ks.fetched) < s.refresh {
		if k, ok := ks.find(kid, alg); ok {
			return k, nil
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ks := s.cur.Load()
	stale := ks == nil || now.Sub(ks.fetched) >= s.refresh
	if ks != nil && !stale {
		if k, ok := ks.find(kid, alg); ok { // fetched meanwhile
			return k, nil
		}
	}
	wait := s.minInterval // an unknown key id, or a stale set: a rotation, or an issuer down
	if ks == nil {
		wait = retryInterval
	}
	if now.Sub(s.tried) >= wait {
		s.tried = now
		fresh, err := s.fetch()
		if err != nil {
			s.health.down(s.log, s.name, "jwt: key set", err)
		} else {
			s.health.up(s.log, s.name, "jwt: key set")
			if ks != nil {
				s.log.LogAttrs(context.Background(), slog.LevelDebug, "auth: jwt: key set fetched again",
					slog.String("provider", s.name), slog.Int("keys", len(fresh.byID)))
			}
			s.cur.Store(fresh)
			ks = fresh
		}
	}
	if ks == nil {
		return nil, errNoKeys
	}
	if k, ok := ks.find(kid, alg); ok {
		return k, nil
	}
	return nil, errUnknownKey
}

// jwk is one JSON Web Key (RFC 7517, RFC 7518 section 6, RFC 8037).
type jwk struct {
	Kty string `json:"kty"`
	Kid string `json:"kid"`
	Use string `json:"use"`
	Alg string `json:"alg"`
	N   string `json:"n"`
	E   string `json:"e"`
	Crv string `json:"crv"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// fetch gets and parses the key set. Keys it cannot use (an unknown key
// type or curve, an encryption key, an RSA key under 2048 bits) are
// left out; a set with none left is an error.
func (s *keySet) fetch() (*keys, error) {
	resp, err := s.client.Get(s.url)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", s.url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch %s: status %s", s.url, resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", s.url, err)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("read %s: more than %d bytes", s.url, maxJWKSBytes)
	}
	var doc struct {
		Keys []jwk `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, fmt.Errorf("parse %s: %w", s.url, err)
	}
	ks := &keys{byID: make(map[string]publicKey), fetched: s.now()}
	for _, k := range doc.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		key, err := k.public()
		if err != nil {
			s.log.LogAttrs(context.Background(), slog.LevelDebug, "auth: jwt: key left out",
				slog.String("provider", s.name), slog.String("kid", k.Kid), slog.String("error", err.Error()))
			continue
		}
		ks.byID[k.Kid] = publicKey{key: key, alg: k.Alg}
	}
	if len(ks.byID) == 0 {
		return nil, fmt.Errorf("parse %s: no usable signing key", s.url)
	}
	return ks, nil
}

// public returns k's public key.
func (k *jwk) public() (any, error) {
	switch k.Kty {
	case "RSA":
		n, err1 := b64uint(k.N)
		e, err2 := b64uint(k.E)
		if err := errors.Join(err1, err2); err != nil {
			return nil, err
		}
		if n.BitLen() < minRSABits || !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31-1 {
			return nil, fmt.Errorf("RSA key of %d bits, exponent %v", n.BitLen(), e)
		}
		return &rsa.PublicKey{N: n, E: int(e.Int64())}, nil
	case "EC":
		var curve elliptic.Curve
		switch k.Crv {
		case "P-256":
			curve = elliptic.P256()
		case "P-384":
			curve = elliptic.P384()
		case "P-521":
			curve = elliptic.P521()
		default:
			return nil, fmt.Errorf("curve %q", k.Crv)
		}
		x, err1 := base64.RawURLEncoding.DecodeString(k.X)
		y, err2 := base64.RawURLEncoding.DecodeString(k.Y)
		size := (curve.Params().BitSize + 7) / 8
		if err := errors.Join(err1, err2); err != nil || len(x) != size || len(y) != size {
			return nil, fmt.Errorf("EC point of %s: bad x or y", k.Crv)
		}
		return ecdsa.ParseUncompressedPublicKey(curve, append(append([]byte{4}, x...), y...))
	case "OKP":
		x, err := base64.RawURLEncoding.DecodeString(k.X)
		if k.Crv != "Ed25519" || err != nil || len(x) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("OKP key on %q", k.Crv)
		}
		return ed25519.PublicKey(x), nil
	}
	return nil, fmt.Errorf("key type %q", k.Kty)
}

func b64uint(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, fmt.Errorf("bad base64url integer")
	}
	return new(big.Int).SetBytes(b), nil
}
