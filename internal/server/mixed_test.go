package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxyproto"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// mixedOrigin starts an HTTP origin on 127.0.0.1 that answers "origin
// says " and the request path, and returns its port.
func mixedOrigin(t *testing.T) int {
	t.Helper()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "origin says "+r.URL.Path)
	}))
	t.Cleanup(origin.Close)
	return origin.Listener.Addr().(*net.TCPAddr).Port
}

// startListeners runs a Server with the given listeners (and user
// alice:pw) on loopback ports until the test ends, and returns the bound
// address of each listener.
func startListeners(t *testing.T, readHeader time.Duration, ls ...config.Listener) (*Server, []string) {
	t.Helper()
	cfg := config.Default()
	cfg.Workers = 2
	cfg.Auth.Users = []config.User{{Name: "alice", Password: "pw"}}
	cfg.Timeouts.ReadHeader.Duration = readHeader
	cfg.AllowPrivate = []string{"127.0.0.0/8", "::1/128"} // the test origins are on loopback
	cfg.Listen = ls
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(); err != nil {
		s.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	var addrs []string
	for _, a := range s.Addrs() {
		addrs = append(addrs, a.Addr.String())
	}
	return s, addrs
}

// runCurl runs curl with a 10s limit and --fail, and returns its output.
func runCurl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	args = append([]string{"-sS", "--fail", "--max-time", "10", "--noproxy", ""}, args...)
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	return string(out), err
}

// TestMixedCurl drives "mixed" and "socks5" listeners with curl as an
// HTTP proxy (plain and CONNECT), a SOCKS5 client and a SOCKS4a client.
func TestMixedCurl(t *testing.T) {
	port := mixedOrigin(t)
	_, addrs := startListeners(t, 5*time.Second,
		config.Listener{Name: "open", Address: "127.0.0.1:0", Protocol: "mixed", Auth: config.AuthNone},
		config.Listener{Name: "authed", Address: "127.0.0.1:0", Protocol: "mixed"},
		config.Listener{Name: "socks", Address: "127.0.0.1:0", Protocol: "socks5"},
	)
	open, authed, socks := addrs[0], addrs[1], addrs[2]
	tests := []struct {
		name string
		args []string
		ok   bool
	}{
		{"mixed: http proxy", []string{"-x", "http://" + open}, true},
		{"mixed: http CONNECT", []string{"-x", "http://" + open, "--proxytunnel"}, true},
		{"mixed: socks5h", []string{"--socks5-hostname", open}, true},
		{"mixed: socks4a", []string{"--socks4a", open}, true},

		{"mixed with auth: http proxy", []string{"-x", "http://alice:pw@" + authed}, true},
		{"mixed with auth: http CONNECT", []string{"-x", "http://alice:pw@" + authed, "--proxytunnel"}, true},
		{"mixed with auth: socks5h", []string{"--socks5-hostname", authed, "--proxy-user", "alice:pw"}, true},
		{"mixed with auth: http proxy without credentials", []string{"-x", "http://" + authed}, false},
		{"mixed with auth: socks5h wrong password", []string{"--socks5-hostname", authed, "--proxy-user", "alice:nope"}, false},
		{"mixed with auth: socks4a refused", []string{"--socks4a", authed}, false},

		{"socks5: socks5h", []string{"--socks5-hostname", socks, "--proxy-user", "alice:pw"}, true},
		{"socks5: socks4a refused", []string{"--socks4a", socks}, false},
		{"socks5: http proxy refused", []string{"-x", "http://alice:pw@" + socks}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := "/" + strings.NewReplacer(" ", "-", ":", "").Replace(tt.name)
			out, err := runCurl(t, append(tt.args, fmt.Sprintf("http://localhost:%d%s", port, path))...)
			want := "origin says " + path
			if tt.ok && (err != nil || out != want) {
				t.Fatalf("curl %s: %v: %q, want %q", strings.Join(tt.args, " "), err, out, want)
			}
			if !tt.ok && (err == nil || strings.Contains(out, "origin says")) {
				t.Fatalf("curl %s succeeded: %q", strings.Join(tt.args, " "), out)
			}
		})
	}
}

