package intercept_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/h2"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/socks5"
)

func TestMain(m *testing.M) { os.Exit(proxytest.VerifyNoLeaks(m)) }

// record is what the tests read of an access log line.
type record struct {
	Protocol    string `json:"protocol"`
	Method      string `json:"method"`
	Target      string `json:"target"`
	Status      int    `json:"status"`
	User        string `json:"user"`
	Rule        string `json:"rule"`
	Reason      string `json:"reason"`
	SNI         string `json:"sni"`
	Intercepted bool   `json:"intercepted"`
	BytesDown   int64  `json:"bytes_down"`
}

// env is a proxy that intercepts, in front of origins on loopback.
type env struct {
	ca      *x509.CertPool // trusts the interception CA
	caCert  *x509.Certificate
	proxy   string // the plain port
	log     *proxytest.LogBuffer
	metrics *metrics.Metrics
	certs   *intercept.Certs
	slog    *proxytest.LogBuffer // the interceptor's log lines
	pool    *dialer.Pool         // the upstream pool (envConfig.pool); nil = none
}

// envConfig is what a test sets of its env.
type envConfig struct {
	rules     []intercept.Rule
	bypass    []string
	acl       []acl.Rule // nil = none
	users     map[string]string
	roots     *x509.CertPool // the origins' roots (intercept.upstream_ca)
	noH2      bool           // no h2 front-end
	cacheSize int
	socks     bool
	pool      bool // pool the upstream connections, as a configuration does
	// upstreamIdle closes an idle HTTP/1.1 client connection's origin
	// connection (intercept.upstream_idle); 0 = never.
	upstreamIdle time.Duration
	noLog        bool // no access log (env.log stays empty)
}

