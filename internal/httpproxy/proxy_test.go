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

// TestNewValidates checks that New fills no defaults: a Config with a
// setting that cannot be zero, or out of range, is an error naming the
// field.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		edit func(*httpproxy.Config)
		want string // "" = no error
	}{
		{"resolved", func(*httpproxy.Config) {}, ""},
		{"forwarded rfc", func(c *httpproxy.Config) { c.Forwarded = httpproxy.ForwardedRFC }, ""},
		{"forwarded xff", func(c *httpproxy.Config) { c.Forwarded = httpproxy.ForwardedXFF }, ""},
		{"zero timeouts", func(c *httpproxy.Config) {
			c.ReadHeaderTimeout, c.ResponseHeaderTimeout, c.IdleTimeout, c.WriteTimeout = 0, 0, 0, 0
		}, ""},
		{"max header bytes zero", func(c *httpproxy.Config) { c.MaxHeaderBytes = 0 },
			"httpproxy: MaxHeaderBytes must be positive, got 0"},
		{"max header bytes negative", func(c *httpproxy.Config) { c.MaxHeaderBytes = -1 },
			"httpproxy: MaxHeaderBytes must be positive, got -1"},
		{"forwarded empty", func(c *httpproxy.Config) { c.Forwarded = "" },
			`httpproxy: Forwarded must be "none", "rfc7239" or "x-forwarded-for", got ""`},
		{"forwarded unknown", func(c *httpproxy.Config) { c.Forwarded = "X-Forwarded-For" },
			`httpproxy: Forwarded must be "none", "rfc7239" or "x-forwarded-for", got "X-Forwarded-For"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(httpproxy.Config{})
			tt.edit(&cfg)
			p, err := httpproxy.New(cfg)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("New = %v, want no error", err)
			case tt.want == "" && p == nil:
				t.Fatal("New returned no Proxy and no error")
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("New error = %v, want %q", err, tt.want)
			case tt.want != "" && p != nil:
				t.Fatal("New returned a Proxy with its error")
			}
		})
	}
}

// TestZeroTimeoutsNoDeadline checks that a Proxy whose timeouts are all
// 0 arms no deadline, rather than deadlines that have already passed: a
// request whose head arrives in pieces, on a connection already used,
// with a body, is forwarded and answered.
func TestZeroTimeoutsNoDeadline(t *testing.T) {
	t.Parallel()
	cfg := testConfig(httpproxy.Config{})
	cfg.ReadHeaderTimeout, cfg.ResponseHeaderTimeout, cfg.IdleTimeout, cfg.WriteTimeout = 0, 0, 0, 0
	p, err := httpproxy.New(cfg)
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
