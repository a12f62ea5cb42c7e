package main

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/tls"
	"fmt"
	"maps"
	"sync"
)

// tlsSeen tallies what the TLS handshakes of a run used: the key exchange
// of each (tls.ConnectionState.CurveID, as Go names it) and the key of
// the server's certificate. Shared by every copy of a dialer.
type tlsSeen struct {
	mu     sync.Mutex
	curves map[string]int64 // guarded by mu
	cert   string           // guarded by mu; the first handshake's
}

// record counts one completed handshake.
func (s *tlsSeen) record(cs *tls.ConnectionState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.curves == nil {
		s.curves = make(map[string]int64)
	}
	s.curves[cs.CurveID.String()]++
	if s.cert == "" && len(cs.PeerCertificates) > 0 {
		s.cert = certKey(cs.PeerCertificates[0].PublicKey)
	}
}

// result returns the key exchanges counted (nil when there was no
// handshake) and the certificate key seen.
func (s *tlsSeen) result() (map[string]int64, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.curves), s.cert
}

// certKey names the kind of a certificate's public key: "ECDSA P-256",
// "RSA 2048", "Ed25519".
func certKey(pub any) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA %d", k.N.BitLen())
	case ed25519.PublicKey:
		return "Ed25519"
	}
	return fmt.Sprintf("%T", pub)
}
