package server

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
)

// proxyCerts writes a self-signed CA and server pair for 127.0.0.1 and
// ::1 into a temporary directory and returns the listener TLS settings
// and a pool trusting the CA.
func proxyCerts(t *testing.T) (config.ListenerTLS, *x509.CertPool) {
	t.Helper()
	dir := t.TempDir()
	ca, crt, key, err := tlsconf.WriteSelfSigned(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	pemCA, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pemCA)
	return config.ListenerTLS{Cert: crt, Key: key}, pool
}

// httpsClient returns an HTTP client using the https proxy at addr, which
// trusts roots for both the proxy and TLS origins.
func httpsClient(addr, user, pass string, roots *x509.CertPool, cert *tls.Certificate) *http.Client {
	pu := &url.URL{Scheme: "https", Host: addr}
	if user != "" {
		pu.User = url.UserPassword(user, pass)
	}
	tc := &tls.Config{RootCAs: roots}
	if cert != nil {
		tc.Certificates = []tls.Certificate{*cert}
	}
	return &http.Client{
		Transport: &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: tc, ForceAttemptHTTP2: false},
		Timeout:   10 * time.Second,
	}
}

func TestHTTPSListener(t *testing.T) {
	tl, roots := proxyCerts(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "plain origin "+r.URL.Path)
	}))
	t.Cleanup(origin.Close)
	tlsOrigin := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "tls origin "+r.URL.Path)
	}))
	t.Cleanup(tlsOrigin.Close)
	roots.AddCert(tlsOrigin.Certificate())

	_, addrs := startListeners(t, 5*time.Second,
		config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
	proxy := addrs[0]

	tests := []struct {
		name, user, pass, url string
		wantStatus            int
		wantBody              string
	}{
		{"GET http", "alice", "pw", origin.URL + "/a", 200, "plain origin /a"},
		{"CONNECT https", "alice", "pw", tlsOrigin.URL + "/b", 200, "tls origin /b"},
		{"wrong password", "alice", "nope", origin.URL + "/c", 407, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := httpsClient(proxy, tt.user, tt.pass, roots, nil).Get(tt.url)
			if tt.wantStatus == 407 && strings.HasPrefix(tt.url, "https") {
				if err == nil {
					resp.Body.Close()
					t.Fatal("CONNECT with a wrong password succeeded")
				}
				return
			}
			if err != nil {
				t.Fatalf("GET %s through https proxy: %v", tt.url, err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d (%s)", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.wantBody != "" && string(body) != tt.wantBody {
				t.Errorf("body %q, want %q", body, tt.wantBody)
			}
		})
	}

	t.Run("curl", func(t *testing.T) {
		caFile := filepath.Join(filepath.Dir(tl.Cert), tlsconf.CAFile)
		out, err := runCurl(t, "--proxy", "https://alice:pw@"+proxy, "--proxy-cacert", caFile, origin.URL+"/curl")
		if err != nil || out != "plain origin /curl" {
			t.Fatalf("curl GET through https proxy: %v %q", err, out)
		}
		out, err = runCurl(t, "--proxy", "https://alice:pw@"+proxy, "--proxy-cacert", caFile, "-k", tlsOrigin.URL+"/curl")
		if err != nil || out != "tls origin /curl" {
			t.Fatalf("curl CONNECT through https proxy: %v %q", err, out)
		}
	})

	t.Run("websocket", func(t *testing.T) {
		ws := wsEcho(t)
		wsEchoVia(t, httpsClient(proxy, "alice", "pw", roots, nil), ws.URL, "the https proxy")
	})
}

// TestHTTPSResumption proves that a second connection resumes the first
// one's TLS session, for TLS 1.3 and 1.2.
func TestHTTPSResumption(t *testing.T) {
	tl, roots := proxyCerts(t)
	_, addrs := startListeners(t, 5*time.Second,
		config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
	for _, v := range []uint16{tls.VersionTLS13, tls.VersionTLS12} {
		t.Run(tls.VersionName(v), func(t *testing.T) {
			cfg := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MaxVersion: v,
				ClientSessionCache: tls.NewLRUClientSessionCache(4)}
			for i := 0; i < 2; i++ {
				c, err := tls.Dial("tcp", addrs[0], cfg)
				if err != nil {
					t.Fatal(err)
				}
				// A request makes the client read the TLS 1.3 ticket.
				c.SetDeadline(time.Now().Add(5 * time.Second))
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
				buf := make([]byte, 512)
				c.Read(buf)
				resumed := c.ConnectionState().DidResume
				c.Close()
				if want := i == 1; resumed != want {
					t.Fatalf("connection %d: DidResume = %v, want %v", i+1, resumed, want)
				}
			}
		})
	}
}

