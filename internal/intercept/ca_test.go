package intercept

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// newTestCA writes a CA to a temporary directory and loads it.
func newTestCA(t testing.TB) *CA {
	t.Helper()
	certPath, keyPath, err := WriteCA(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestWriteCA checks the files WriteCA makes: a key only its owner may
// read, a certificate that is a CA for server certificates, which LoadCA
// takes; and that it overwrites nothing.
func TestWriteCA(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath, err := WriteCA(dir, "test CA")
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "windows" {
		fi, err := os.Stat(keyPath)
		if err != nil {
			t.Fatal(err)
		}
		if m := fi.Mode().Perm(); m != 0o600 {
			t.Errorf("key mode %#o, want 0600", m)
		}
	}
	ca, err := LoadCA(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	c := ca.Certificate()
	if !c.IsCA || c.Subject.CommonName != "test CA" || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("CA certificate: IsCA %v, CN %q, MaxPathLen %d", c.IsCA, c.Subject.CommonName, c.MaxPathLen)
	}
	if _, _, err := WriteCA(dir, ""); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("WriteCA over existing files: %v", err)
	}
}

// TestLoadCARefuses checks what LoadCA refuses, each with an error that
// says why and shows no byte of the key.
func TestLoadCARefuses(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath, err := WriteCA(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, _ := os.ReadFile(keyPath)
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		return p
	}
	// A certificate that is no CA, with its own key.
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: randomSerial(), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	leafCert := write("leaf.pem", pemBlock("CERTIFICATE", der), 0o644)
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	otherKey := write("other-key.pem", pemBlock("PRIVATE KEY", kder), 0o600)
	// An expired CA.
	cder, kder2, _ := makeCA("old", time.Now().Add(-11*365*24*time.Hour))
	oldCert := write("old.pem", pemBlock("CERTIFICATE", cder), 0o644)
	oldKey := write("old-key.pem", pemBlock("PRIVATE KEY", kder2), 0o600)
	garbage := write("garbage-key.pem", pemBlock("PRIVATE KEY", []byte("not a key at all, secret words")), 0o600)

	cases := []struct {
		name, cert, key, want string
	}{
		{"not a CA", leafCert, otherKey, "not a CA"},
		{"another key", certPath, otherKey, "not the certificate's"},
		{"expired", oldCert, oldKey, "expired"},
		{"no certificate", keyPath, keyPath, "no CERTIFICATE"},
		{"no key", certPath, write("empty-key.pem", nil, 0o600), "no PRIVATE KEY"},
		{"bad key", certPath, garbage, "does not parse"},
		{"missing", filepath.Join(dir, "none.pem"), keyPath, "no such file"},
	}
	if runtime.GOOS != "windows" {
		cases = append(cases,
			struct{ name, cert, key, want string }{"key readable by others", certPath, write("open-key.pem", keyPEM, 0o644), "group and others"},
			struct{ name, cert, key, want string }{"key readable by group", certPath, write("group-key.pem", keyPEM, 0o640), "group and others"})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadCA(tc.cert, tc.key)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadCA: %v, want an error with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "secret words") || strings.Contains(err.Error(), "BEGIN") {
				t.Errorf("the error shows the key: %v", err)
			}
		})
	}
}

// TestCertsMint checks that a minted leaf verifies against the CA for
// its name (a host name in any case, with a trailing dot, an IPv4 and
// an IPv6 address), for server authentication only, within the CA's
// life; and that a name that is neither is refused.
func TestCertsMint(t *testing.T) {
	ca := newTestCA(t)
	certs, err := NewCerts(ca, 10)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Certificate())
	for _, tc := range []struct{ name, verify string }{
		{"api.example.com", "api.example.com"},
		{"API.Example.COM.", "api.example.com"},
		{"127.0.0.1", "127.0.0.1"},
		{"::1", "::1"},
		{"a-very-long-label-that-is-still-fine-0123456789.and-another-long-one-0123456789.example", "a-very-long-label-that-is-still-fine-0123456789.and-another-long-one-0123456789.example"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := certs.Get(tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: tc.verify, Roots: roots}); err != nil {
				t.Errorf("verify for %s: %v", tc.verify, err)
			}
			if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: "other.example", Roots: roots}); err == nil {
				t.Error("the leaf verifies for other.example")
			}
			if d := c.Leaf.NotAfter.Sub(c.Leaf.NotBefore); d != leafLifetime+leafBackdate {
				t.Errorf("lifetime %v", d)
			}
		})
	}
	for _, bad := range []string{"", "a b", "*.example.com", "exa mple", strings.Repeat("a", 64) + ".example"} {
		if _, err := certs.Get(bad); err == nil {
			t.Errorf("Get(%q) minted a certificate", bad)
		}
	}
}

// TestCertsCache checks the cache: a hit serves the same leaf, the
// least recently used name goes first past the bound, a leaf is minted
// anew within leafRenew of its end, and concurrent misses for one name
// mint once.
func TestCertsCache(t *testing.T) {
	ca := newTestCA(t)
	certs, err := NewCerts(ca, 2)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	certs.now = func() time.Time { return now }
	a1, _ := certs.Get("a.example")
	b1, _ := certs.Get("b.example")
	if a2, _ := certs.Get("a.example"); a2 != a1 {
		t.Error("a.example minted again while cached")
	}
	certs.Get("c.example") // evicts b, the least recently used
	if s := certs.Stats(); s.Cached != 2 || s.Evicted != 1 || s.Hits != 1 || s.Misses != 3 {
		t.Errorf("stats %+v, want 2 cached, 1 evicted, 1 hit, 3 misses", s)
	}
	if a3, _ := certs.Get("a.example"); a3 != a1 {
		t.Error("a.example was evicted rather than b.example")
	}
	if b2, _ := certs.Get("b.example"); b2 == b1 {
		t.Error("b.example served from the cache after its eviction")
	}
	// Near its end, a leaf is minted anew.
	now = now.Add(leafLifetime - leafRenew + time.Minute)
	a4, _ := certs.Get("a.example")
	if a4 == a1 || !a4.Leaf.NotAfter.After(a1.Leaf.NotAfter) {
		t.Error("a.example not renewed near its end")
	}

	fresh, _ := NewCerts(ca, 10)
	var wg sync.WaitGroup
	got := make([]any, 16)
	for i := range got {
		wg.Go(func() {
			c, err := fresh.Get("same.example")
			if err != nil {
				t.Error(err)
			}
			got[i] = c
		})
	}
	wg.Wait()
	for _, c := range got {
		if c != got[0] {
			t.Fatal("concurrent misses minted different leaves")
		}
	}
	if s := fresh.Stats(); s.Misses != 1 || s.Cached != 1 {
		t.Errorf("stats %+v", s)
	}
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