// TestMixedPeek checks that a "mixed" listener closes a client that sends
// nothing once the read-header timeout expires, and that Shutdown does not
// wait for such a client.
func TestMixedPeek(t *testing.T) {
	t.Run("read-header timeout", func(t *testing.T) {
		_, addrs := startListeners(t, 300*time.Millisecond,
			config.Listener{Address: "127.0.0.1:0", Protocol: "mixed", Auth: config.AuthNone})
		c, err := net.Dial("tcp", addrs[0])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(make([]byte, 1))
		var ne net.Error
		if n != 0 || err == nil || (errors.As(err, &ne) && ne.Timeout()) {
			t.Fatalf("read from a silent client's connection: %d, %v; want it closed by the proxy", n, err)
		}
	})
	t.Run("shutdown", func(t *testing.T) {
		s, addrs := startListeners(t, time.Minute,
			config.Listener{Address: "127.0.0.1:0", Protocol: "mixed", Auth: config.AuthNone})
		c, err := net.Dial("tcp", addrs[0])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		for range 1000 { // until the connection is being served
			s.connMu.Lock()
			n := len(s.active)
			s.connMu.Unlock()
			if n == 1 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Fatalf("Shutdown with a client that sent nothing: %v, want nil", err)
		}
	})
}

// TestProxyProtocol sends PROXY v1 and v2 headers to proxy_protocol
// listeners (mixed, and https with HTTP/2) and checks that the address
// they carry is the client's for the access log, the Forwarded field and
// the ACL, and that connections without a header, or too slow to send
// one, are closed unanswered.
func TestProxyProtocol(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "xff="+r.Header.Get("X-Forwarded-For"))
	}))
	t.Cleanup(origin.Close)
	target := origin.URL + "/p"

	cfg := config.Default()
	cfg.Workers = 1
	cfg.Forwarded = "x-forwarded-for"
	cfg.Timeouts.ReadHeader.Duration = 500 * time.Millisecond
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Limits.MaxConnectionsPerClient = 1 // counted by the header's address
	cfg.ACL.Default = "allow"
	cfg.ACL.Rules = []config.ACLRule{{Name: "no-doc-net", Action: "deny", Criteria: config.Criteria{Clients: []string{"198.51.100.0/24"}}}}
	tl, roots := proxyCerts(t)
	cfg.Listen = []config.Listener{
		{Name: "lb", Address: "127.0.0.1:0", Protocol: "mixed", Auth: config.AuthNone, ProxyProtocol: true},
		{Name: "lbtls", Address: "127.0.0.1:0", Protocol: "https", Auth: config.AuthNone, ProxyProtocol: true, TLS: tl},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	var out logBuffer
	_, addrs := startLogged(t, cfg, nil, &out)
	addr, tlsAddr := addrs["lb"], addrs["lbtls"]
	self := netip.MustParseAddrPort(addr)

	header := func(t *testing.T, version int, src string) []byte {
		t.Helper()
		h := proxyproto.Header{Version: version, Command: proxyproto.CommandProxy,
			Source: netip.MustParseAddrPort(src), Destination: self}
		if h.Source.Addr().Is6() {
			h.Destination = netip.AddrPortFrom(netip.IPv6Loopback(), self.Port())
		}
		b, err := h.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// lastRecord waits for an access log line after the first before and
	// returns the last one.
	lastRecord := func(t *testing.T, before int) map[string]any {
		t.Helper()
		waitFor(t, "the access log line", func() bool { return strings.Count(out.String(), "\n") > before })
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var rec map[string]any
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil {
			t.Fatal(err)
		}
		return rec
	}
	// exchange sends first and a GET for target on a new connection and
	// returns what comes back until the proxy closes it.
	exchange := func(t *testing.T, first []byte) string {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		req := "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
		if _, err := c.Write(append(first, req...)); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(c)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read: %v", err)
		}
		return string(b)
	}

	tests := []struct {
		name       string
		first      []byte
		wantStatus string // "" = closed without an answer
		wantBody   string
		wantClient string // in the access log
	}{
		{"v1", header(t, 1, "203.0.113.7:40001"), "HTTP/1.1 200", "xff=203.0.113.7", "203.0.113.7:40001"},
		{"v2 IPv6", header(t, 2, "[2001:db8::9]:40002"), "HTTP/1.1 200", "xff=2001:db8::9", "[2001:db8::9]:40002"},
		{"v1 client denied by the ACL", header(t, 1, "198.51.100.5:40003"), "HTTP/1.1 403", "", "198.51.100.5:40003"},
		{"no header", nil, "", "", ""},
		{"malformed header", []byte("PROXY TCP4 nonsense\r\n"), "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := strings.Count(out.String(), "\n")
			got := exchange(t, tt.first)
			if tt.wantStatus == "" {
				if got != "" {
					t.Fatalf("got %q, want the connection closed without an answer", got)
				}
				return
			}
			if !strings.HasPrefix(got, tt.wantStatus) || !strings.HasSuffix(got, tt.wantBody) {
				t.Fatalf("got %q, want %s ... %s", got, tt.wantStatus, tt.wantBody)
			}
			rec := lastRecord(t, before)
			if rec["client"] != tt.wantClient || rec["listener"] != "lb" {
				t.Errorf("access log record %v: want client %s", rec, tt.wantClient)
			}
		})
	}

	t.Run("tunnel admitted and released as the header's address", func(t *testing.T) {
		echo := proxytest.NewEcho(t)
		first := header(t, 1, "203.0.113.50:40200")
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(append(first, "CONNECT "+echo.Addr+" HTTP/1.1\r\nHost: "+echo.Addr+"\r\n\r\n"...))
		br := bufio.NewReader(c)
		if resp, err := proxytest.ReadResponse(br, "CONNECT"); err != nil || resp.Status != 200 {
			t.Fatalf("CONNECT: %v %v", resp, err)
		}
		c.Write([]byte("ping"))
		if got := make([]byte, 4); func() bool { _, err := io.ReadFull(br, got); return err != nil || string(got) != "ping" }() {
			t.Fatalf("tunnel echo: %q", got)
		}
		// The tunnel holds 203.0.113.50's one connection.
		if got := exchange(t, first); got != "" {
			t.Fatalf("a second connection from the header's address got %q, want it refused (max_connections_per_client = 1)", got)
		}
		c.Close()
		waitFor(t, "the tunnel's admission released", func() bool {
			return strings.HasPrefix(exchange(t, first), "HTTP/1.1 200")
		})
	})

	t.Run("v2 then TLS and HTTP/2", func(t *testing.T) {
		before := strings.Count(out.String(), "\n")
		c, err := net.DialTimeout("tcp", tlsAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write(header(t, 2, "192.0.2.44:40100")); err != nil {
			t.Fatal(err)
		}
		tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
		if err := tc.Handshake(); err != nil {
			t.Fatalf("TLS handshake after the header: %v", err)
		}
		cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(tc)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		req, _ := http.NewRequestWithContext(t.Context(), "GET", target, nil)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "xff=192.0.2.44" {
			t.Fatalf("GET over h2: %d %q", resp.StatusCode, body)
		}
		rec := lastRecord(t, before)
		if rec["client"] != "192.0.2.44:40100" || rec["protocol"] != "h2" || rec["listener"] != "lbtls" {
			t.Errorf("access log record %v: want client 192.0.2.44:40100 over h2", rec)
		}
	})

	t.Run("no header within the read-header timeout", func(t *testing.T) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		n, err := c.Read(make([]byte, 1))
		if n != 0 || err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read %d bytes, %v: want the proxy to close the connection", n, err)
		}
		if d := time.Since(start); d < 400*time.Millisecond {
			t.Errorf("closed after %v, before the read-header timeout", d)
		}
	})
}
