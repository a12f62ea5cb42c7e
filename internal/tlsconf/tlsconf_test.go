package tlsconf

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestNew(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, certPEM := pairFiles(t, dir, "good")
	m := newManager(t, Config{Cert: certFile, Key: keyFile})
	srv := serve(t, m.TLSConfig(), "tcp4")
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			conf := clientConf(t, certPEM)
			conf.MinVersion, conf.MaxVersion = v, v
			conf.NextProtos = []string{"h2", "http/1.1"}
			s := mustDial(t, srv.addr(), conf)
			cs := s.conn.ConnectionState()
			if cs.Version != v {
				t.Errorf("version = %x, want %x", cs.Version, v)
			}
			if cs.NegotiatedProtocol != "http/1.1" {
				t.Errorf("ALPN = %q, want http/1.1", cs.NegotiatedProtocol)
			}
			if s.peerCN() != "good" {
				t.Errorf("server certificate CN = %q, want good", s.peerCN())
			}
			s.echo(t, "hello")
		})
	}
	t.Run("TLS 1.1 refused", func(t *testing.T) {
		conf := clientConf(t, certPEM)
		conf.MinVersion, conf.MaxVersion = tls.VersionTLS11, tls.VersionTLS11
		if _, err := dial(t, srv.addr(), conf); err == nil {
			t.Fatal("TLS 1.1 handshake succeeded")
		}
	})
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := pairFiles(t, dir, "a")
	c2, k2 := (*issuer)(nil).issue(t, leafSpec{cn: "b"})
	otherKey := writeFile(t, dir, "other.key", k2)
	otherCert := writeFile(t, dir, "other.pem", c2)
	garbage := writeFile(t, dir, "garbage.pem", []byte("this is not PEM\n"))
	empty := writeFile(t, dir, "empty.pem", nil)
	broken := writeFile(t, dir, "broken.pem", []byte("-----BEGIN CERTIFICATE-----\nnot base64!\n"))
	badDER := writeFile(t, dir, "bad-der.pem", pemBlock("CERTIFICATE", []byte("junk")))
	missing := filepath.Join(dir, "missing.pem")

	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error
	}{
		{"missing cert", Config{Cert: missing, Key: keyFile}, []string{"read certificate", missing, "no such file"}},
		{"missing key", Config{Cert: certFile, Key: missing}, []string{"read key", missing}},
		{"mismatched pair", Config{Cert: certFile, Key: otherKey}, []string{certFile, otherKey, "does not match"}},
		{"garbage cert", Config{Cert: garbage, Key: keyFile}, []string{garbage, "no PEM CERTIFICATE block", "not PEM"}},
		{"empty key", Config{Cert: certFile, Key: empty}, []string{empty, "no PEM PRIVATE KEY block", "empty"}},
		{"malformed PEM", Config{Cert: broken, Key: keyFile}, []string{broken, "malformed"}},
		{"bad DER", Config{Cert: badDER, Key: keyFile}, []string{badDER, keyFile}},
		{"swapped", Config{Cert: keyFile, Key: certFile}, []string{keyFile, "swapped"}},
		{"key is a cert", Config{Cert: certFile, Key: otherCert}, []string{otherCert, "not a private key"}},
		{"no files", Config{}, []string{"required"}},
		{"negative rotation", Config{Cert: certFile, Key: keyFile, TicketRotation: -time.Second}, []string{"negative"}},
		{"missing client CA", Config{Cert: certFile, Key: keyFile, ClientCA: missing}, []string{"client CA", missing}},
		{"garbage client CA", Config{Cert: certFile, Key: keyFile, ClientCA: garbage}, []string{"client CA", garbage, "no PEM CERTIFICATE"}},
		{"bad DER client CA", Config{Cert: certFile, Key: keyFile, ClientCA: badDER}, []string{"client CA", badDER, "certificate 1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := New(tt.cfg)
			if err == nil {
				m.Close()
				t.Fatal("New succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if !strings.HasPrefix(err.Error(), "tlsconf: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestExpiredCertificateWarns(t *testing.T) {
	dir := t.TempDir()
	c, k := (*issuer)(nil).issue(t, leafSpec{cn: "old", notAfter: time.Now().Add(-time.Minute)})
	var logs syncBuffer
	m := newManager(t, Config{
		Cert:   writeFile(t, dir, "cert.pem", c),
		Key:    writeFile(t, dir, "key.pem", k),
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if m.cur.Load().cert.Leaf.Subject.CommonName != "old" {
		t.Fatal("expired certificate not loaded")
	}
	if got := logs.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "expired") {
		t.Errorf("log = %q, want an expiry warning", got)
	}
}

func TestReload(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pemA := pairFiles(t, dir, "A")
	m := newManager(t, Config{Cert: certFile, Key: keyFile})
	srv := serve(t, m.TLSConfig(), "tcp4")

	_, _, pemB := pairFiles(t, dir, "B")
	conf := clientConf(t, pemA, pemB)
	before := mustDial(t, srv.addr(), conf)
	if got := before.peerCN(); got != "A" {
		t.Fatalf("first certificate CN = %q, want A", got)
	}
	// The files now hold B, but nothing changes before Reload.
	if got := mustDial(t, srv.addr(), conf).peerCN(); got != "A" {
		t.Fatalf("before Reload, CN = %q, want A", got)
	}
	if err := m.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := mustDial(t, srv.addr(), conf).peerCN(); got != "B" {
		t.Errorf("after Reload, CN = %q, want B", got)
	}
	before.echo(t, "still here")

	t.Run("bad pair keeps the old one", func(t *testing.T) {
		_, otherKey := (*issuer)(nil).issue(t, leafSpec{cn: "C"})
		writeFile(t, dir, "key.pem", otherKey) // cert.pem still holds B
		err := m.Reload()
		if err == nil || !strings.Contains(err.Error(), "does not match") {
			t.Fatalf("Reload with a mismatched pair: %v, want a mismatch error", err)
		}
		if got := mustDial(t, srv.addr(), conf).peerCN(); got != "B" {
			t.Errorf("after a failed Reload, CN = %q, want B", got)
		}
		os.Remove(certFile)
		if err := m.Reload(); err == nil || !strings.Contains(err.Error(), certFile) {
			t.Fatalf("Reload with a missing file: %v, want an error naming %s", err, certFile)
		}
		if got := mustDial(t, srv.addr(), conf).peerCN(); got != "B" {
			t.Errorf("after a failed Reload, CN = %q, want B", got)
		}
	})
}

// resumes dials srv twice with one session cache and reports whether the
// second connection resumed. The first connection exchanges bytes before
// it closes, so that a TLS 1.3 client has read its ticket; between the two
// connections, between() runs.
func resumes(t *testing.T, addr string, conf *tls.Config, between func()) bool {
	t.Helper()
	conf = conf.Clone()
	conf.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	first := mustDial(t, addr, conf)
	if first.conn.ConnectionState().DidResume {
		t.Fatal("first connection resumed")
	}
	first.echo(t, "ticket please")
	first.conn.Close()
	between()
	second := mustDial(t, addr, conf)
	second.echo(t, "again")
	return second.conn.ConnectionState().DidResume
}

func TestResumption(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, certPEM := pairFiles(t, dir, "resume")
	m := newManager(t, Config{Cert: certFile, Key: keyFile})
	srv := serve(t, m.TLSConfig(), "tcp4")
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		conf := clientConf(t, certPEM)
		conf.MinVersion, conf.MaxVersion = v, v
		rotate := func(n int) func() {
			return func() {
				for range n {
					if err := m.rotateTicketKeys(); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		tests := []struct {
			name      string
			rotations int
			want      bool
		}{
			{"no rotation", 0, true},
			{"one rotation", 1, true},
			{"two rotations", 2, true},
			{"three rotations drop the key", 3, false},
		}
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/%s", tls.VersionName(v), tt.name), func(t *testing.T) {
				if got := resumes(t, srv.addr(), conf, rotate(tt.rotations)); got != tt.want {
					t.Errorf("DidResume = %v, want %v", got, tt.want)
				}
			})
		}
		t.Run(tls.VersionName(v)+"/clone follows rotation", func(t *testing.T) {
			clone := serve(t, m.TLSConfig().Clone(), "tcp4")
			if !resumes(t, clone.addr(), conf, rotate(1)) {
				t.Error("no resumption across one rotation through a Clone")
			}
			if resumes(t, clone.addr(), conf, rotate(3)) {
				t.Error("a Clone still resumes after three rotations: it kept stale keys")
			}
		})
		t.Run(tls.VersionName(v)+"/across a reload", func(t *testing.T) {
			if got := resumes(t, srv.addr(), conf, func() {
				if err := m.Reload(); err != nil {
					t.Fatal(err)
				}
			}); !got {
				t.Error("DidResume = false after Reload of the same pair, want true")
			}
		})
	}
}

func TestTicketRotationTimer(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, certPEM := pairFiles(t, dir, "timer")
	m := newManager(t, Config{Cert: certFile, Key: keyFile, TicketRotation: 5 * time.Millisecond})
	deadline := time.Now().Add(10 * time.Second)
	for m.gen.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("only %d rotations in 10s with a 5ms period", m.gen.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	m.mu.Lock()
	n := len(m.keys)
	m.mu.Unlock()
	if n != ticketKeysKept {
		t.Errorf("%d ticket keys kept, want %d", n, ticketKeysKept)
	}
	m.Close()
	m.Close() // idempotent
	stopped := m.gen.Load()
	time.Sleep(30 * time.Millisecond)
	if got := m.gen.Load(); got != stopped {
		t.Errorf("%d rotations after Close", got-stopped)
	}
	// Tickets issued with the last keys still resume after Close.
	srv := serve(t, m.TLSConfig(), "tcp4")
	if !resumes(t, srv.addr(), clientConf(t, certPEM), func() {}) {
		t.Error("no resumption after Close")
	}
}

func TestClientCertificates(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, serverPEM := pairFiles(t, dir, "server")
	ca := newCA(t, "client CA 1")
	caFile := writeFile(t, dir, "clients.pem", ca.pem)
	m := newManager(t, Config{Cert: certFile, Key: keyFile, ClientCA: caFile})
	srv := serve(t, m.TLSConfig(), "tcp4")

	withCert := func(iss *issuer, cn string) *tls.Config {
		c, k := iss.issue(t, leafSpec{cn: cn, client: true})
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		conf := clientConf(t, serverPEM)
		// Offer the certificate whatever CAs the server names, so that
		// the server's own verification is what is tested.
		conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &pair, nil
		}
		return conf
	}
	other := newCA(t, "client CA 2")
	alice := withCert(ca, "alice")
	bob := withCert(other, "bob")
	nameless := withCert(ca, "")

	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			tests := []struct {
				name  string
				conf  *tls.Config
				greet string // "" means the handshake must fail
			}{
				{"verified", alice, "alice true"},
				{"no certificate", clientConf(t, serverPEM), " false"},
				{"empty common name", nameless, " false"},
				{"unknown CA", bob, ""},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					conf := tt.conf.Clone()
					conf.MinVersion, conf.MaxVersion = v, v
					s, err := dial(t, srv.addr(), conf)
					if tt.greet == "" {
						if err == nil {
							t.Fatalf("connected with greeting %q, want a refused certificate", s.greet)
						}
						return
					}
					if err != nil {
						t.Fatalf("dial: %v", err)
					}
					if s.greet != tt.greet {
						t.Errorf("server saw %q, want %q", s.greet, tt.greet)
					}
				})
			}
		})
	}

	t.Run("reload swaps the client CA", func(t *testing.T) {
		writeFile(t, dir, "clients.pem", other.pem)
		if err := m.Reload(); err != nil {
			t.Fatal(err)
		}
		if s, err := dial(t, srv.addr(), bob); err != nil || s.greet != "bob true" {
			t.Errorf("bob after reload: %v, greeting %v", err, s)
		}
		if _, err := dial(t, srv.addr(), alice); err == nil {
			t.Error("alice accepted after her CA was removed")
		}
	})
}

