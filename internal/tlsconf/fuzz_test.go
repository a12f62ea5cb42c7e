package tlsconf

import (
	"encoding/pem"
	"testing"
)

// pemDecode returns the bytes of the first PEM block of b, or nil.
func pemDecode(b []byte) ([]byte, []byte) {
	blk, rest := pem.Decode(b)
	if blk == nil {
		return nil, rest
	}
	return blk.Bytes, rest
}

// FuzzParsePair checks that parsePair never panics and that whatever it
// accepts is a usable certificate with its leaf parsed.
func FuzzParsePair(f *testing.F) {
	f.Fuzz(func(t *testing.T, certPEM, keyPEM []byte) {
		cert, err := parsePair(certPEM, keyPEM, "cert.pem", "key.pem")
		if err != nil {
			if cert != nil {
				t.Fatal("certificate returned with an error")
			}
			return
		}
		if cert.Leaf == nil || cert.PrivateKey == nil || len(cert.Certificate) == 0 {
			t.Fatalf("accepted pair is incomplete: %+v", cert)
		}
	})
}
