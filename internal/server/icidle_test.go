package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// interceptLocalConfig returns the configuration of a rustle with one
// plain listener that intercepts the tunnels to localhost, verifying
// their origins with the certificate at upstreamCA and setting an
// Authorization on the requests inside, with leaves of a CA written
// under dir, whose certificate it returns.
func interceptLocalConfig(t *testing.T, dir, upstreamCA string, upstreamIdle time.Duration) (*config.Config, *x509.Certificate) {
	t.Helper()
	caDir, ca := writeInterceptCA(t, dir, "local")
	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.0/8", "::1/128"} // the origin is on loopback
	cfg.Listen = []config.Listener{{Name: "plain", Address: "127.0.0.1:0"}}
	cfg.Intercept = config.Intercept{
		CACert: filepath.Join(caDir, intercept.CACertFile), CAKey: filepath.Join(caDir, intercept.CAKeyFile),
		UpstreamCA: upstreamCA, UpstreamIdle: config.Duration{Duration: upstreamIdle},
		Rules: []config.InterceptRule{{Name: "local", Criteria: config.Criteria{Hosts: []string{"localhost"}},
			RequestHeaders: config.InterceptHeaders{Set: map[string]string{"Authorization": "Bearer s3cret"}}}},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg, ca
}

// TestInterceptUpstreamIdle checks what an intercepted HTTP/1.1
// connection does while its client is idle: the connection to the
// origin that its last request left is closed once the client has sent
// nothing for intercept.upstream_idle, the client's stays, and its next
// request goes to the origin on a new connection; requests the client
// sends back to back, in one TLS record or in several, are answered
// each (the wait for the client's next request looks at its socket only
// when crypto/tls holds nothing of it).
func TestInterceptUpstreamIdle(t *testing.T) {
	dir := t.TempDir()
	cert, _ := proxytest.SelfSigned(t)
	var opened, closed atomic.Int32
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path+" "+r.Header.Get("Authorization"))
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	origin.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			opened.Add(1)
		case http.StateClosed, http.StateHijacked:
			closed.Add(1)
		}
	}
	origin.StartTLS()
	t.Cleanup(origin.Close)
	upstreamCA := filepath.Join(dir, "origin.pem")
	if err := os.WriteFile(upstreamCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, ca := interceptLocalConfig(t, dir, upstreamCA, 200*time.Millisecond)
	_, addrs := startLogged(t, cfg, nil, &logBuffer{})
	_, port, _ := net.SplitHostPort(origin.Listener.Addr().String())
	target := net.JoinHostPort("localhost", port)
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	c := proxytest.Connect(t, addrs["plain"], target)
	c.SetDeadline(time.Now().Add(2 * proxytest.DefaultTimeout))
	tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	br := bufio.NewReader(tc)
	req := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n" }
	answer := func(path string) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: read the response: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		if want := path + " Bearer s3cret"; err != nil || resp.StatusCode != 200 || string(body) != want {
			t.Fatalf("%s: %d %q, %v; want 200 %q", path, resp.StatusCode, body, err, want)
		}
	}
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(tc, s); err != nil {
			t.Fatalf("write: %v", err)
		}
	}

	send(req("/one"))
	answer("/one")
	proxytest.WaitFor(t, "the origin connection closed while the client is idle", func() bool { return closed.Load() == 1 })
	send(req("/two"))
	answer("/two")
	if n := opened.Load(); n != 2 {
		t.Errorf("the origin saw %d connections, want 2: one before the client went idle, one after", n)
	}
	// Back to back: two requests in one record, three in a record each
	// written at once, one in records of a byte.
	send(req("/a") + req("/b"))
	answer("/a")
	answer("/b")
	for _, p := range []string{"/c", "/d", "/e"} {
		send(req(p))
	}
	for _, p := range []string{"/c", "/d", "/e"} {
		answer(p)
	}
	bw := bufio.NewWriterSize(tc, 1)
	io.WriteString(bw, req("/f"))
	bw.Flush()
	answer("/f")
	// Idle again, then one more: the client's connection lived on.
	proxytest.WaitFor(t, "the second origin connection closed", func() bool { return closed.Load() == 2 })
	send(req("/last"))
	answer("/last")
}

// TestInterceptShutdownParked checks that Server.Shutdown ends an
// intercepted HTTP/1.1 connection idle between requests, which waits
// for its client with no goroutine (its origin connection closed by
// intercept.upstream_idle meanwhile): Shutdown returns before its
// deadline, the client sees the connection end, and the access log has
// the tunnel's record and its request's.
func TestInterceptShutdownParked(t *testing.T) {
	dir := t.TempDir()
	cert, _ := proxytest.SelfSigned(t)
	var closed atomic.Int32
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	origin.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			closed.Add(1)
		}
	}
	origin.StartTLS()
	t.Cleanup(origin.Close)
	upstreamCA := filepath.Join(dir, "origin.pem")
	if err := os.WriteFile(upstreamCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, ca := interceptLocalConfig(t, dir, upstreamCA, 100*time.Millisecond)
	access := &logBuffer{}
	s, addrs := startLogged(t, cfg, nil, access)
	_, port, _ := net.SplitHostPort(origin.Listener.Addr().String())
	target := net.JoinHostPort("localhost", port)
	roots := x509.NewCertPool()
	roots.AddCert(ca)

	c := proxytest.Connect(t, addrs["plain"], target)
	c.SetDeadline(time.Now().Add(2 * proxytest.DefaultTimeout))
	tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	br := bufio.NewReader(tc)
	if _, err := io.WriteString(tc, "GET /one HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read the response: %v", err)
	}
	if body, err := io.ReadAll(resp.Body); err != nil || string(body) != "/one" {
		t.Fatalf("response %q, %v", body, err)
	}
	proxytest.WaitFor(t, "the origin connection closed while the client is idle", func() bool { return closed.Load() == 1 })

	ctx, cancel := context.WithTimeout(context.Background(), proxytest.DefaultTimeout)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v: the idle intercepted connection was not ended", err)
	}
	if n, err := br.Read(make([]byte, 1)); err == nil {
		t.Fatalf("the client read %d bytes after Shutdown, want the connection's end", n)
	}
	proxytest.WaitFor(t, "the tunnel's access log record", func() bool {
		return strings.Contains(access.String(), `"method":"CONNECT"`)
	})
	var tunnel, inner bool
	for _, r := range proxytest.JSONRecords[icRecord](t, access, 2) {
		switch {
		case r.Method == "CONNECT" && r.Status == 200 && r.Intercepted:
			tunnel = true
		case r.Method == "GET" && r.Target == "https://"+target+"/one" && r.Status == 200 && r.Intercepted:
			inner = true
		}
	}
	if !tunnel || !inner {
		t.Errorf("access log (tunnel %v, request %v):\n%s", tunnel, inner, access.String())
	}
}

// icRecord is what the interception tests read of an access log record.
type icRecord struct {
	Method      string `json:"method"`
	Target      string `json:"target"`
	Status      int    `json:"status"`
	Intercepted bool   `json:"intercepted"`
}
