package intercept_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// testRoot is a CA the tests sign origin certificates with.
type testRoot struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestRoot(t *testing.T) *testRoot {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "origin root"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testRoot{cert: cert, key: key, pool: pool}
}

// leaf signs a certificate for names valid until notAfter.
func (r *testRoot) leaf(t *testing.T, notAfter time.Time, names ...string) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]},
		NotBefore: time.Now().Add(-47 * time.Hour), NotAfter: notAfter, DNSNames: names,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, r.cert, &key.PublicKey, r.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// startTLSOrigin starts a Go HTTPS origin with cert speaking protos and
// returns its https://localhost:PORT URL.
func startTLSOrigin(t *testing.T, cert tls.Certificate, protos proxytest.HTTPSProtocols) string {
	t.Helper()
	return "https://" + proxytest.StartHTTPS(t, cert, protos, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("hello from " + r.Proto + "\n"))
	}))
}

// TestOriginCertificates checks that a request inside an intercepted
// tunnel to an origin whose certificate does not verify (self-signed,
// expired, another name) is answered 502 with the reason, logged
// origin-tls, and never sent; and that origins that speak only
// http/1.1 or only h2 (a 502 before rustle spoke HTTP/2 to origins) are
// spoken to in their protocol, and one that speaks both in h2.
func TestOriginCertificates(t *testing.T) {
	root := newTestRoot(t)
	selfCert, _ := proxytest.SelfSigned(t) // not in root's pool
	e := newEnv(t, envConfig{
		rules: []intercept.Rule{{Name: "all", Match: acl.Rule{Hosts: []string{"localhost"}}}},
		roots: root.pool,
	})
	c := e.client(t, false, "")
	for _, tc := range []struct {
		name   string
		cert   tls.Certificate
		protos proxytest.HTTPSProtocols
		status int
		why    string
	}{
		{"valid", root.leaf(t, time.Now().Add(time.Hour), "localhost"), proxytest.HTTPSBoth, 200, "hello from HTTP/2.0"},
		{"http1 only", root.leaf(t, time.Now().Add(time.Hour), "localhost"), proxytest.HTTPSOnlyHTTP1, 200, "hello from HTTP/1.1"},
		{"self-signed", selfCert, proxytest.HTTPSBoth, 502, "authority rustle does not trust"},
		{"expired", root.leaf(t, time.Now().Add(-time.Hour), "localhost"), proxytest.HTTPSBoth, 502, "expired"},
		{"wrong name", root.leaf(t, time.Now().Add(time.Hour), "other.example"), proxytest.HTTPSBoth, 502, "not valid for localhost"},
		{"h2 only", root.leaf(t, time.Now().Add(time.Hour), "localhost"), proxytest.HTTPSOnlyH2, 200, "hello from HTTP/2.0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := startTLSOrigin(t, tc.cert, tc.protos)
			resp, body := get(t, c, u+"/x")
			if resp.StatusCode != tc.status || !strings.Contains(body, tc.why) {
				t.Fatalf("GET: %d %q, want %d with %q", resp.StatusCode, body, tc.status, tc.why)
			}
		})
	}
	// The tunnels are logged when they end: end them now rather than
	// at their idle timeout, which is as long as the wait for records.
	c.CloseIdleConnections()
	n := 0
	for _, r := range e.records(t, 12) {
		if r.Reason == "origin-tls" {
			n++
			if r.Status != 502 || !r.Intercepted {
				t.Errorf("record %+v", r)
			}
		}
	}
	if n != 3 {
		t.Errorf("%d records with origin-tls, want 3:\n%s", n, e.log.String())
	}
}

