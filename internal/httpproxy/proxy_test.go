package httpproxy_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestNewValidates checks that New fills no defaults: a Config without
// its origin client is an error, one with every timeout 0 is not.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	if p, err := httpproxy.New(httpproxy.Config{}); err == nil || p != nil || err.Error() != "httpproxy: Origin must be set" {
		t.Errorf("New without Origin = %v, %v; want no Proxy and an error naming Origin", p, err)
	}
	if _, err := httpproxy.New(testConfig(t, testCfg{zeroTimeouts: true})); err != nil {
		t.Errorf("New with zero timeouts = %v, want no error", err)
	}
}

// TestZeroTimeoutsNoDeadline checks that a Proxy whose timeouts are all
// 0 arms no deadline, rather than deadlines that have already passed: a
// request whose head arrives in pieces, on a connection already used,
// with a body, is forwarded and answered.
func TestZeroTimeoutsNoDeadline(t *testing.T) {
	t.Parallel()
	p, err := httpproxy.New(testConfig(t, testCfg{zeroTimeouts: true}))
	if err != nil {
		t.Fatal(err)
	}
	o := proxytest.NewOrigin(t, proxytest.Echo())
	pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: proxytest.NewPool(t, dialer.PoolConfig{})})
	proxy := proxytest.StartProxy(t, pol, func(c *net.TCPConn, s *gate.Session) { p.ServeConn(c, s) })
	c := proxytest.Dial(t, proxy)
	c.Timeout = 5 * time.Second
	for i := range 2 {
		req := request("POST", o.URL("/"), 1, "hello", "Host: "+o.Addr)
		half := strings.Index(req, "\r\n") + 2
		c.Write(req[:half])
		time.Sleep(50 * time.Millisecond)
		c.Write(req[half:])
		r := c.ReadResponse("POST")
		if r.Status != 200 {
			t.Fatalf("request %d: answer %q", i, r.Head)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
