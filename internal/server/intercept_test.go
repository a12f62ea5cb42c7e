package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// interceptRig is a rustle that intercepts the tunnels to localhost, on
// a plain, an https (h2 and http/1.1) and a mixed listener, in front of
// a Go HTTPS origin whose certificate only intercept.upstream_ca
// verifies; the rule sets Authorization from a file and removes the
// origin's Server field.
type interceptRig struct {
	s      *Server
	addrs  map[string]string
	access *logBuffer
	dir    string
	origin string            // https://localhost:PORT
	proxy  *x509.CertPool    // trusts the https listener's certificate
	ca     *x509.Certificate // the interception CA in use at start
	cfg    func(caDir string) *config.Config
}

// writeInterceptCA writes a CA named name under dir and returns its
// directory and certificate.
func writeInterceptCA(t *testing.T, dir, name string) (string, *x509.Certificate) {
	t.Helper()
	caDir := filepath.Join(dir, name)
	certPath, keyPath, err := intercept.WriteCA(caDir, "test CA "+name)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := intercept.LoadCA(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	return caDir, ca.Certificate()
}

func startInterceptRig(t *testing.T) *interceptRig {
	t.Helper()
	dir := t.TempDir()
	cert, _ := proxytest.SelfSigned(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "go-origin")
		fmt.Fprintf(w, "%s %s authorization=%q\n", r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	upstream := filepath.Join(dir, "origins.pem")
	if err := os.WriteFile(upstream, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tl, proxyCAs := proxyCerts(t)
	caDir, ca := writeInterceptCA(t, dir, "one")
	r := &interceptRig{dir: dir, origin: "https://localhost:" + port, proxy: proxyCAs, ca: ca, access: &logBuffer{}}
	addrs := []string{"127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"}
	r.cfg = func(caDir string) *config.Config {
		cfg := config.Default()
		cfg.Workers = 2
		cfg.AllowPrivate = []string{"127.0.0.0/8", "::1/128"}
		cfg.Listen = []config.Listener{
			{Name: "plain", Address: addrs[0]},
			{Name: "tls", Address: addrs[1], Protocol: "https", TLS: tl},
			{Name: "mixed", Address: addrs[2], Protocol: "mixed"},
		}
		cfg.Intercept = config.Intercept{
			CACert: filepath.Join(caDir, intercept.CACertFile), CAKey: filepath.Join(caDir, intercept.CAKeyFile),
			UpstreamCA: upstream,
			Rules: []config.InterceptRule{{Name: "local", Criteria: config.Criteria{Hosts: []string{"localhost"}},
				RequestHeaders:  config.InterceptHeaders{Set: map[string]string{"Authorization": "Bearer {file:" + token + "}"}},
				ResponseHeaders: config.InterceptHeaders{Remove: []string{"Server"}}}},
		}
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			t.Fatalf("config: %v", err)
		}
		return cfg
	}
	r.s, r.addrs = startLogged(t, r.cfg(caDir), nil, r.access)
	addrs = []string{r.addrs["plain"], r.addrs["tls"], r.addrs["mixed"]}
	return r
}

// client returns a Go client through proxyURL that trusts cas (and the
// https listener's certificate).
func (r *interceptRig) client(t *testing.T, proxyURL string, cas ...*x509.Certificate) *http.Client {
	t.Helper()
	pool := r.proxy.Clone()
	for _, c := range cas {
		pool.AddCert(c)
	}
	u, err := url.Parse(proxyURL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(u), ForceAttemptHTTP2: true, TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// wantIntercepted gets path through c and checks that the tunnel was
// intercepted with a leaf of ca, the rule's edits applied.
func (r *interceptRig) wantIntercepted(t *testing.T, c *http.Client, path string, ca *x509.Certificate) {
	t.Helper()
	resp, err := c.Get(r.origin + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	want := fmt.Sprintf("GET %s authorization=%q\n", path, "Bearer s3cret")
	if resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("GET %s: %d %q, want 200 %q", path, resp.StatusCode, body, want)
	}
	if resp.Header.Get("Server") != "" {
		t.Errorf("GET %s: Server %q, want it removed", path, resp.Header.Get("Server"))
	}
	if iss := resp.TLS.PeerCertificates[0].Issuer.CommonName; iss != ca.Subject.CommonName {
		t.Errorf("GET %s: leaf issued by %q, want %q", path, iss, ca.Subject.CommonName)
	}
}

// TestInterceptListeners checks interception through the whole server,
// built from a configuration: a CONNECT on the plain, https and mixed
// listeners and a SOCKS5 CONNECT on the mixed one, a CONNECT stream of
// HTTP/2 on the https listener; the requests inside reach the origin
// verified with upstream_ca and carry the Authorization read from the
// file, which no log shows.
func TestInterceptListeners(t *testing.T) {
	r := startInterceptRig(t)
	for _, p := range []string{"http://" + r.addrs["plain"], "https://" + r.addrs["tls"], "http://" + r.addrs["mixed"], "socks5://" + r.addrs["mixed"]} {
		t.Run(p, func(t *testing.T) {
			r.wantIntercepted(t, r.client(t, p, r.ca), "/via-"+strings.SplitN(p, ":", 2)[0], r.ca)
		})
	}
	t.Run("h2 CONNECT", func(t *testing.T) {
		tc, err := tls.Dial("tcp", r.addrs["tls"], &tls.Config{RootCAs: r.proxy, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		cc, err := (&http2.Transport{}).NewClientConn(tc)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pr, pw := io.Pipe()
		host := strings.TrimPrefix(r.origin, "https://")
		req, _ := http.NewRequestWithContext(ctx, "CONNECT", "", pr)
		req.URL, req.Host = &url.URL{Host: host}, host
		resp, err := cc.RoundTrip(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("CONNECT over h2: %v %v", resp, err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(r.ca)
		inner := tls.Client(proxytest.StreamConn(resp.Body, pw), &tls.Config{RootCAs: pool, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
		for i := range 2 { // keep-alive inside the stream
			fmt.Fprintf(inner, "GET /h2-stream-%d HTTP/1.1\r\nHost: %s\r\n\r\n", i, host)
			ir, err := http.ReadResponse(bufio.NewReader(inner), nil)
			if err != nil {
				t.Fatalf("inside the h2 stream: %v", err)
			}
			body, _ := io.ReadAll(ir.Body)
			if want := fmt.Sprintf("GET /h2-stream-%d authorization=%q\n", i, "Bearer s3cret"); ir.StatusCode != 200 || string(body) != want {
				t.Fatalf("inside the h2 stream: %d %q", ir.StatusCode, body)
			}
		}
		if iss := inner.ConnectionState().PeerCertificates[0].Issuer.CommonName; iss != r.ca.Subject.CommonName {
			t.Errorf("h2 stream: leaf issued by %q", iss)
		}
		inner.Close()
	})
	proxytest.WaitFor(t, "the access log's records", func() bool { return strings.Count(r.access.String(), "\n") >= 10 })
	if strings.Contains(r.access.String(), "s3cret") {
		t.Error("the access log shows the injected value")
	}
	inner := 0
	for line := range strings.Lines(r.access.String()) {
		var rec struct {
			Method, Target string
			Intercepted    bool
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		if rec.Method == "GET" && rec.Intercepted && strings.HasPrefix(rec.Target, r.origin+"/") {
			inner++
		}
	}
	if inner < 6 {
		t.Errorf("%d intercepted GET records, want 6:\n%s", inner, r.access.String())
	}
}

// TestInterceptReloadCA checks that a reload that changes the CA makes
// new tunnels use the new one while an open intercepted connection runs
// on with its leaf, and that a reload that keeps the CA keeps the cache
// of leaves (the same leaf is served again, nothing minted).
func TestInterceptReloadCA(t *testing.T) {
	r := startInterceptRig(t)
	plain := "http://" + r.addrs["plain"]
	old := r.client(t, plain, r.ca)
	r.wantIntercepted(t, old, "/before", r.ca)

	twoDir, two := writeInterceptCA(t, r.dir, "two")
	if err := r.s.Reload(r.cfg(twoDir)); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	// The open connection (kept alive by old) is on the old CA's leaf.
	r.wantIntercepted(t, old, "/open-connection", r.ca)
	// New tunnels are minted by the new CA: a client that trusts only
	// the old one refuses them.
	r.wantIntercepted(t, r.client(t, plain, two), "/new-tunnel", two)
	if _, err := r.client(t, plain, r.ca).Get(r.origin + "/old-trust"); err == nil {
		t.Error("a client trusting only the old CA took a new tunnel's leaf")
	}

	// A reload with the same CA keeps the leaves: the same certificate.
	c1 := r.client(t, plain, two)
	resp, err := c1.Get(r.origin + "/x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	leaf := resp.TLS.PeerCertificates[0].SerialNumber
	if err := r.s.Reload(r.cfg(twoDir)); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	resp, err = r.client(t, plain, two).Get(r.origin + "/y")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.TLS.PeerCertificates[0].SerialNumber.Cmp(leaf) != 0 {
		t.Error("a reload with the same CA minted the leaf anew")
	}
}
