package socks5

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/leaktest"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// TestMain fails the run when goroutines of this package, of the request
// path or of the tunnel engine outlive the tests.
func TestMain(m *testing.M) {
	os.Exit(leaktest.Main(m, 10*time.Second,
		"rustle/internal/socks5.", "rustle/internal/gate.", "rustle/internal/tunnel."))
}

// Test credentials.
const (
	testUser = "alice"
	testPass = "s3cret:pw"
)

// openPolicy returns a policy without users, rules or limits, whose guard
// lets loopback destinations through.
func openPolicy(t testing.TB) *gate.Policy {
	t.Helper()
	return proxytest.NewPolicy(t, proxytest.PolicyConfig{})
}

// authPolicy returns a policy that knows testUser and nothing else.
func authPolicy(t testing.TB) *gate.Policy {
	t.Helper()
	return proxytest.NewPolicy(t, proxytest.PolicyConfig{Users: map[string]string{testUser: testPass}})
}

// testServer is a Server behind a listener on a loopback port, serving
// each connection in a session of its policy as internal/server does.
type testServer struct {
	addr string         // host:port of the listener
	eng  *tunnel.Engine // nil: tunnels are relayed by goroutines
	srv  *Server
	pol  *gate.Policy

	cancel context.CancelFunc // cancels the context of every session

	// admitted counts the connections accepted, released the admissions
	// given back (by the session, or by the tunnel that took it on).
	admitted, released atomic.Int64

	mu     sync.Mutex
	active map[*net.TCPConn]struct{} // connections in ServeConn; guarded by mu
}

// testConfig returns c with its zero timeouts set as internal/server sets
// them from the configuration's defaults: HandshakeTimeout is
// timeouts.read_header (30s), UDPIdleTimeout timeouts.udp_idle (60s). New
// fills in no defaults of its own.
func testConfig(c Config) Config {
	var cfg config.Config
	cfg.SetDefaults()
	if c.HandshakeTimeout == 0 {
		c.HandshakeTimeout = cfg.Timeouts.ReadHeader.Duration
	}
	if c.UDPIdleTimeout == 0 {
		c.UDPIdleTimeout = cfg.Timeouts.UDPIdle.Duration
	}
	return c
}

// startServer serves testConfig(cfg) under pol on network ("tcp4" or
// "tcp6") at a loopback port, with its own tunnel engine, until the test
// ends. A nil Logger is one that discards debug-level records.
func startServer(t testing.TB, network string, pol *gate.Policy, cfg Config) *testServer {
	t.Helper()
	return startServerWith(t, network, pol, testConfig(cfg), true)
}

// startServerWith is startServer, with a tunnel engine only when engine
// is set, serving cfg as it is (zero timeouts arm no deadline).
func startServerWith(t testing.TB, network string, pol *gate.Policy, cfg Config, engine bool) *testServer {
	t.Helper()
	if cfg.Logger == nil {
		// Debug level, so that every log call's arguments are built.
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if pol.Logger == nil {
		pol.Logger = cfg.Logger
	}
	var eng *tunnel.Engine
	if engine {
		var err error
		eng, err = tunnel.New(tunnel.Config{IdleTimeout: time.Minute})
		if err != nil {
			t.Fatalf("tunnel.New: %v", err)
		}
	}
	ln, err := net.Listen(network, loopback(network)+":0")
	if err != nil {
		if eng != nil {
			eng.Close()
		}
		t.Fatalf("listen: %v", err)
	}
	ts := &testServer{addr: ln.Addr().String(), eng: eng, srv: New(cfg), pol: pol, active: make(map[*net.TCPConn]struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	ts.cancel = cancel
	var wg sync.WaitGroup
	wg.Go(func() { ts.acceptLoop(ctx, ln, &wg) })
	t.Cleanup(func() {
		ln.Close()
		cancel()
		ts.mu.Lock()
		for c := range ts.active {
			c.Close()
		}
		ts.mu.Unlock()
		wg.Wait()
		if eng != nil {
			eng.Close()
		}
	})
	return ts
}

func (ts *testServer) acceptLoop(ctx context.Context, ln net.Listener, wg *sync.WaitGroup) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		tc := c.(*net.TCPConn)
		ts.mu.Lock()
		ts.active[tc] = struct{}{}
		ts.mu.Unlock()
		ts.admitted.Add(1)
		release := func() { ts.released.Add(1) }
		sess := ts.pol.NewSession(ctx, tc.RemoteAddr().(*net.TCPAddr).AddrPort(), ts.eng, release)
		sess.Attach(tc)
		wg.Go(func() {
			ts.srv.ServeConn(tc, sess)
			sess.Close()
			ts.mu.Lock()
			delete(ts.active, tc)
			ts.mu.Unlock()
		})
	}
}

// activeConns returns the number of connections in ServeConn.
func (ts *testServer) activeConns() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.active)
}

// waitFor polls cond every 10ms for up to 10s and fails the test if it
// never holds.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for range 1000 {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func loopback(network string) string {
	if strings.HasSuffix(network, "6") {
		return "[::1]"
	}
	return "127.0.0.1"
}

