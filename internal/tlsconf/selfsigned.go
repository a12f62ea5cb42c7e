package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// DefaultHosts are the names WriteSelfSigned certifies when given none.
var DefaultHosts = []string{"127.0.0.1", "::1", "localhost"}

// Names of the files WriteSelfSigned writes.
const (
	CAFile   = "ca.pem"
	CertFile = "server.pem"
	KeyFile  = "server.key"
)

// selfSignedLifetime is how long the CA and server certificates are valid:
// long enough to try things out, within what browsers accept for a leaf.
const selfSignedLifetime = 397 * 24 * time.Hour

// WriteSelfSigned creates a CA (ECDSA P-256) and a server certificate and
// key signed by it for hosts (IP addresses or DNS names; nil means
// DefaultHosts), and writes them to dir as CAFile, CertFile and KeyFile
// (the key with mode 0600). It returns the three paths. The CA's own key is
// never written, so trusting the CA file trusts only this one server
// certificate. WriteSelfSigned refuses to overwrite existing files; dir is
// created if needed.
func WriteSelfSigned(dir string, hosts []string) (caPath, certPath, keyPath string, err error) {
	if len(hosts) == 0 {
		hosts = DefaultHosts
	}
	var ips []net.IP
	var names []string
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
			continue
		}
		if h == "" || strings.ContainsAny(h, " \t\r\n/:@") {
			return "", "", "", fmt.Errorf("tlsconf: self-signed certificate: %q is neither an IP address nor a host name", h)
		}
		names = append(names, h)
	}

	caPath = filepath.Join(dir, CAFile)
	certPath = filepath.Join(dir, CertFile)
	keyPath = filepath.Join(dir, KeyFile)
	paths := []string{caPath, certPath, keyPath}
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			return "", "", "", fmt.Errorf("tlsconf: %s already exists; remove it or choose another directory", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return "", "", "", fmt.Errorf("tlsconf: check %s: %w", p, err)
		}
	}

	caDER, certDER, keyDER, err := makeSelfSigned(hosts[0], names, ips)
	if err != nil {
		return "", "", "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", "", fmt.Errorf("tlsconf: create %s: %w", dir, err)
	}
	files := []struct {
		path string
		typ  string
		der  []byte
		mode os.FileMode
	}{
		{caPath, "CERTIFICATE", caDER, 0o644},
		{certPath, "CERTIFICATE", certDER, 0o644},
		{keyPath, "PRIVATE KEY", keyDER, 0o600},
	}
	for i, f := range files {
		if err := writeNew(f.path, f.mode, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der})); err != nil {
			for _, done := range files[:i] {
				os.Remove(done.path)
			}
			return "", "", "", err
		}
	}
	return caPath, certPath, keyPath, nil
}

// makeSelfSigned returns the DER of a new CA certificate, of a server
// certificate signed by it, and of the server's PKCS #8 key.
func makeSelfSigned(cn string, names []string, ips []net.IP) (caDER, certDER, keyDER []byte, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tlsconf: generate CA key: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("tlsconf: generate server key: %w", err)
	}
	now := time.Now().Add(-time.Hour) // tolerate clocks a little behind
	caSerial, err := serial()
	if err != nil {
		return nil, nil, nil, err
	}
	ca := &x509.Certificate{
		SerialNumber:          caSerial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("rustle self-signed CA %08x", caSerial.Uint64()&0xffffffff), Organization: []string{"rustle"}},
		NotBefore:             now,
		NotAfter:              now.Add(selfSignedLifetime + time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	if caDER, err = x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey); err != nil {
		return nil, nil, nil, fmt.Errorf("tlsconf: create CA certificate: %w", err)
	}
	if ca, err = x509.ParseCertificate(caDER); err != nil {
		return nil, nil, nil, fmt.Errorf("tlsconf: parse CA certificate: %w", err)
	}
	leafSerial, err := serial()
	if err != nil {
		return nil, nil, nil, err
	}
	leaf := &x509.Certificate{
		SerialNumber: leafSerial,
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"rustle"}},
		DNSNames:     names,
		IPAddresses:  ips,
		NotBefore:    now,
		NotAfter:     now.Add(selfSignedLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if certDER, err = x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey); err != nil {
		return nil, nil, nil, fmt.Errorf("tlsconf: create server certificate: %w", err)
	}
	if keyDER, err = x509.MarshalPKCS8PrivateKey(key); err != nil {
		return nil, nil, nil, fmt.Errorf("tlsconf: encode server key: %w", err)
	}
	return caDER, certDER, keyDER, nil
}

// serial returns a random 128-bit certificate serial number.
func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("tlsconf: generate serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // never zero
}

// writeNew writes b to a file that must not exist yet.
func writeNew(path string, mode os.FileMode, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("tlsconf: create %s: %w", path, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("tlsconf: write %s: %w", path, err)
	}
	return nil
}