// TestClientRejects checks a client that does not trust rustle's CA (as
// one that pins the origin's key): its handshake fails, the tunnel is
// logged client-rejected-certificate with an info line that says how
// to bypass, and counted; and that a bypass entry splices the same
// tunnel, which the client then completes with the origin's own
// certificate.
func TestClientRejects(t *testing.T) {
	o := newOrigin(t, nil)
	rules := []intercept.Rule{{Name: "all", Match: acl.Rule{Hosts: []string{"localhost"}}}}
	e := newEnv(t, envConfig{rules: rules, roots: o.roots})
	pinned := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(mustURL(t, "http://"+e.proxy)),
		TLSClientConfig: &tls.Config{RootCAs: o.roots}}, Timeout: 10 * time.Second}
	_, err := pinned.Get(o.url + "/")
	var ue x509.UnknownAuthorityError
	if !errors.As(err, &ue) {
		t.Fatalf("a client that does not trust the CA: %v, want an unknown authority", err)
	}
	recs := e.records(t, 1)
	if r := recs[0]; r.Method != "CONNECT" || r.Reason != "client-rejected-certificate" || !r.Intercepted {
		t.Errorf("record %+v", r)
	}
	proxytest.WaitFor(t, "the refusal's log line", func() bool {
		return strings.Contains(e.slog.String(), "intercept.bypass") && strings.Contains(e.slog.String(), "bad certificate")
	})
	if n := proxytest.Metric(t, e.metrics, "rustle_intercepts_total", "result", "client-rejected-certificate"); n != 1 {
		t.Errorf("rustle_intercepts_total{result=client-rejected-certificate} = %v", n)
	}

	b := newEnv(t, envConfig{rules: rules, roots: o.roots, bypass: []string{".localhost"}})
	pinned.Transport.(*http.Transport).Proxy = http.ProxyURL(mustURL(t, "http://"+b.proxy))
	pinned.Transport.(*http.Transport).CloseIdleConnections()
	resp, err := pinned.Get(o.url + "/")
	if err != nil {
		t.Fatalf("bypassed: %v", err)
	}
	resp.Body.Close()
	if resp.TLS.PeerCertificates[0].Issuer.CommonName == b.caCert.Subject.CommonName {
		t.Error("a bypassed tunnel was intercepted")
	}
	if n := proxytest.Metric(t, b.metrics, "rustle_intercepts_total", "result", "bypassed"); n != 1 {
		t.Errorf("rustle_intercepts_total{result=bypassed} = %v", n)
	}
}

// TestNotTLSIntercepted checks that a tunnel an interception rule names
// whose first bytes are not a ClientHello (plain HTTP, garbage) is
// closed with not-interceptable and reaches no origin, and that a
// tunnel no rule names is spliced as it comes.
func TestNotTLSIntercepted(t *testing.T) {
	echo := proxytest.NewEcho(t)
	_, port, _ := net.SplitHostPort(echo.Addr)
	e := newEnv(t, envConfig{rules: []intercept.Rule{{Name: "local", Match: acl.Rule{Hosts: []string{"localhost"}}}}})
	for _, first := range []string{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "\x16\x03\x01\x00\x05garbage", "\x80\x2e\x01\x03\x01"} {
		c := proxytest.Connect(t, e.proxy, "localhost:"+port)
		c.Write([]byte(first))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 64)); err == nil {
			t.Errorf("%q into an intercepted tunnel: read %d bytes, want the tunnel closed", first, n)
		}
	}
	if n := echo.Conns(); n != 0 {
		t.Errorf("the echo server got %d connections", n)
	}
	// 127.0.0.1 is no rule's host: spliced.
	c := proxytest.Connect(t, e.proxy, echo.Addr)
	c.Write([]byte("plain bytes"))
	br := bufio.NewReader(c)
	buf := make([]byte, len("plain bytes"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.Read(buf); err != nil || string(buf) != "plain bytes" {
		t.Errorf("spliced tunnel: %q %v", buf, err)
	}
	for _, r := range e.records(t, 3) {
		if r.Reason != "not-interceptable" {
			t.Errorf("record %+v, want not-interceptable", r)
		}
	}
}

func mustURL(t *testing.T, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}