func TestClientCertUserWithoutChains(t *testing.T) {
	if u, ok := ClientCertUser(tls.ConnectionState{}); ok || u != "" {
		t.Errorf("ClientCertUser(empty) = %q, %v", u, ok)
	}
}

func TestKTLSRefused(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, _ := pairFiles(t, dir, "k")
	tests := []struct {
		name string
		ulp  []byte // nil: no file
		want string
	}{
		{"kernel without tls ULP", []byte("mptcp\n"), `lacks the tls ULP`},
		{"kernel with tls ULP", []byte("mptcp tls\n"), "does offer the tls ULP"},
		{"unreadable", nil, "could not check the kernel"},
	}
	old := ulpFile
	t.Cleanup(func() { ulpFile = old })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ulpFile = filepath.Join(t.TempDir(), "tcp_available_ulp")
			if tt.ulp != nil {
				writeFile(t, filepath.Dir(ulpFile), filepath.Base(ulpFile), tt.ulp)
			}
			m, err := New(Config{Cert: certFile, Key: keyFile, KTLS: true})
			if err == nil {
				m.Close()
				t.Fatal("New with KTLS succeeded")
			}
			if !errors.Is(err, ErrKTLSUnsupported) {
				t.Errorf("error %v is not ErrKTLSUnsupported", err)
			}
			for _, w := range []string{tt.want, "not implemented in this build", "crypto/tls"} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	t.Run("this machine", func(t *testing.T) {
		ulpFile = old
		_, err := New(Config{Cert: certFile, Key: keyFile, KTLS: true})
		if !errors.Is(err, ErrKTLSUnsupported) {
			t.Fatalf("New with KTLS: %v", err)
		}
		t.Logf("refusal: %v", err)
	})
}
