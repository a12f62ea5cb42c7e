package httpproxy_test

import (
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// startTLSProxy starts a proxy for cfg that serves HTTP/1.1 over TLS, as
// an https listener does (a tls.Conn over tunnel.RecordConn, its
// handshake done before ServeConn), and returns its address and a client
// configuration that trusts it. accepted, unless nil, is called with each
// client socket before its handshake.
func startTLSProxy(t testing.TB, cfg testCfg, pc proxytest.PolicyConfig, accepted func(*net.TCPConn)) (string, *tls.Config) {
	t.Helper()
	cert, roots := proxytest.SelfSigned(t)
	scfg := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	p := newProxy(t, cfg)
	addr := proxytest.StartProxy(t, proxytest.NewPolicy(t, pc), func(c *net.TCPConn, s *gate.Session) {
		if accepted != nil {
			accepted(c)
		}
		tc := tls.Server(tunnel.RecordConn(c), scfg)
		if err := tc.HandshakeContext(s.Context()); err != nil {
			c.Close()
			return
		}
		p.ServeConn(tc, s)
	})
	return addr, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"http/1.1"}}
}

// BenchmarkForward1KTLS is BenchmarkForward1K over TLS from the client:
// keep-alive GETs of 1 KiB answers on the https port's HTTP/1.1 path.
func BenchmarkForward1KTLS(b *testing.B) {
	body := strings.Repeat("b", 1024)
	resp := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1024\r\n\r\n" + body
	o := proxytest.NewStaticOrigin(b, resp)
	pool := proxytest.NewPool(b, dialer.PoolConfig{})
	proxy, ccfg := startTLSProxy(b, testCfg{}, proxytest.PolicyConfig{Pool: pool}, nil)
	raw, err := net.Dial("tcp", proxy)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { raw.Close() })
	c := tls.Client(raw, ccfg)
	req := []byte("GET http://" + o.Addr + "/1k HTTP/1.1\r\nHost: " + o.Addr + "\r\nUser-Agent: bench\r\n\r\n")
	buf := make([]byte, len(resp))
	exchange := func() error {
		if _, err := c.Write(req); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf)
		return err
	}
	c.SetDeadline(time.Now().Add(5 * time.Minute))
	if err := exchange(); err != nil || string(buf) != resp {
		b.Fatalf("first exchange: %v, got %q", err, buf)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := exchange(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if string(buf) != resp {
		b.Fatalf("last answer %q", buf)
	}
}

// TestForwardTLSAllocs checks the allocations of a keep-alive exchange on
// the TLS path, counted over the whole process: the proxy's share is the
// one crypto/tls makes for each record it reads (its ask for the record
// header), the client's the same for the response. A record read ahead
// whole is handed to crypto/tls in one Read (tunnel.RecordConn), so that
// it does not ask again for the body.
func TestForwardTLSAllocs(t *testing.T) {
	if proxytest.Race {
		t.Skip("the race detector allocates on its own")
	}
	body := strings.Repeat("b", 1024)
	resp := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1024\r\n\r\n" + body
	o := proxytest.NewStaticOrigin(t, resp)
	pool := proxytest.NewPool(t, dialer.PoolConfig{})
	proxy, ccfg := startTLSProxy(t, testCfg{}, proxytest.PolicyConfig{Pool: pool}, nil)
	raw, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	c := tls.Client(raw, ccfg)
	c.SetDeadline(time.Now().Add(time.Minute))
	req := []byte("GET http://" + o.Addr + "/1k HTTP/1.1\r\nHost: " + o.Addr + "\r\nUser-Agent: bench\r\n\r\n")
	buf := make([]byte, len(resp))
	var xerr error
	exchange := func() {
		if xerr != nil {
			return
		}
		if _, xerr = c.Write(req); xerr == nil {
			_, xerr = io.ReadFull(c, buf)
		}
	}
	for range 10 { // dial the upstream, grow the buffers
		exchange()
	}
	n := testing.AllocsPerRun(200, exchange)
	if xerr != nil || string(buf) != resp {
		t.Fatalf("exchange: %v, got %q", xerr, buf)
	}
	if n > 2 {
		t.Errorf("%.2f allocations per exchange, want at most 2 (one per record read, proxy and client)", n)
	}
}