// newEnv starts a proxy whose policy intercepts as cfg says, on a plain
// HTTP port (or a SOCKS5 one).
func newEnv(t testing.TB, cfg envConfig) *env {
	t.Helper()
	certPath, keyPath, err := intercept.WriteCA(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := intercept.LoadCA(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	size := cfg.cacheSize
	if size == 0 {
		size = 100
	}
	certs, err := intercept.NewCerts(ca, size)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{ca: x509.NewCertPool(), caCert: ca.Certificate(), log: &proxytest.LogBuffer{}, certs: certs,
		metrics: metrics.New(metrics.Config{}), slog: &proxytest.LogBuffer{}}
	e.ca.AddCert(ca.Certificate())
	lm := e.metrics.Listener("test", "http")
	pc := proxytest.PolicyConfig{Users: cfg.users, Rules: cfg.acl, Default: acl.Deny, Metrics: lm,
		HelloTimeout: 5 * time.Second}
	if !cfg.noLog {
		pc.AccessLog = proxytest.JSONAccessLog(t, e.log)
	}
	if cfg.acl == nil {
		pc.Default = ""
	}
	if cfg.pool {
		pool, err := dialer.NewPool(dialer.PoolConfig{MaxIdlePerHost: 8, MaxIdle: 64, IdleTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.Close() })
		pc.Pool, e.pool = pool, pool
	}
	pol := proxytest.NewPolicy(t, pc)
	ic, err := intercept.New(intercept.Config{Certs: certs, Rules: cfg.rules, Bypass: cfg.bypass, HandshakeTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(e.slog, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	fronts := make([]intercept.Frontend, len(cfg.rules))
	for i, r := range cfg.rules {
		fronts[i] = newFrontend(t, r.Edits, cfg.roots, !cfg.noH2, cfg.upstreamIdle)
	}
	if pol.Intercept, err = ic.Listener(fronts, lm); err != nil {
		t.Fatal(err)
	}
	// As rustle's listeners that intercept serve them: an intercepted
	// tunnel goes on without the goroutine that read its CONNECT
	// (ServeConnReadThen, ServeConnThen), and the session closes once it
	// has ended.
	serve := func(then func(c *net.TCPConn, s *gate.Session, end func()) bool) func(*net.TCPConn, *gate.Session) {
		return func(c *net.TCPConn, s *gate.Session) {
			ended := make(chan struct{})
			if then(c, s, func() { close(ended) }) {
				<-ended
			}
		}
	}
	if cfg.socks {
		srv := socks5.New(socks5.Config{HandshakeTimeout: 5 * time.Second})
		e.proxy = proxytest.StartProxy(t, pol, serve(srv.ServeConnThen))
		return e
	}
	hp := newHTTP1(t, origin.Config{}, 0)
	e.proxy = proxytest.StartProxy(t, pol, serve(func(c *net.TCPConn, s *gate.Session, end func()) bool {
		return hp.ServeConnReadThen(c, s, nil, end)
	}))
	return e
}

// newHTTP1 returns an HTTP/1.1 proxy whose origin client is oc with the
// defaults of the configuration, and which closes an idle client
// connection's upstream after upstreamIdle (0 = never).
func newHTTP1(t testing.TB, oc origin.Config, upstreamIdle time.Duration) *httpproxy.Proxy {
	t.Helper()
	oc.Forwarded = origin.ForwardedNone
	oc.MaxHeaderBytes = 65536
	oc.ResponseHeaderTimeout = 10 * time.Second
	oc.WriteTimeout = 10 * time.Second
	client, err := origin.New(oc)
	if err != nil {
		t.Fatal(err)
	}
	p, err := httpproxy.New(httpproxy.Config{Origin: client, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second,
		UpstreamIdle: upstreamIdle})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// newFrontend returns the front-ends of a rule: TLS to origins verified
// with roots, the rule's edits, upstreamIdle for HTTP/1.1 (see newHTTP1).
func newFrontend(t testing.TB, edits *origin.Edits, roots *x509.CertPool, withH2 bool, upstreamIdle time.Duration) intercept.Frontend {
	t.Helper()
	oc := origin.Config{TLS: &tls.Config{RootCAs: roots, NextProtos: []string{"http/1.1"}}, TLSHandshakeTimeout: 5 * time.Second, Edits: edits}
	f := intercept.Frontend{HTTP1: newHTTP1(t, oc, upstreamIdle)}
	if withH2 {
		oc.Forwarded = origin.ForwardedNone
		oc.MaxHeaderBytes = 65536
		oc.ResponseHeaderTimeout = 10 * time.Second
		oc.WriteTimeout = 10 * time.Second
		client, err := origin.New(oc)
		if err != nil {
			t.Fatal(err)
		}
		srv, err := h2.New(h2.Config{Origin: client, MaxConcurrentStreams: 100, MaxHeaderListSize: 65536,
			InitialStreamWindow: 256 << 10, InitialConnWindow: 1 << 20, MaxFrameSize: 16384,
			HandshakeTimeout: 10 * time.Second, IdleTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second,
			TunnelIdleTimeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		f.H2 = srv
	}
	return f
}

// tlsOrigin is a Go HTTPS origin on loopback.
type tlsOrigin struct {
	srv   *httptest.Server
	roots *x509.CertPool
	url   string        // https://localhost:PORT
	host  string        // localhost:PORT
	conns *atomic.Int32 // the connections it accepted
}

// newOrigin starts a Go HTTPS origin for localhost that answers with
// what it got: the protocol, method, path and the fields the tests look
// at. protos are the ALPN protocols it speaks (nil: h2 and http/1.1).
func newOrigin(t *testing.T, protos []string) *tlsOrigin {
	t.Helper()
	cert, roots := proxytest.SelfSigned(t)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Server", "test-origin")
		w.Header().Set("X-Origin", "yes")
		fmt.Fprintf(w, "proto=%s method=%s path=%s host=%s authorization=%q remove-me=%q tls=%v\n",
			r.Proto, r.Method, r.URL.RequestURI(), r.Host, r.Header.Get("Authorization"), r.Header.Get("X-Remove-Me"), r.TLS != nil)
	})
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: protos}
	if protos == nil || slices.Contains(protos, "h2") {
		srv.EnableHTTP2 = true
	}
	conns := new(atomic.Int32)
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return &tlsOrigin{srv: srv, roots: roots, url: "https://localhost:" + port, host: "localhost:" + port, conns: conns}
}

// client returns a Go client through the env's proxy that trusts the
// interception CA; h2 says whether it may speak HTTP/2 (to the proxy's
// intercepting end).
func (e *env) client(t *testing.T, h2 bool, proxyUser string) *http.Client {
	t.Helper()
	pu := &url.URL{Scheme: "http", Host: e.proxy}
	if proxyUser != "" {
		pu.User = url.UserPassword(proxyUser, "pw")
	}
	tr := &http.Transport{Proxy: http.ProxyURL(pu), TLSClientConfig: &tls.Config{RootCAs: e.ca}, ForceAttemptHTTP2: h2}
	if !h2 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// records returns the access log's records once it holds n.
func (e *env) records(t *testing.T, n int) []record {
	t.Helper()
	return proxytest.JSONRecords[record](t, e.log, n)
}

func get(t *testing.T, c *http.Client, u string, header ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
			continue
		}
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body: %v", u, err)
	}
	return resp, string(b)
}

// TestInterceptGo drives interception with Go's net/http client (the CA
// in RootCAs), HTTP/1.1 and HTTP/2 to rustle, against a Go origin that
// speaks both: the requests inside reach the origin in HTTP/2 over TLS
// (the origin chose h2), edited by the rule (Authorization set from the rule, X-Remove-Me
// removed; Server removed and X-Injected set on the response), each one
// in the access log as an https URL with intercepted, the tunnel too; an
// access rule on paths refuses a path inside (403), and a tunnel no rule
// names is spliced (the origin's own certificate, which the client does
// not trust).
func TestInterceptGo(t *testing.T) {
	o := newOrigin(t, nil)
	edits, err := origin.NewEdits(origin.EditConfig{
		RequestSet:     []origin.HeaderField{{Name: "Authorization", Value: "Bearer secret-token"}},
		RequestRemove:  []string{"X-Remove-Me"},
		ResponseSet:    []origin.HeaderField{{Name: "X-Injected", Value: "1"}},
		ResponseRemove: []string{"Server"},
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, envConfig{
		rules: []intercept.Rule{{Name: "api", Match: acl.Rule{Hosts: []string{"localhost"}}, Edits: edits}},
		acl: []acl.Rule{
			{Name: "no-admin", Action: acl.Deny, Protocols: []string{"https"}, Paths: []string{"/admin/*"}},
			{Name: "all", Action: acl.Allow},
		},
		roots: o.roots,
	})
	for _, tc := range []struct {
		name, proto string
		h2          bool
	}{
		{"http1", "HTTP/1.1", false},
		{"h2", "HTTP/2.0", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := e.client(t, tc.h2, "")
			resp, body := get(t, c, o.url+"/v1/models?x=1", "Authorization", "Bearer client-own", "X-Remove-Me", "gone")
			want := `proto=HTTP/2.0 method=GET path=/v1/models?x=1 host=` + o.host + ` authorization="Bearer secret-token" remove-me="" tls=true`
			if resp.StatusCode != 200 || strings.TrimSpace(body) != want {
				t.Fatalf("GET: %d %q, want 200 %q", resp.StatusCode, body, want)
			}
			if resp.Proto != tc.proto {
				t.Errorf("client spoke %s to rustle, want %s", resp.Proto, tc.proto)
			}
			if resp.Header.Get("Server") != "" || resp.Header.Get("X-Injected") != "1" || resp.Header.Get("X-Origin") != "yes" {
				t.Errorf("response fields %v: want Server removed, X-Injected set, X-Origin kept", resp.Header)
			}
			if leaf := resp.TLS.PeerCertificates[0]; leaf.Issuer.CommonName != e.caCert.Subject.CommonName {
				t.Errorf("the client saw a certificate issued by %q, not rustle's CA", leaf.Issuer.CommonName)
			}
			if resp, _ := get(t, c, o.url+"/admin/users"); resp.StatusCode != 403 {
				t.Errorf("GET /admin/users inside: %d, want 403 by the rule on paths", resp.StatusCode)
			}
			// Keep-alive: a second request on the same connection.
			if resp, _ := get(t, c, o.url+"/v1/again"); resp.StatusCode != 200 {
				t.Errorf("second GET: %d", resp.StatusCode)
			}
		})
	}
	recs := e.records(t, 8)
	var inner, tunnels, denied int
	for _, r := range recs {
		switch {
		case r.Method == "CONNECT":
			tunnels++
			if !r.Intercepted || r.SNI != "localhost" || r.Status != 200 || r.Reason != "" {
				t.Errorf("tunnel record %+v", r)
			}
		case r.Reason == "denied":
			denied++
			if r.Status != 403 || r.Rule != "no-admin" || r.Target != o.url+"/admin/users" || !r.Intercepted {
				t.Errorf("denied record %+v", r)
			}
		default:
			inner++
			if !r.Intercepted || r.Status != 200 || !strings.HasPrefix(r.Target, o.url+"/v1/") || r.SNI != "localhost" || r.BytesDown == 0 {
				t.Errorf("inner record %+v", r)
			}
		}
	}
	if tunnels != 2 || inner != 4 || denied != 2 {
		t.Errorf("%d tunnels, %d requests, %d refused, want 2, 4, 2:\n%s", tunnels, inner, denied, e.log.String())
	}
	if strings.Contains(e.log.String(), "secret-token") {
		t.Error("the access log shows the injected value")
	}
	if n := proxytest.Metric(t, e.metrics, "rustle_intercepts_total", "result", "intercepted"); n != 2 {
		t.Errorf("rustle_intercepts_total{result=intercepted} = %v, want 2", n)
	}
}