// skipWithoutIPv6 skips the test when the host has no IPv6 loopback.
func skipWithoutIPv6(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	ln.Close()
}

// startOrigin starts an HTTP origin on network's loopback that answers
// "origin says " and the request path, and returns its port.
func startOrigin(t testing.TB, network string) int {
	t.Helper()
	ln, err := net.Listen(network, loopback(network)+":0")
	if err != nil {
		t.Fatalf("listen origin: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "origin says "+r.URL.Path)
	})}
	var wg sync.WaitGroup
	wg.Go(func() { srv.Serve(ln) })
	t.Cleanup(func() {
		srv.Close()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// startEcho starts a TCP echo server on network's loopback and returns
// its address.
func startEcho(t testing.TB, network string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen(network, loopback(network)+":0")
	if err != nil {
		t.Fatalf("listen echo: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := make(map[net.Conn]struct{})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Go(func() {
				io.Copy(c, c)
				c.Close()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).AddrPort()
}

// dial connects to the test server with a 10s deadline on the connection.
func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// send writes b to c.
func send(t testing.TB, c net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatalf("write %x: %v", b, err)
	}
}

// expect reads len(want) bytes from c and compares them with want.
func expect(t testing.TB, c net.Conn, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatalf("read %d bytes (want %x): %v (got %x)", len(want), want, err, got)
	}
	if string(got) != string(want) {
		t.Fatalf("read %x, want %x", got, want)
	}
}

// expectClosed checks that the server closes c without sending anything
// more: a read ends with EOF or a reset, not with the deadline.
func expectClosed(t testing.TB, c net.Conn) {
	t.Helper()
	var b [1]byte
	n, err := c.Read(b[:])
	if n > 0 {
		t.Fatalf("read %x, want the connection closed", b[:n])
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after the deadline: %v", err)
	}
	if err == nil {
		t.Fatal("read returned nothing and no error")
	}
}

// greet sends a greeting offering methods and expects method to be chosen.
func greet(t testing.TB, c net.Conn, method byte, methods ...byte) {
	t.Helper()
	send(t, c, append([]byte{5, byte(len(methods))}, methods...))
	expect(t, c, []byte{5, method})
}

// login runs the greeting and the RFC 1929 sub-negotiation with user and
// pass and expects success.
func login(t testing.TB, c net.Conn, user, pass string) {
	t.Helper()
	greet(t, c, methodUserPass, methodNoAuth, methodUserPass)
	send(t, c, userPassMsg(user, pass))
	expect(t, c, []byte{1, 0})
}

func userPassMsg(user, pass string) []byte {
	b := []byte{1, byte(len(user))}
	b = append(b, user...)
	b = append(b, byte(len(pass)))
	return append(b, pass...)
}

// requestMsg returns a SOCKS5 request for cmd to ap.
func requestMsg(cmd byte, ap netip.AddrPort) []byte {
	b := []byte{5, cmd, 0}
	if ap.Addr().Is4() {
		a := ap.Addr().As4()
		b = append(append(b, atypIPv4), a[:]...)
	} else {
		a := ap.Addr().As16()
		b = append(append(b, atypIPv6), a[:]...)
	}
	return binary.BigEndian.AppendUint16(b, ap.Port())
}

// domainRequestMsg returns a SOCKS5 request for cmd to host:port.
func domainRequestMsg(cmd byte, host string, port uint16) []byte {
	b := []byte{5, cmd, 0, atypDomain, byte(len(host))}
	b = append(b, host...)
	return binary.BigEndian.AppendUint16(b, port)
}

// readReply reads a SOCKS5 reply and returns its REP and bound address.
func readReply(t testing.TB, c net.Conn) (byte, netip.AddrPort) {
	t.Helper()
	var head [4]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		t.Fatalf("read reply: %v", err)
	}
	if head[0] != 5 || head[2] != 0 {
		t.Fatalf("reply starts %x, want 05 REP 00", head)
	}
	var ip netip.Addr
	switch head[3] {
	case atypIPv4:
		var a [4]byte
		if _, err := io.ReadFull(c, a[:]); err != nil {
			t.Fatalf("read reply address: %v", err)
		}
		ip = netip.AddrFrom4(a)
	case atypIPv6:
		var a [16]byte
		if _, err := io.ReadFull(c, a[:]); err != nil {
			t.Fatalf("read reply address: %v", err)
		}
		ip = netip.AddrFrom16(a)
	default:
		t.Fatalf("reply address type %d", head[3])
	}
	var port [2]byte
	if _, err := io.ReadFull(c, port[:]); err != nil {
		t.Fatalf("read reply port: %v", err)
	}
	return head[1], netip.AddrPortFrom(ip, binary.BigEndian.Uint16(port[:]))
}

// closedPort returns a loopback TCP port on network that nothing listens on.
func closedPort(t testing.TB, network string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen(network, loopback(network)+":0")
	if err != nil {
		t.Fatal(err)
	}
	ap := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	return ap
}
