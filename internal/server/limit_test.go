package server

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/wire"
)

// startConfigured runs a Server on the default configuration changed by
// modify (one http listener on 127.0.0.1:0 unless modify sets others) and
// returns it, its listener addresses and its log.
func startConfigured(t *testing.T, modify func(c *config.Config)) (*Server, []string, *logBuffer) {
	t.Helper()
	cfg := config.Default()
	cfg.Workers = 1
	cfg.Listen = []config.Listener{{Address: "127.0.0.1:0"}}
	modify(cfg)
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	logs := &logBuffer{}
	s, err := New(cfg, slog.New(slog.NewTextHandler(logs, nil)))
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
	return s, addrs, logs
}

// rawGet sends one request for target through the proxy at addr (from
// local, when not empty) and returns the status line and body, or the
// read error.
func rawGet(t *testing.T, addr, local, target string, header ...string) (string, string, error) {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET " + target + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
	for _, h := range header {
		req += h + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		return "", "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "", "", err
	}
	body, _ := io.ReadAll(resp.Body)
	return resp.Status + " " + resp.Header.Get("Retry-After"), string(body), nil
}

func TestGuardByDefault(t *testing.T) {
	port := mixedOrigin(t)
	_, addrs, logs := startConfigured(t, func(c *config.Config) {})
	status, body, err := rawGet(t, addrs[0], "", fmt.Sprintf("http://127.0.0.1:%d/x", port))
	if err != nil || !strings.HasPrefix(status, "403") || !strings.Contains(body, "private or local address") {
		t.Errorf("GET of a loopback origin with the default config: %q %q %v", status, body, err)
	}
	if !strings.Contains(logs.String(), `msg="private-destination guard on" allowed_private=none`) {
		t.Errorf("no start line naming the allowed private ranges:\n%s", logs)
	}
}

func TestGuardAllowedAndOwnAddress(t *testing.T) {
	port := mixedOrigin(t)
	_, addrs, logs := startConfigured(t, func(c *config.Config) { c.AllowPrivate = []string{"127.0.0.0/8", "::1"} })
	if status, body, err := rawGet(t, addrs[0], "", fmt.Sprintf("http://localhost:%d/x", port)); err != nil || body != "origin says /x" {
		t.Errorf("GET of an allowed loopback origin: %q %q %v", status, body, err)
	}
	status, body, err := rawGet(t, addrs[0], "", "http://"+addrs[0]+"/loop")
	if err != nil || !strings.HasPrefix(status, "403") || !strings.Contains(body, "is this proxy") {
		t.Errorf("GET of the proxy itself: %q %q %v", status, body, err)
	}
	if !strings.Contains(logs.String(), `allowed_private=127.0.0.0/8,::1/128`) {
		t.Errorf("start line does not list the allowed ranges:\n%s", logs)
	}
}

func TestACLFromConfig(t *testing.T) {
	port := mixedOrigin(t)
	_, addrs, _ := startConfigured(t, func(c *config.Config) {
		c.ACL.Default = "allow"
		c.ACL.Rules = []config.ACLRule{{Name: "no-x", Action: "deny", Criteria: config.Criteria{Hosts: []string{"localhost"}}},
			{Name: "local", Action: "allow", AllowPrivate: []string{"127.0.0.1"}}}
	})
	if status, _, err := rawGet(t, addrs[0], "", fmt.Sprintf("http://localhost:%d/x", port)); err != nil || !strings.HasPrefix(status, "403") {
		t.Errorf("denied host: %q %v", status, err)
	}
	if _, body, err := rawGet(t, addrs[0], "", fmt.Sprintf("http://127.0.0.1:%d/y", port)); err != nil || body != "origin says /y" {
		t.Errorf("allowed by the rule's allow_private: %q %v", body, err)
	}
}

// held opens n idle connections to addr that the server admits, and
// closes them when the test ends.
func held(t *testing.T, addr string, n int) []net.Conn {
	t.Helper()
	var cs []net.Conn
	for range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		cs = append(cs, c)
	}
	return cs
}

