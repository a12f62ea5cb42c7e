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
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// startTLSProxy starts a proxy for cfg that serves HTTP/1.1 over TLS, as
// an https listener does (a tls.Conn over tunnel.RecordConn, its
// handshake done before ServeConn), and returns its address and a client
// configuration that trusts it. accepted, unless nil, is called with each
// client socket before its handshake.
func startTLSProxy(t testing.TB, cfg httpproxy.Config, pc proxytest.PolicyConfig, accepted func(*net.TCPConn)) (string, *tls.Config) {
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
	proxy, ccfg := startTLSProxy(b, httpproxy.Config{}, proxytest.PolicyConfig{Pool: pool}, nil)
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
