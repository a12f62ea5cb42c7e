package httpproxy_test

import (
	"crypto/tls"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestSocketBufferBytes checks that SocketBufferBytes sizes the send and
// receive buffers of client sockets on a plain port and on a TLS one,
// where the connection served is a tls.Conn over the socket.
func TestSocketBufferBytes(t *testing.T) {
	t.Parallel()
	// Under the kernel's default caps (net.core.wmem_max and rmem_max,
	// 212992), above the default sizes (tcp_wmem 16384, tcp_rmem 131072
	// are what a fresh loopback socket reports).
	const n = 96 << 10
	cfg := testCfg{SocketBufferBytes: n}
	tests := []struct {
		name string
		tls  bool
	}{
		{"plain", false},
		{"TLS", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
			socks := make(chan *net.TCPConn, 1)
			accepted := func(c *net.TCPConn) { socks <- c }
			var c net.Conn
			if tt.tls {
				addr, ccfg := startTLSProxy(t, cfg, proxytest.PolicyConfig{}, accepted)
				var err error
				c, err = tls.Dial("tcp", addr, ccfg)
				if err != nil {
					t.Fatal(err)
				}
			} else {
				p := newProxy(t, cfg)
				addr := proxytest.StartProxy(t, proxytest.NewPolicy(t, proxytest.PolicyConfig{}), func(c *net.TCPConn, s *gate.Session) {
					accepted(c)
					p.ServeConn(c, s)
				})
				var err error
				c, err = net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() { c.Close() })
			c.SetDeadline(time.Now().Add(10 * time.Second))
			// An answer: ServeConn has started, and set the buffers.
			if _, err := c.Write([]byte(get(o, "/"))); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Read(make([]byte, 512)); err != nil {
				t.Fatalf("read the answer: %v", err)
			}
			rc, err := (<-socks).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var snd, rcv int
			var serr, rerr error
			rc.Control(func(fd uintptr) {
				snd, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
				rcv, rerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
			})
			if serr != nil || rerr != nil {
				t.Fatalf("getsockopt: %v, %v", serr, rerr)
			}
			// Linux reports twice the size set, for its bookkeeping.
			if snd != 2*n || rcv != 2*n {
				t.Errorf("SO_SNDBUF %d, SO_RCVBUF %d; want %d each (%d set)", snd, rcv, 2*n, n)
			}
		})
	}
}