func TestConnectionLimits(t *testing.T) {
	port := mixedOrigin(t)
	echo := tcpEcho(t)
	s, addrs, logs := startConfigured(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Limits.MaxConnections = 2
	})
	target := fmt.Sprintf("http://127.0.0.1:%d/ok", port)
	idle := held(t, addrs[0], 2)
	waitFor(t, "two admitted connections", func() bool { return s.gen.Limiter.Conns() == 2 })
	if status, _, err := rawGet(t, addrs[0], "", target); err == nil && !strings.HasPrefix(status, "503") {
		t.Errorf("third connection: %q, want 503 or a closed connection", status)
	}
	idle[0].Close()
	waitFor(t, "the closed connection released", func() bool { return s.gen.Limiter.Conns() == 1 })
	if _, body, err := rawGet(t, addrs[0], "", target); err != nil || body != "origin says /ok" {
		t.Errorf("after a connection closed: %q %v", body, err)
	}
	// The server releases rawGet's connection when it sees it close,
	// which may come after rawGet returns: wait, or the CONNECT below
	// could find both slots taken.
	waitFor(t, "rawGet's connection released", func() bool { return s.gen.Limiter.Conns() == 1 })

	// A CONNECT tunnel in the engine keeps its admission until it ends.
	tc, err := net.Dial("tcp", addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	fmt.Fprintf(tc, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", echo, echo)
	br := bufio.NewReader(tc)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, " 200 ") {
		t.Fatalf("CONNECT: %q %v", line, err)
	}
	waitFor(t, "the tunnel in the engine", func() bool { return s.Tunnels() == 1 })
	if n := s.gen.Limiter.Conns(); n != 2 {
		t.Errorf("%d connections counted with a tunnel and an idle connection, want 2", n)
	}
	tc.Close()
	waitFor(t, "the tunnel's admission released", func() bool { return s.gen.Limiter.Conns() == 1 })
	if !strings.Contains(logs.String(), `msg="connections refused" reason="too many connections"`) {
		t.Errorf("no refusal warning:\n%s", logs)
	}
}

// tcpEcho starts a TCP echo server on loopback and returns its address.
func tcpEcho(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				io.Copy(c, c)
				c.Close()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func TestPerClientLimits(t *testing.T) {
	port := mixedOrigin(t)
	target := fmt.Sprintf("http://127.0.0.1:%d/ok", port)
	t.Run("connections", func(t *testing.T) {
		s, addrs, _ := startConfigured(t, func(c *config.Config) {
			c.AllowPrivate = []string{"127.0.0.0/8"}
			c.Limits.MaxConnectionsPerClient = 1
		})
		held(t, addrs[0], 1)
		waitFor(t, "the first connection admitted", func() bool { return s.gen.Limiter.Conns() == 1 })
		if status, _, err := rawGet(t, addrs[0], "", target); err == nil && !strings.HasPrefix(status, "429") {
			t.Errorf("second connection from 127.0.0.1: %q", status)
		}
		if _, body, err := rawGet(t, addrs[0], "127.0.0.2", target); err != nil || body != "origin says /ok" {
			t.Errorf("first connection from 127.0.0.2: %q %v", body, err)
		}
	})
	t.Run("rate", func(t *testing.T) {
		_, addrs, _ := startConfigured(t, func(c *config.Config) {
			c.AllowPrivate = []string{"127.0.0.0/8"}
			c.Limits.ConnectionRate, c.Limits.ConnectionBurst = 1, 2
		})
		for i := range 2 {
			if _, body, err := rawGet(t, addrs[0], "", target); err != nil || body != "origin says /ok" {
				t.Fatalf("connection %d within the burst: %q %v", i, body, err)
			}
		}
		if status, _, err := rawGet(t, addrs[0], "", target); err == nil && !strings.HasPrefix(status, "429") {
			t.Errorf("third connection at once: %q", status)
		}
	})
}

// rawClientHello returns the first TLS record of a real handshake to
// 127.0.0.1: a whole ClientHello.
func rawClientHello(t *testing.T) []byte {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go tls.Client(a, &tls.Config{ServerName: "127.0.0.1"}).Handshake()
	hdr := make([]byte, 5)
	if _, err := io.ReadFull(b, hdr); err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 5+int(hdr[3])<<8+int(hdr[4]))
	copy(rec, hdr)
	if _, err := io.ReadFull(b, rec[5:]); err != nil {
		t.Fatal(err)
	}
	return rec
}

