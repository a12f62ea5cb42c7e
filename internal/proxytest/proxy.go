package proxytest

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// ServeFunc serves one accepted client connection with its session, as
// a front-end's ServeConn does; it owns c.
type ServeFunc func(c *net.TCPConn, s *gate.Session)

// StartProxy serves connections on 127.0.0.1:0 with serve under policy p
// and returns the address. See StartProxyOn.
func StartProxy(t testing.TB, p *gate.Policy, serve ServeFunc) string {
	t.Helper()
	return StartProxyOn(t, "127.0.0.1:0", p, serve)
}

// StartProxyOn serves connections on addr (a loopback address with port
// 0) and returns the address it is bound to. Each accepted connection
// gets a session of p, with a tunnel engine shared by the listener, and
// is served by serve on its own goroutine; the session is closed when
// serve returns.
//
// t.Cleanup cancels the sessions' context, closes the listener and every
// client connection, waits for every serve to return and closes the
// engine. A serve waiting on an upstream returns only when that wait
// ends, so tests of upstreams that never answer set a short response
// timeout.
func StartProxyOn(t testing.TB, addr string, p *gate.Policy, serve ServeFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("proxytest: proxy listen %s: %v", addr, err)
	}
	eng, err := tunnel.New(tunnel.Config{})
	if err != nil {
		ln.Close()
		t.Fatalf("proxytest: start tunnel engine: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &proxyServer{p: p, fn: serve, eng: eng, ctx: ctx, conns: map[*net.TCPConn]bool{}}
	s.wg.Add(1)
	go s.acceptLoop(ln.(*net.TCPListener))
	t.Cleanup(func() {
		cancel()
		s.mu.Lock()
		s.closed = true
		ln.Close()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
		eng.Close()
	})
	return ln.Addr().String()
}

// proxyServer is the accept loop of StartProxyOn.
type proxyServer struct {
	p   *gate.Policy
	fn  ServeFunc
	eng *tunnel.Engine
	ctx context.Context
	wg  sync.WaitGroup

	mu     sync.Mutex
	conns  map[*net.TCPConn]bool // client connections being served; guarded by mu
	closed bool                  // guarded by mu
}

func (s *proxyServer) acceptLoop(ln *net.TCPListener) {
	defer s.wg.Done()
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *proxyServer) serve(c *net.TCPConn) {
	defer s.wg.Done()
	var client netip.AddrPort
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		client = a.AddrPort()
	}
	sess := s.p.NewSession(s.ctx, client, s.eng, nil)
	sess.Attach(c)
	s.fn(c, sess)
	sess.Close()
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// NewPool returns an upstream pool for cfg, its fields left zero given
// the values rustle's configuration defaults them to (config.SetDefaults:
// 64 idle connections per host, 4096 in all, 90s idle), closed by
// t.Cleanup.
func NewPool(t testing.TB, cfg dialer.PoolConfig) *dialer.Pool {
	t.Helper()
	if cfg.MaxIdlePerHost == 0 {
		cfg.MaxIdlePerHost = 64
	}
	if cfg.MaxIdle == 0 {
		cfg.MaxIdle = 4096
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = 90 * time.Second
	}
	p, err := dialer.NewPool(cfg)
	if err != nil {
		t.Fatalf("proxytest: pool: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// NewDialer returns a dialer for cfg, failing the test when cfg is
// refused.
func NewDialer(t testing.TB, cfg dialer.Config) *dialer.Dialer {
	t.Helper()
	d, err := dialer.New(cfg)
	if err != nil {
		t.Fatalf("proxytest: dialer: %v", err)
	}
	return d
}

var ipv6 = sync.OnceValue(func() bool {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		return false
	}
	ln.Close()
	return true
})

// IPv6Loopback reports whether the host can listen on [::1].
func IPv6Loopback() bool { return ipv6() }

// ClosedPort returns a loopback address ("127.0.0.1:port") on which
// nothing listens: a port that was just bound and released.
func ClosedPort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxytest: listen: %v", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TCPPortWithUDP returns a loopback address ("127.0.0.1:port") free over
// TCP for a listener to bind, whose port it holds over UDP until the
// returned release is called (or the test ends): for a test that turns
// HTTP/3 on by a reload for a listener it keeps, on the listener's port.
// A TCP port the kernel chooses for port 0 may be held over UDP by
// another program, and the reload cannot move the listener; holding the
// UDP port keeps it free until the test releases it just before the
// reload.
func TCPPortWithUDP(t testing.TB) (addr string, release func()) {
	t.Helper()
	for range 100 {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("proxytest: listen: %v", err)
		}
		addr := ln.Addr().String()
		pc, err := net.ListenPacket("udp4", addr)
		ln.Close()
		if err != nil {
			continue // held over UDP: another port
		}
		var once sync.Once
		release := func() { once.Do(func() { pc.Close() }) }
		t.Cleanup(release)
		return addr, release
	}
	t.Fatal("proxytest: no loopback port free over both TCP and UDP in 100 tries")
	return "", nil
}

// WaitFor polls cond every few milliseconds until it holds, failing the
// test with what if it still does not after DefaultTimeout.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(DefaultTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("proxytest: timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// StaticOrigin answers every request with the same bytes and allocates
// nothing per request, so that a benchmark's allocations are the
// proxy's. It expects requests without bodies, one at a time per
// connection. Create one with NewStaticOrigin.
type StaticOrigin struct {
	// Addr is its address ("127.0.0.1:port" unless NewStaticOriginOn
	// named another).
	Addr string

	resp []byte
	ln   net.Listener
	wg   sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]bool // guarded by mu
	closed bool              // guarded by mu
}

// NewStaticOrigin starts a StaticOrigin answering resp, closed by
// t.Cleanup.
func NewStaticOrigin(t testing.TB, resp string) *StaticOrigin {
	t.Helper()
	return NewStaticOriginOn(t, "127.0.0.1:0", resp)
}

// NewStaticOriginOn is NewStaticOrigin listening on addr.
func NewStaticOriginOn(t testing.TB, addr, resp string) *StaticOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("proxytest: static origin listen: %v", err)
	}
	s := &StaticOrigin{Addr: ln.Addr().String(), resp: []byte(resp), ln: ln, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.acceptLoop()
	t.Cleanup(s.Close)
	return s
}

// NewStaticTLSOrigin is NewStaticOrigin over TLS with cert, on
// 127.0.0.1: each connection's handshake is done on its first read.
func NewStaticTLSOrigin(t testing.TB, cert tls.Certificate, resp string) *StaticOrigin {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxytest: static TLS origin listen: %v", err)
	}
	ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
	s := &StaticOrigin{Addr: ln.Addr().String(), resp: []byte(resp), ln: ln, conns: map[net.Conn]bool{}}
	s.wg.Add(1)
	go s.acceptLoop()
	t.Cleanup(s.Close)
	return s
}

// Close stops the origin and waits for its goroutines. It is idempotent.
func (s *StaticOrigin) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		s.ln.Close()
		for c := range s.conns {
			c.Close()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *StaticOrigin) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = true
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// serveConn answers each request head (found by its final CRLF CRLF)
// with the fixed response.
func (s *StaticOrigin) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	buf := make([]byte, 64<<10)
	n := 0
	for {
		m, err := c.Read(buf[n:])
		if err != nil {
			return
		}
		n += m
		if n >= 4 && string(buf[n-4:n]) == "\r\n\r\n" {
			n = 0
			if _, err := c.Write(s.resp); err != nil {
				return
			}
		} else if n == len(buf) {
			return
		}
	}
}
