package server

import (
	"bufio"
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
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/leaktest"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestIdleInterceptedH2StreamEnds checks how an intercepted tunnel that
// came by a CONNECT stream of HTTP/2 on the https port ends while it is
// parked between requests (no goroutine of the proxy's waits for it):
// its idle timeout (timeouts.idle_client) ends it, and the client sees
// the stream end; the client's RST_STREAM ends it and frees it, the
// HTTP/2 connection serving a new stream after; the client closing the
// connection ends the two parked on it; a reload-like revocation of the
// tunnel's user (Server.RevokeUser, gate.ErrRevoked) cuts it. Each time
// no goroutine is left for it, and the access log has the tunnel's
// record beside its request's.
func TestIdleInterceptedH2StreamEnds(t *testing.T) {
	dir := t.TempDir()
	cert, _ := proxytest.SelfSigned(t)
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	origin.StartTLS()
	t.Cleanup(origin.Close)
	upstreamCA := filepath.Join(dir, "origin.pem")
	if err := os.WriteFile(upstreamCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(origin.Listener.Addr().String())
	target := net.JoinHostPort("localhost", port)
	proxyTLS, proxyRoots := proxyCerts(t)
	auth := "Proxy-Authorization: " + proxyAuth("alice", "alice-pw")

	for _, tc := range []struct {
		name    string
		streams int           // parked on one HTTP/2 connection
		idle    time.Duration // timeouts.idle_client; 0: the default
		end     func(*testing.T, *h2StreamRig)
	}{
		{"idle timeout", 1, time.Second, func(t *testing.T, r *h2StreamRig) {}},
		{"client reset", 1, 0, func(t *testing.T, r *h2StreamRig) {
			r.resets[0]()
			// The connection serves on: a new stream is intercepted.
			c, _ := proxytest.H2Connect(t, r.cc, target, auth)
			r.request(t, c, "/after-reset")
		}},
		{"connection closed", 2, 0, func(t *testing.T, r *h2StreamRig) { r.pc.Close() }},
		{"revoked", 1, 0, func(t *testing.T, r *h2StreamRig) {
			if n, err := r.s.RevokeUser("alice"); n != 1 || err != nil {
				t.Fatalf("RevokeUser: %d, %v; want 1 user", n, err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The origin connection is kept throughout: no wait for it
			// to go brings the parked connection back to look at the
			// stream (only the stream's wake does).
			cfg, ca := interceptLocalConfig(t, t.TempDir(), upstreamCA, time.Hour)
			cfg.Listen[0].Protocol = "https"
			cfg.Listen[0].TLS = proxyTLS
			cfg.Listen[0].ALPN = []string{"h2"}
			cfg.Auth.Users = []config.User{{Name: "alice", Password: "alice-pw"}}
			if tc.idle > 0 {
				cfg.Timeouts.IdleClient = config.Duration{Duration: tc.idle}
			}
			cfg.SetDefaults()
			if err := cfg.Validate(); err != nil {
				t.Fatalf("config: %v", err)
			}
			access := &logBuffer{}
			r := &h2StreamRig{target: target, roots: x509.NewCertPool()}
			r.roots.AddCert(ca)
			r.s, _ = startLogged(t, cfg, nil, access)
			addrs := map[string]string{}
			for _, a := range r.s.Addrs() {
				addrs[a.Name] = a.Addr.String()
			}
			var err error
			r.pc, err = tls.DialWithDialer(&net.Dialer{Timeout: proxytest.DefaultTimeout}, "tcp", addrs["plain"],
				&tls.Config{RootCAs: proxyRoots, ServerName: "localhost", NextProtos: []string{"h2"}})
			if err != nil {
				t.Fatalf("TLS to the proxy: %v", err)
			}
			t.Cleanup(func() { r.pc.Close() })
			if r.cc, err = (&http2.Transport{}).NewClientConn(r.pc); err != nil {
				t.Fatalf("HTTP/2 to the proxy: %v", err)
			}
			var inner []*bufio.Reader
			for i := range tc.streams {
				c, reset := proxytest.H2Connect(t, r.cc, target, auth)
				r.resets = append(r.resets, reset)
				inner = append(inner, r.request(t, c, "/"+string(rune('a'+i))))
			}
			parkedH2Stream(t, "the requests")
			logged := strings.Count(access.String(), "\n")
			start := time.Now()
			tc.end(t, r)
			for i, br := range inner {
				if n, err := br.Read(make([]byte, 1)); err == nil {
					t.Fatalf("stream %d: the client read %d bytes, want the tunnel's end", i, n)
				}
			}
			if tc.idle > 0 && time.Since(start) < tc.idle/2 {
				t.Errorf("the tunnel ended %v after its request, before its idle timeout of %v", time.Since(start), tc.idle)
			}
			// Each ended tunnel's record, after those of the requests.
			want := logged + tc.streams
			if tc.name == "client reset" {
				want += 1 // the request on the new stream's
			}
			tunnels := 0
			for _, rec := range proxytest.JSONRecords[icRecord](t, access, want) {
				if rec.Method == "CONNECT" && rec.Intercepted {
					tunnels++
				}
			}
			if tunnels < tc.streams {
				t.Fatalf("access log: %d records of intercepted tunnels, want %d:\n%s", tunnels, tc.streams, access.String())
			}
			parkedH2Stream(t, tc.name)
		})
	}
}

// h2StreamRig is an HTTP/2 connection to an https listener that
// intercepts the tunnels of its CONNECT streams.
type h2StreamRig struct {
	s      *Server
	pc     *tls.Conn
	cc     *http2.ClientConn
	resets []func()
	target string
	roots  *x509.CertPool
}

// request makes one HTTP/1.1 request for path in the tunnel c, whose
// TLS it starts, and returns the reader of the client's TLS connection.
func (r *h2StreamRig) request(t *testing.T, c net.Conn, path string) *bufio.Reader {
	t.Helper()
	cc := tls.Client(c, &tls.Config{RootCAs: r.roots, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	if _, err := io.WriteString(cc, "GET "+path+" HTTP/1.1\r\nHost: "+r.target+"\r\n\r\n"); err != nil {
		t.Fatalf("%s: write: %v", path, err)
	}
	br := bufio.NewReader(cc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("%s: read the response: %v", path, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || string(body) != path {
		t.Fatalf("%s: %d %q, %v", path, resp.StatusCode, body, err)
	}
	return br
}

// parkedH2Stream waits until no goroutine of the proxy's serves an
// intercepted HTTP/2 stream or its connection: none while they are
// parked, none once they have ended.
func parkedH2Stream(t *testing.T, after string) {
	t.Helper()
	err := leaktest.Check(proxytest.DefaultTimeout,
		"rustle/internal/server.(*Server).serveConn", "rustle/internal/httpproxy.(*conn)",
		"rustle/internal/h2.(*conn)", "rustle/internal/h2.(*stream)", "rustle/internal/intercept.")
	if err != nil {
		t.Fatalf("after %s, a goroutine serves the intercepted stream: %v", after, err)
	}
}

// TestInterceptH2StreamH2Inside checks an intercepted tunnel that came
// by an HTTP/2 CONNECT stream whose client chose h2 inside: its
// requests are answered (the HTTP/2 front-end inside waits on the
// stream, as TestIdleInterceptedParksFrontEnds checks), and once the
// client resets the stream nothing of it is left and the access log has
// the tunnel's record.
func TestInterceptH2StreamH2Inside(t *testing.T) {
	dir := t.TempDir()
	cert, _ := proxytest.SelfSigned(t)
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	origin.StartTLS()
	t.Cleanup(origin.Close)
	upstreamCA := filepath.Join(dir, "origin.pem")
	if err := os.WriteFile(upstreamCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(origin.Listener.Addr().String())
	target := net.JoinHostPort("localhost", port)
	proxyTLS, proxyRoots := proxyCerts(t)
	cfg, ca := interceptLocalConfig(t, dir, upstreamCA, time.Hour)
	cfg.Listen[0].Protocol = "https"
	cfg.Listen[0].TLS = proxyTLS
	cfg.Listen[0].ALPN = []string{"h2"}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	access := &logBuffer{}
	_, addrs := startLogged(t, cfg, nil, access)
	pc, err := tls.DialWithDialer(&net.Dialer{Timeout: proxytest.DefaultTimeout}, "tcp", addrs["plain"],
		&tls.Config{RootCAs: proxyRoots, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("TLS to the proxy: %v", err)
	}
	t.Cleanup(func() { pc.Close() })
	cc, err := (&http2.Transport{}).NewClientConn(pc)
	if err != nil {
		t.Fatalf("HTTP/2 to the proxy: %v", err)
	}
	c, reset := proxytest.H2Connect(t, cc, target)
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err := tc.Handshake(); err != nil {
		t.Fatalf("TLS inside the stream: %v", err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN inside the stream %q, want h2", p)
	}
	h, err := proxytest.NewH2Client(tc)
	if err != nil {
		t.Fatal(err)
	}
	for i, path := range []string{"/one", "/two"} {
		id := uint32(2*i + 1)
		if _, err := tc.Write(h.Get(id, target, path)); err != nil {
			t.Fatalf("%s: write: %v", path, err)
		}
		status, body, err := h.Answer(id)
		if err != nil || status != "200" || string(body) != path {
			t.Fatalf("%s: %s %q, %v", path, status, body, err)
		}
	}
	reset()
	tunnels := 0
	for _, rec := range proxytest.JSONRecords[icRecord](t, access, 3) {
		if rec.Method == "CONNECT" && rec.Intercepted {
			tunnels++
		}
	}
	if tunnels != 1 {
		t.Fatalf("access log: %d records of intercepted tunnels, want 1:\n%s", tunnels, access.String())
	}
	parkedH2Stream(t, "the stream's reset")
}
