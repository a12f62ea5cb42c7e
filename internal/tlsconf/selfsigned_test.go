package tlsconf

import (
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestWriteSelfSigned(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	caPath, certPath, keyPath, err := WriteSelfSigned(dir, nil)
	if err != nil {
		t.Fatalf("WriteSelfSigned: %v", err)
	}
	for p, name := range map[string]string{caPath: CAFile, certPath: CertFile, keyPath: KeyFile} {
		if p != filepath.Join(dir, name) {
			t.Errorf("path %s, want %s in %s", p, name, dir)
		}
	}
	if fi, err := os.Stat(keyPath); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode: %v, %v; want 0600", fi.Mode(), err)
	}
	caPEM, err := os.ReadFile(caPath)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(mustPEM(t, caPEM))
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || ca.PublicKeyAlgorithm != x509.ECDSA {
		t.Errorf("CA: IsCA %v, key %v; want a CA with an ECDSA key", ca.IsCA, ca.PublicKeyAlgorithm)
	}

	m := newManager(t, Config{Cert: certPath, Key: keyPath})
	leaf := m.cur.Load().cert.Leaf
	if !slices.Equal(leaf.DNSNames, []string{"localhost"}) || len(leaf.IPAddresses) != 2 {
		t.Errorf("server certificate names %v %v, want localhost, 127.0.0.1, ::1", leaf.DNSNames, leaf.IPAddresses)
	}
	// A Go client trusting only ca.pem verifies the server by IP and name.
	for _, tt := range []struct{ network, serverName string }{
		{"tcp4", ""}, {"tcp6", ""}, {"tcp4", "localhost"},
	} {
		t.Run(tt.network+"/"+tt.serverName, func(t *testing.T) {
			srv := serve(t, m.TLSConfig(), tt.network)
			conf := clientConf(t, caPEM)
			conf.ServerName = tt.serverName
			mustDial(t, srv.addr(), conf).echo(t, "trusted")
		})
	}
	t.Run("wrong name", func(t *testing.T) {
		srv := serve(t, m.TLSConfig(), "tcp4")
		conf := clientConf(t, caPEM)
		conf.ServerName = "example.com"
		if _, err := dial(t, srv.addr(), conf); err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Errorf("dial with a name not in the certificate: %v, want a certificate error", err)
		}
	})
	t.Run("no overwrite", func(t *testing.T) {
		_, _, _, err := WriteSelfSigned(dir, nil)
		if err == nil || !strings.Contains(err.Error(), "already exists") {
			t.Fatalf("second WriteSelfSigned: %v, want an already-exists error", err)
		}
		after, _ := os.ReadFile(caPath)
		if string(after) != string(caPEM) {
			t.Error("ca.pem was overwritten")
		}
	})
}

func TestWriteSelfSignedHosts(t *testing.T) {
	dir := t.TempDir()
	_, certPath, _, err := WriteSelfSigned(dir, []string{"proxy.test", "10.1.2.3", "*.proxy.test"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(certPath)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(mustPEM(t, b))
	if err != nil {
		t.Fatal(err)
	}
	if leaf.Subject.CommonName != "proxy.test" ||
		!slices.Equal(leaf.DNSNames, []string{"proxy.test", "*.proxy.test"}) ||
		len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("10.1.2.3")) {
		t.Errorf("certificate CN %q names %v IPs %v", leaf.Subject.CommonName, leaf.DNSNames, leaf.IPAddresses)
	}

	for _, bad := range []string{"", "http://x", "a b"} {
		if _, _, _, err := WriteSelfSigned(t.TempDir(), []string{bad}); err == nil {
			t.Errorf("WriteSelfSigned(%q) succeeded", bad)
		}
	}
}

// mustPEM returns the DER of the first PEM block of b.
func mustPEM(t *testing.T, b []byte) []byte {
	t.Helper()
	blk, _ := pemDecode(b)
	if blk == nil {
		t.Fatal("no PEM block")
	}
	return blk
}