// TestHTTPSClientCert checks that a client certificate from the
// listener's client_ca authenticates without Basic credentials, and that
// without one Basic is still required.
func TestHTTPSClientCert(t *testing.T) {
	tl, roots := proxyCerts(t)
	caPEM, clientCert := clientCA(t)
	tl.ClientCA = filepath.Join(t.TempDir(), "clients.pem")
	if err := os.WriteFile(tl.ClientCA, caPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	t.Cleanup(origin.Close)
	_, addrs := startListeners(t, 5*time.Second,
		config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})

	resp, err := httpsClient(addrs[0], "", "", roots, clientCert).Get(origin.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with a client certificate: status %d, want 200", resp.StatusCode)
	}
	resp, err = httpsClient(addrs[0], "", "", roots, nil).Get(origin.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 407 {
		t.Fatalf("without a client certificate or credentials: status %d, want 407", resp.StatusCode)
	}
}

// clientCA makes a CA and a client certificate it signs.
func clientCA(t *testing.T) ([]byte, *tls.Certificate) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test client CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "carol"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		&tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestHTTPSBadCerts checks that a missing or mismatched pair stops the
// server from starting with an error naming the problem.
func TestHTTPSBadCerts(t *testing.T) {
	good, _ := proxyCerts(t)
	other, _ := proxyCerts(t)
	tests := []struct {
		name string
		tls  config.ListenerTLS
		want string
	}{
		{"missing cert", config.ListenerTLS{Cert: filepath.Join(t.TempDir(), "none.pem"), Key: good.Key}, "none.pem"},
		{"mismatched key", config.ListenerTLS{Cert: good.Cert, Key: other.Key}, "match"},
		{"ktls", config.ListenerTLS{Cert: good.Cert, Key: good.Key, KTLS: true}, "kernel TLS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Listen = []config.Listener{{Address: "127.0.0.1:0", Protocol: "https", TLS: tt.tls}}
			cfg.SetDefaults()
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			s, err := New(cfg, nil)
			if err == nil {
				s.Close()
				t.Fatal("New succeeded")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

// TestHTTPSPlainHTTP checks that plain HTTP sent to an https listener is
// answered 400 in plain HTTP with a line saying the port speaks TLS (it
// got a bare reset), that other bytes are closed without an answer, and
// that a TLS client on the same port is still served.
func TestHTTPSPlainHTTP(t *testing.T) {
	tl, roots := proxyCerts(t)
	_, addrs := startListeners(t, 5*time.Second,
		config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
	for _, tt := range []struct {
		name, send string
		want       string // the answer's start; "" = closed without one
	}{
		{"absolute-form GET", "GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request\r\n"},
		{"binary", "\x05\x01\x00", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addrs[0])
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(c, tt.send); err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(c)
			if tt.want == "" {
				if len(got) != 0 {
					t.Fatalf("answered %q, want a close", got)
				}
				return
			}
			if !strings.HasPrefix(string(got), tt.want) || !strings.HasSuffix(string(got), "this port speaks TLS: use an https:// URL for this proxy\n") {
				t.Fatalf("answered %q, want %q and the line about TLS", got, tt.want)
			}
			resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(string(got))), nil)
			if err != nil {
				t.Fatalf("answer is not HTTP: %v", err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 400 || int64(len(body)) != resp.ContentLength {
				t.Errorf("status %d, body %d bytes of Content-Length %d", resp.StatusCode, len(body), resp.ContentLength)
			}
		})
	}
	// TLS on the same port still works.
	tc, err := tls.Dial("tcp", addrs[0], &tls.Config{RootCAs: roots, ServerName: "localhost"})
	if err != nil {
		t.Fatalf("TLS after plain HTTP: %v", err)
	}
	tc.Close()
}