// dialFrom connects to addr from the loopback address from.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestTLSHandshakeLimit checks limits.max_tls_handshakes and
// timeouts.client_hello: a slot is taken only once a whole ClientHello
// has arrived, so that neither a silent socket nor one that sends part of
// its first record holds one (issue 15: 300 silent sockets delayed a
// real handshake by 29 s), such a socket is closed after client_hello,
// and a whole ClientHello that then stalls holds its slot.
func TestTLSHandshakeLimit(t *testing.T) {
	cert, roots := proxyCerts(t)
	_, addrs, _ := startConfigured(t, func(c *config.Config) {
		c.Limits.MaxTLSHandshakes = 1
		// client_hello is longer than the wait for the handshake
		// beside the silent and partial sockets below (3 s): were the
		// partial one holding the only slot, the handshake would wait
		// for client_hello to free it and fail that wait, while a
		// loaded machine still has seconds for the handshake itself.
		c.Timeouts.ClientHello.Duration = 5 * time.Second
		c.Timeouts.ReadHeader.Duration = 8 * time.Second
		c.Listen = []config.Listener{{Address: "127.0.0.1:0", Protocol: "https", TLS: cert}}
	})
	handshake := func() <-chan error {
		done := make(chan error, 1)
		go func() {
			c, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addrs[0], &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
			if err == nil {
				c.Close()
			}
			done <- err
		}()
		return done
	}
	within := func(what string, done <-chan error, d time.Duration) {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		case <-time.After(d):
			t.Fatalf("%s: not done within %v", what, d)
		}
	}
	silent := dialFrom(t, "127.0.0.1", addrs[0])
	partial := dialFrom(t, "127.0.0.1", addrs[0]) // a record header, then nothing
	if _, err := partial.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x40}); err != nil {
		t.Fatal(err)
	}
	within("a handshake beside a silent and a partial socket", handshake(), 3*time.Second)
	for name, c := range map[string]net.Conn{"silent": silent, "partial": partial} {
		c.SetReadDeadline(time.Now().Add(15 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF && !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s socket after client_hello: %v, want it closed", name, err)
		}
	}

	stalled := dialFrom(t, "127.0.0.1", addrs[0]) // a whole ClientHello, then nothing
	if _, err := stalled.Write(rawClientHello(t)); err != nil {
		t.Fatal(err)
	}
	stalled.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := stalled.Read(make([]byte, 1)); err != nil { // the server's flight: the slot is taken
		t.Fatalf("no ServerHello to a whole ClientHello: %v", err)
	}
	done := handshake()
	select {
	case err := <-done:
		t.Fatalf("a second handshake finished while the only slot was held: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	stalled.Close()
	within("the handshake after the slot was freed", done, 5*time.Second)
}

// TestTLSHandshakeFairness checks that stalled handshakes from one
// address take at most an eighth of the slots: a real client from
// another address is not kept waiting (issue 15).
func TestTLSHandshakeFairness(t *testing.T) {
	cert, roots := proxyCerts(t)
	s, addrs, _ := startConfigured(t, func(c *config.Config) {
		c.Limits.MaxTLSHandshakes = 8
		c.Timeouts.ReadHeader.Duration = 10 * time.Second
		c.Listen = []config.Listener{{Address: "127.0.0.1:0", Protocol: "https", TLS: cert}}
	})
	hello := rawClientHello(t)
	for range 16 {
		c := dialFrom(t, "127.0.0.2", addrs[0])
		if _, err := c.Write(hello); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "the stalled handshakes to take their slot", func() bool { return len(s.gen.handshakes.all) == 1 })
	start := time.Now()
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}
	c, err := tls.DialWithDialer(d, "tcp", addrs[0], &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("handshake beside 16 stalled ones from another address: %v", err)
	}
	c.Close()
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("handshake beside 16 stalled ones from another address took %v", took)
	}
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDescriptorBudgetLogged checks that the server splits the open-file
// limit between connections and splice pipes as the configuration says,
// gives each worker's engine its share of the pipes, logs the split at
// start and again when a reload changes it.
func TestDescriptorBudgetLogged(t *testing.T) {
	soft, _, err := wire.OpenFileLimit()
	if err != nil {
		soft = wire.DefaultOpenFiles
	}
	const workers = 2
	want := func(t *testing.T, s *Server, logs *logBuffer, max int) {
		t.Helper()
		conns, pipes := (config.Limits{MaxConnections: max}).DescriptorBudget(soft)
		line := fmt.Sprintf(`msg="descriptor budget" open_files=%d connections=%d splice_pipes=%d splice_pipes_per_worker=%d`,
			soft, conns, pipes, pipes/workers)
		if !strings.Contains(logs.String(), line) {
			t.Errorf("no log line %s in:\n%s", line, logs)
		}
		if runtime.GOOS != "linux" {
			return // only the Linux engine has pipes
		}
		for i, e := range s.engines {
			if got := e.MaxPipes(); got != pipes/workers {
				t.Errorf("max_connections %d: engine %d bounded to %d pipes, want %d", max, i, got, pipes/workers)
			}
		}
	}
	for _, max := range []int{0, 100} {
		t.Run(fmt.Sprintf("max_connections %d", max), func(t *testing.T) {
			logs := &logBuffer{}
			s, _ := startLogged(t, reloadConfig(t, func(c *config.Config) {
				c.Workers = workers
				c.Limits.MaxConnections = max
			}), slog.New(slog.NewTextHandler(logs, nil)), &logBuffer{})
			want(t, s, logs, max)
			if err := s.Reload(reloadConfig(t, func(c *config.Config) {
				c.Workers = workers
				c.Limits.MaxConnections = max + 50
			})); err != nil {
				t.Fatalf("Reload: %v", err)
			}
			want(t, s, logs, max+50)
		})
	}
}

func TestHandshakeSlotsValidatedOverflow(t *testing.T) {
	h := newHandshakeSlots(16) // 2 per address
	ip := netip.MustParseAddr("192.0.2.1")
	var held []*ipSlots
	for i := range 2 {
		s := h.tryAcquire(ip, false)
		if s == nil {
			t.Fatalf("slot %d of the address's own 2: none", i)
		}
		held = append(held, s)
	}
	if h.ownFree(ip) {
		t.Error("ownFree with the address's 2 slots taken")
	}
	if s := h.tryAcquire(ip, false); s != nil {
		t.Fatal("an unvalidated address took a third slot")
	}
	// Validated: slots of all while half (8) are free.
	for i := range 6 {
		s := h.tryAcquire(ip, true)
		if s == nil {
			t.Fatalf("validated slot %d past the address's own: none (%d of 16 taken)", i, len(h.all))
		}
		held = append(held, s)
	}
	if s := h.tryAcquire(ip, true); s != nil {
		t.Fatalf("a validated address took a slot with %d of 16 taken; want none past half", len(h.all)-1)
	}
	// Giving back an overflow slot keeps the address's own entry.
	h.release(held[len(held)-1])
	held = held[:len(held)-1]
	if h.ips[ip] == nil || h.ownFree(ip) {
		t.Error("releasing an overflow slot dropped or freed the address's own slots")
	}
	for _, s := range held {
		h.release(s)
	}
	if len(h.all) != 0 || len(h.ips) != 0 {
		t.Errorf("after every release: %d slots taken, %d addresses; want 0, 0", len(h.all), len(h.ips))
	}
}
