package intercept

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// Names of the files WriteCA writes.
const (
	CACertFile = "ca.pem"
	CAKeyFile  = "ca-key.pem"
)

// caLifetime is how long a CA WriteCA makes is valid.
const caLifetime = 10 * 365 * 24 * time.Hour

// CA is the certificate authority that signs the leaf certificates of
// intercepted tunnels: its certificate, which clients trust, and its
// private key. It is immutable.
type CA struct {
	cert   *x509.Certificate
	signer crypto.Signer
	// id identifies the CA (the SHA-256 of its certificate): a cache of
	// leaves stays valid across reloads while it is the same.
	id [32]byte
}

// Certificate returns the CA's certificate.
func (ca *CA) Certificate() *x509.Certificate { return ca.cert }

// ID returns the SHA-256 of the CA's certificate (DER).
func (ca *CA) ID() [32]byte { return ca.id }

// LoadCA reads a CA from certPath (a PEM certificate: the first
// CERTIFICATE block) and keyPath (a PEM private key: PKCS#8, EC or
// PKCS#1 RSA; ECDSA, RSA or Ed25519). It refuses a key file that its
// group or others have any permission on (on Unix), a certificate that
// is no CA (basic constraints) or may not sign certificates (key usage),
// one that has expired, and a key that is not the certificate's. The
// errors name the file, never a byte of the key.
func LoadCA(certPath, keyPath string) (*CA, error) {
	if err := checkKeyMode(keyPath); err != nil {
		return nil, err
	}
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, fmt.Errorf("intercept: read the CA certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("intercept: read the CA key: %w", err)
	}
	ca, err := parseCA(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("intercept: CA %s, %s: %w", certPath, keyPath, err)
	}
	return ca, nil
}

// checkKeyMode refuses a key file its group or others have a permission
// on; Windows has no such modes.
func checkKeyMode(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("intercept: read the CA key: %w", err)
	}
	if runtime.GOOS == "windows" {
		return nil
	}
	if m := fi.Mode().Perm(); m&0o077 != 0 {
		return fmt.Errorf("intercept: the CA key %s has mode %#o: group and others may not read it (chmod 600)", path, m)
	}
	return nil
}

// parseCA makes a CA of PEM blocks.
func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	var certDER []byte
	for rest := certPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			certDER = b.Bytes
			break
		}
	}
	if certDER == nil {
		return nil, errors.New("no CERTIFICATE block in the certificate file")
	}
	cert, err := x509.ParseCertificate(certDER)
	if err != nil {
		return nil, fmt.Errorf("parse the certificate: %w", err)
	}
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return nil, errors.New("the certificate is not a CA's (basic constraints)")
	}
	if cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.New("the certificate may not sign certificates (key usage)")
	}
	if now := time.Now(); now.After(cert.NotAfter) {
		return nil, fmt.Errorf("the certificate expired on %s", cert.NotAfter.UTC().Format(time.DateOnly))
	}
	signer, err := parseKey(keyPEM)
	if err != nil {
		return nil, err
	}
	if !publicKeyEqual(signer.Public(), cert.PublicKey) {
		return nil, errors.New("the key is not the certificate's")
	}
	return &CA{cert: cert, signer: signer, id: sha256.Sum256(certDER)}, nil
}

// parseKey returns the private key of the first key block of keyPEM.
func parseKey(keyPEM []byte) (crypto.Signer, error) {
	for rest := keyPEM; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return nil, errors.New("no PRIVATE KEY block in the key file")
		}
		var k any
		var err error
		switch b.Type {
		case "PRIVATE KEY":
			k, err = x509.ParsePKCS8PrivateKey(b.Bytes)
		case "EC PRIVATE KEY":
			k, err = x509.ParseECPrivateKey(b.Bytes)
		case "RSA PRIVATE KEY":
			k, err = x509.ParsePKCS1PrivateKey(b.Bytes)
		default:
			continue
		}
		if err != nil {
			return nil, errors.New("the key block does not parse") // never the parser's words: they may quote the key
		}
		switch k := k.(type) {
		case *ecdsa.PrivateKey:
			return k, nil
		case *rsa.PrivateKey:
			return k, nil
		case ed25519.PrivateKey:
			return k, nil
		}
		return nil, fmt.Errorf("unsupported key type %T", k)
	}
}

// publicKeyEqual reports whether a and b are the same public key.
func publicKeyEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

// WriteCA makes a CA for interception (an ECDSA P-256 key, a
// self-signed certificate valid ten years that may sign server
// certificates only, path length 0) and writes it to dir as CACertFile
// (mode 0644: the certificate clients are to trust) and CAKeyFile (mode
// 0600). name is the certificate's common name ("" = "rustle
// interception CA"). It refuses to overwrite existing files; dir is
// created (0755) when missing. It returns the two paths.
func WriteCA(dir, name string) (certPath, keyPath string, err error) {
	certPath = filepath.Join(dir, CACertFile)
	keyPath = filepath.Join(dir, CAKeyFile)
	for _, p := range []string{certPath, keyPath} {
		if _, err := os.Lstat(p); err == nil {
			return "", "", fmt.Errorf("intercept: %s already exists; remove it or choose another directory", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", "", fmt.Errorf("intercept: check %s: %w", p, err)
		}
	}
	certDER, keyDER, err := makeCA(name, time.Now())
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("intercept: create %s: %w", dir, err)
	}
	if err := writePEM(keyPath, "PRIVATE KEY", keyDER, 0o600); err != nil {
		return "", "", err
	}
	if err := writePEM(certPath, "CERTIFICATE", certDER, 0o644); err != nil {
		os.Remove(keyPath)
		return "", "", err
	}
	return certPath, keyPath, nil
}

// makeCA returns the DER of a new CA certificate and of its PKCS#8 key.
func makeCA(name string, now time.Time) (certDER, keyDER []byte, err error) {
	if name == "" {
		name = "rustle interception CA"
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("intercept: generate the CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          randomSerial(),
		Subject:               pkix.Name{CommonName: name, Organization: []string{"rustle"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	certDER, err = x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("intercept: sign the CA certificate: %w", err)
	}
	keyDER, err = x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("intercept: encode the CA key: %w", err)
	}
	return certDER, keyDER, nil
}

// writePEM writes one PEM block to a new file with mode perm.
func writePEM(path, typ string, der []byte, perm os.FileMode) error {
	var buf bytes.Buffer
	pem.Encode(&buf, &pem.Block{Type: typ, Bytes: der})
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return fmt.Errorf("intercept: create %s: %w", path, err)
	}
	_, err = f.Write(buf.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("intercept: write %s: %w", path, err)
	}
	return nil
}

// randomSerial returns a random positive 127-bit serial number.
func randomSerial() *big.Int {
	var b [16]byte
	rand.Read(b[:])
	b[0] &= 0x7f
	return new(big.Int).SetBytes(b[:])
}
