package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"golang.org/x/net/http2"
)

// reloadConfig returns a validated configuration for the reload tests:
// one worker, user alice with password pw, loopback origins allowed, one
// http listener "main" on 127.0.0.1:0, changed by modify.
func reloadConfig(t *testing.T, modify func(c *config.Config)) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Workers = 1
	cfg.Auth.Users = []config.User{{Name: "alice", Password: "pw"}}
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Listen = []config.Listener{{Name: "main", Address: "127.0.0.1:0"}}
	if modify != nil {
		modify(cfg)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// startReloadable runs a Server on cfg until the test ends.
func startReloadable(t *testing.T, cfg *config.Config) *Server {
	t.Helper()
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(); err != nil {
		s.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// addrOf returns the bound address of the listener named name, "" when
// there is none.
func addrOf(s *Server, name string) string {
	for _, a := range s.Addrs() {
		if a.Name == name {
			return a.Addr.String()
		}
	}
	return ""
}

func basic(user, pass string) string {
	return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// keepAlive is a client connection to the proxy that sends requests one
// after another.
type keepAlive struct {
	c  net.Conn
	br *bufio.Reader
}

func dialKeepAlive(t *testing.T, addr string) *keepAlive {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{c: c, br: bufio.NewReader(c)}
}

// get sends a keep-alive request for target with the header line auth
// and returns the status code and body.
func (k *keepAlive) get(target, auth string) (int, string, error) {
	k.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(k.c, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n\r\n", target, auth); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(k.br, nil)
	if err != nil {
		return 0, "", err
	}
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// status sends one request on a new connection to the proxy at addr.
func status(t *testing.T, addr, target string, header ...string) int {
	t.Helper()
	st, _, err := rawGet(t, addr, "", target, header...)
	if err != nil {
		t.Fatalf("GET %s through %s: %v", target, addr, err)
	}
	code, _, _ := strings.Cut(st, " ")
	var n int
	fmt.Sscan(code, &n)
	return n
}

func TestReloadUsers(t *testing.T) {
	target := fmt.Sprintf("http://127.0.0.1:%d/ok", mixedOrigin(t))
	s := startReloadable(t, reloadConfig(t, nil))
	addr := addrOf(s, "main")
	old := dialKeepAlive(t, addr)
	if code, body, err := old.get(target, basic("alice", "pw")); err != nil || code != 200 || body != "origin says /ok" {
		t.Fatalf("before the reload: %d %q %v", code, body, err)
	}

	if err := s.Reload(reloadConfig(t, func(c *config.Config) {
		c.Auth.Users = []config.User{{Name: "alice", Password: "new"}, {Name: "bob", Password: "b"}}
	})); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := addrOf(s, "main"); got != addr {
		t.Errorf("listener moved from %s to %s", addr, got)
	}
	for _, tc := range []struct {
		user, pass string
		want       int
	}{
		{"alice", "pw", 407},
		{"alice", "new", 200},
		{"bob", "b", 200},
	} {
		if got := status(t, addr, target, basic(tc.user, tc.pass)); got != tc.want {
			t.Errorf("new connection as %s:%s: %d, want %d", tc.user, tc.pass, got, tc.want)
		}
	}
	// A connection accepted before the reload keeps the users it started with.
	if code, _, err := old.get(target, basic("alice", "pw")); err != nil || code != 200 {
		t.Errorf("connection from before the reload, old password: %d %v, want 200", code, err)
	}
}

func TestReloadListeners(t *testing.T) {
	target := fmt.Sprintf("http://127.0.0.1:%d/ok", mixedOrigin(t))
	auth := basic("alice", "pw")
	s := startReloadable(t, reloadConfig(t, nil))
	mainAddr := addrOf(s, "main")
	inFlight := dialKeepAlive(t, mainAddr)
	if code, _, err := inFlight.get(target, auth); err != nil || code != 200 {
		t.Fatalf("before the reload: %d %v", code, err)
	}

	// Add a SOCKS5 listener "extra".
	withExtra := func(c *config.Config) {
		c.Listen = append(c.Listen, config.Listener{Name: "extra", Address: "127.0.0.1:0", Protocol: "mixed"})
	}
	if err := s.Reload(reloadConfig(t, withExtra)); err != nil {
		t.Fatalf("Reload adding a listener: %v", err)
	}
	extraAddr := addrOf(s, "extra")
	if extraAddr == "" || addrOf(s, "main") != mainAddr {
		t.Fatalf("after adding: %v", s.Addrs())
	}
	if got := status(t, extraAddr, target, auth); got != 200 {
		t.Errorf("through the added listener: %d", got)
	}

	// Remove "main": its port refuses connections, the one accepted
	// there before goes on.
	if err := s.Reload(reloadConfig(t, func(c *config.Config) {
		c.Listen = []config.Listener{{Name: "extra", Address: "127.0.0.1:0", Protocol: "mixed"}}
	})); err != nil {
		t.Fatalf("Reload removing a listener: %v", err)
	}
	if got := s.Addrs(); len(got) != 1 || got[0].Addr.String() != extraAddr {
		t.Fatalf("after removing: %v, want only extra on %s", got, extraAddr)
	}
	if c, err := net.DialTimeout("tcp", mainAddr, 5*time.Second); err == nil {
		c.Close()
		t.Errorf("the removed listener's %s still accepts connections", mainAddr)
	}
	if got := status(t, extraAddr, target, auth); got != 200 {
		t.Errorf("through the kept listener: %d", got)
	}
	if code, _, err := inFlight.get(target, auth); err != nil || code != 200 {
		t.Errorf("connection accepted by the removed listener: %d %v, want 200", code, err)
	}
}

func TestReloadRefused(t *testing.T) {
	target := fmt.Sprintf("http://127.0.0.1:%d/ok", mixedOrigin(t))
	dir := t.TempDir()
	s := startReloadable(t, reloadConfig(t, nil))
	addr := addrOf(s, "main")
	for _, tc := range []struct {
		name    string
		modify  func(c *config.Config)
		want    string
		restart bool
	}{
		{"missing users file", func(c *config.Config) {
			c.Auth.Users = []config.User{{Name: "alice", Password: "new"}}
			c.Auth.Htpasswd = []string{filepath.Join(dir, "nope.htpasswd")}
		}, "load users", false},
		{"missing certificate", func(c *config.Config) {
			c.Auth.Users = []config.User{{Name: "alice", Password: "new"}}
			c.Listen = append(c.Listen, config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https",
				TLS: config.ListenerTLS{Cert: filepath.Join(dir, "no.pem"), Key: filepath.Join(dir, "no.key")}})
		}, "listener tls", false},
		{"workers", func(c *config.Config) {
			c.Auth.Users = []config.User{{Name: "alice", Password: "new"}}
			c.Workers = 2
		}, "workers changed from 1 to 2", true},
		{"upstream", func(c *config.Config) { c.Upstream.MaxIdle = 7 }, "[upstream]", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Reload(reloadConfig(t, tc.modify))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Reload: %v, want an error about %q", err, tc.want)
			}
			if got := errors.Is(err, ErrRestartRequired); got != tc.restart {
				t.Errorf("errors.Is(%v, ErrRestartRequired) = %v", err, got)
			}
			if got := s.Addrs(); len(got) != 1 || got[0].Addr.String() != addr {
				t.Errorf("listeners after a refused reload: %v", got)
			}
			if got := status(t, addr, target, basic("alice", "pw")); got != 200 {
				t.Errorf("old password after a refused reload: %d, want 200", got)
			}
			if got := status(t, addr, target, basic("alice", "new")); got != 407 {
				t.Errorf("refused config's password: %d, want 407", got)
			}
		})
	}
}

func TestReloadNotRunning(t *testing.T) {
	cfg := reloadConfig(t, nil)
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(cfg); err == nil {
		t.Error("Reload before Start succeeded")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := s.Reload(cfg); err == nil {
		t.Error("Reload after Close succeeded")
	}
}

// TestReloadUnderLoad reloads 20 times, between two configurations that
// differ in users, ACL, Via and an extra listener, while clients send
// requests on keep-alive connections, on new connections and through
// CONNECT tunnels; not one may fail.
func TestReloadUnderLoad(t *testing.T) {
	target := fmt.Sprintf("http://127.0.0.1:%d/ok", mixedOrigin(t))
	echo := tcpEcho(t)
	configs := []*config.Config{
		reloadConfig(t, func(c *config.Config) {
			c.Auth.Users = append(c.Auth.Users, config.User{Name: "bob", Password: "b"})
			c.Listen = append(c.Listen, config.Listener{Name: "extra", Address: "127.0.0.1:0", Protocol: "socks5"})
		}),
		reloadConfig(t, func(c *config.Config) {
			c.Auth.Users = append(c.Auth.Users, config.User{Name: "carol", Password: "c"})
			c.Via = true
			c.Timeouts.ReadHeader.Duration = 20 * time.Second
			c.ACL.Rules = []config.ACLRule{{Name: "loopback", Action: "allow", Criteria: config.Criteria{Hosts: []string{"127.0.0.1"}}}}
		}),
	}
	s := startReloadable(t, reloadConfig(t, nil))
	addr := addrOf(s, "main")
	proxyURL := &url.URL{Scheme: "http", User: url.UserPassword("alice", "pw"), Host: addr}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stop := make(chan struct{})
	var ok, failed atomic.Int64
	var mu sync.Mutex
	var firstErr error // guarded by mu
	fail := func(err error) {
		failed.Add(1)
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	client := func(keepAlive bool) {
		tr := &http.Transport{Proxy: http.ProxyURL(proxyURL), DisableKeepAlives: !keepAlive}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		for {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := c.Get(target)
			if err != nil {
				fail(err)
				continue
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || string(body) != "origin says /ok" {
				fail(fmt.Errorf("keep-alive %v: %d %q %v", keepAlive, resp.StatusCode, body, err))
				continue
			}
			ok.Add(1)
		}
	}
	tunnel := func() error {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n\r\n", echo, echo, basic("alice", "pw"))
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil {
			return err
		}
		if resp.StatusCode != 200 {
			return fmt.Errorf("CONNECT: %s", resp.Status)
		}
		if _, err := io.WriteString(c, "ping\n"); err != nil {
			return err
		}
		line, err := br.ReadString('\n')
		if err != nil || line != "ping\n" {
			return fmt.Errorf("tunnel echo %q: %v", line, err)
		}
		return nil
	}
	var wg sync.WaitGroup
	wg.Go(func() { client(true) })
	wg.Go(func() { client(true) })
	wg.Go(func() { client(false) })
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := tunnel(); err != nil {
				fail(err)
				continue
			}
			ok.Add(1)
		}
	})

	for i := range 20 {
		before := ok.Load()
		// Let requests through between reloads, on both configurations.
		for ok.Load() < before+10 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		if err := s.Reload(configs[i%2]); err != nil {
			t.Errorf("reload %d: %v", i, err)
		}
		if got := addrOf(s, "main"); got != addr {
			t.Fatalf("reload %d moved the listener from %s to %s", i, addr, got)
		}
	}
	for before := ok.Load(); ok.Load() < before+10 && ctx.Err() == nil; {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if ctx.Err() != nil {
		t.Errorf("clients too slow: %d requests in 30s", ok.Load())
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of %d requests failed across 20 reloads; first: %v", n, n+ok.Load(), firstErr)
	}
	t.Logf("%d requests and tunnels across 20 reloads", ok.Load())
}

func TestReloadCertificates(t *testing.T) {
	tlsA, poolA := proxyCerts(t)
	tlsB, poolB := proxyCerts(t)
	tlsC, poolC := proxyCerts(t)
	withTLS := func(lt config.ListenerTLS) *config.Config {
		return reloadConfig(t, func(c *config.Config) {
			c.Listen = []config.Listener{{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: lt}}
		})
	}
	s := startReloadable(t, withTLS(tlsA))
	addr := addrOf(s, "tls")
	trusts := func(pool *x509.CertPool) bool {
		t.Helper()
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool})
		if err != nil {
			return false
		}
		c.Close()
		return true
	}
	if !trusts(poolA) || trusts(poolB) {
		t.Fatal("before the reload, the proxy does not serve certificate A alone")
	}

	// The same paths, new files: re-read.
	for _, p := range [][2]string{{tlsB.Cert, tlsA.Cert}, {tlsB.Key, tlsA.Key}} {
		b, err := os.ReadFile(p[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p[1], b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Reload(withTLS(tlsA)); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if !trusts(poolB) || trusts(poolA) {
		t.Error("after rewriting the files, the proxy does not serve certificate B alone")
	}

	// Other paths.
	if err := s.Reload(withTLS(tlsC)); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if !trusts(poolC) || trusts(poolB) {
		t.Error("after changing the paths, the proxy does not serve certificate C alone")
	}
	if got := addrOf(s, "tls"); got != addr {
		t.Errorf("listener moved from %s to %s", addr, got)
	}

	// The replaced certificate manager was closed, the current one with
	// the server.
	s.Close()
	waitFor(t, "no ticket key rotation left", func() bool {
		buf := make([]byte, 1<<20)
		return !strings.Contains(string(buf[:runtime.Stack(buf, true)]), "tlsconf.(*Manager).rotateLoop")
	})
}

func TestReloadLimits(t *testing.T) {
	target := fmt.Sprintf("http://127.0.0.1:%d/ok", mixedOrigin(t))
	auth := basic("alice", "pw")
	oneEach := func(c *config.Config) { c.Limits.MaxConnectionsPerClient = 1 }
	s := startReloadable(t, reloadConfig(t, oneEach))
	addr := addrOf(s, "main")
	first := dialKeepAlive(t, addr)
	if code, _, err := first.get(target, auth); err != nil || code != 200 {
		t.Fatalf("first connection: %d %v", code, err)
	}
	if got := status(t, addr, target, auth); got != 429 {
		t.Fatalf("second connection with max_connections_per_client = 1: %d, want 429", got)
	}
	if err := s.Reload(reloadConfig(t, nil)); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if got := status(t, addr, target, auth); got != 200 {
		t.Errorf("second connection after lifting the limit: %d, want 200", got)
	}
	if err := s.Reload(reloadConfig(t, oneEach)); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	// The new limiter counts from zero: first, admitted by the first
	// generation, is not counted by it.
	if got := status(t, addr, target, auth); got != 200 {
		t.Errorf("first connection under the new limiter: %d, want 200", got)
	}
	if code, _, err := first.get(target, auth); err != nil || code != 200 {
		t.Errorf("connection from the first generation: %d %v", code, err)
	}
}

// TestReloadTightensGuard checks that a reload which removes allow_private
// applies at once to connections accepted before it: neither an upstream
// kept by a client connection (HTTP/1.1 and HTTP/2) nor a pooled one is
// reused to reach the loopback origin, and the pooled ones are closed
// (issue 15: they were reused for over 50 s).
func TestReloadTightensGuard(t *testing.T) {
	target := fmt.Sprintf("http://127.0.0.1:%d/ok", mixedOrigin(t))
	tl, roots := proxyCerts(t)
	listeners := func(c *config.Config) {
		c.Listen = append(c.Listen, config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
	}
	s := startReloadable(t, reloadConfig(t, listeners))
	addr := addrOf(s, "main")
	auth := basic("alice", "pw")

	kept := dialKeepAlive(t, addr)
	if code, _, err := kept.get(target, auth); err != nil || code != 200 {
		t.Fatalf("before the reload: %d %v", code, err)
	}
	pooled := dialKeepAlive(t, addr) // its upstream goes to the pool when it closes
	if code, _, err := pooled.get(target, auth); err != nil || code != 200 {
		t.Fatalf("before the reload: %d %v", code, err)
	}
	pooled.c.Close()
	proxytest.WaitFor(t, "an upstream in the pool", func() bool { return s.pool.Len() > 0 })

	tc, err := tls.Dial("tcp", addrOf(s, "tls"), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	h2get := func() int {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", target, nil)
		req.Header.Set("Proxy-Authorization", strings.TrimPrefix(auth, "Proxy-Authorization: "))
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatalf("GET over h2: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := h2get(); code != 200 {
		t.Fatalf("h2 before the reload: %d", code)
	}

	if err := s.Reload(reloadConfig(t, func(c *config.Config) {
		c.AllowPrivate = nil
		listeners(c)
	})); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if n := s.pool.Len(); n != 0 {
		t.Errorf("%d pooled upstreams to loopback kept after the reload", n)
	}
	if code, _, err := kept.get(target, auth); err != nil || code != 403 {
		t.Errorf("kept upstream after the reload: %d %v, want 403", code, err)
	}
	if code := h2get(); code != 403 {
		t.Errorf("h2 stream after the reload: %d, want 403", code)
	}
	if code := status(t, addr, target, auth); code != 403 {
		t.Errorf("new connection after the reload: %d, want 403", code)
	}
}

// TestKeyExchangesReach checks that an https listener's key_exchanges
// choose the key exchange of a real Go client's handshake (which offers
// X25519MLKEM768 and X25519 with a key share each), at start and across
// reloads that change it.
func TestKeyExchangesReach(t *testing.T) {
	tl, pool := proxyCerts(t)
	withKex := func(kx ...string) *config.Config {
		return reloadConfig(t, func(c *config.Config) {
			c.Listen = []config.Listener{{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, KeyExchanges: kx}}
		})
	}
	s := startReloadable(t, withKex())
	addr := addrOf(s, "tls")
	curve := func() tls.CurveID {
		t.Helper()
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().CurveID
	}
	steps := []struct {
		kx   []string
		want tls.CurveID
	}{
		{nil, tls.X25519MLKEM768},
		{[]string{"X25519", "X25519MLKEM768"}, tls.X25519},
		{[]string{"CurveP256", "X25519"}, tls.CurveP256},
		{[]string{"X25519MLKEM768", "X25519"}, tls.X25519MLKEM768},
		{nil, tls.X25519MLKEM768},
	}
	for i, st := range steps {
		if i > 0 {
			if err := s.Reload(withKex(st.kx...)); err != nil {
				t.Fatalf("Reload to %v: %v", st.kx, err)
			}
		}
		if got := curve(); got != st.want {
			t.Errorf("key_exchanges %v: the handshake used %v, want %v", st.kx, got, st.want)
		}
	}
}
