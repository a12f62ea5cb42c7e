package httpproxy_test

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
)

// TestViaLoop checks that a request whose Via names this rustle (it
// came back through a parent) is refused 508 with a reason, on its own
// or behind other proxies' elements, a plain request and a CONNECT, and
// goes nowhere; another rustle's element is no loop.
func TestViaLoop(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setup(t, testCfg{}, proxytest.Respond(200, "origin"))
	echo := proxytest.NewEcho(t)
	// The test policy has no Instance: the process's default one
	// (a nil *route.Instance) names it.
	self := (*route.Instance)(nil).Token()
	tests := []struct {
		name, method, target string
		via                  []string
		status               int
	}{
		{"GET", "GET", o.URL("/a"), []string{"Via: 1.1 " + self}, 508},
		{"GET behind others", "GET", o.URL("/b"), []string{"Via: 1.0 fred", "Via: 1.1 squid (squid/5.7), 1.1 " + self}, 508},
		{"CONNECT", "CONNECT", echo.Addr, []string{"Via: 1.1 " + self}, 508},
		{"another rustle", "GET", o.URL("/c"), []string{"Via: 1.1 rustle-0000000000000000"}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := proxytest.Dial(t, proxy)
			host := tt.target
			if tt.method == "GET" {
				host = o.Addr
			}
			r, _ := c.RoundTrip(request(tt.method, tt.target, 1, "", append([]string{"Host: " + host}, tt.via...)...))
			if r.Status != tt.status {
				t.Fatalf("status %d, want %d: %q", r.Status, tt.status, r.Head)
			}
			if tt.status == 508 && string(r.Body) != "rustle: "+gate.Loop.Reason()+"\n" {
				t.Errorf("body %q", r.Body)
			}
		})
	}
	if n := len(o.Requests()); n != 1 {
		t.Errorf("the origin got %d requests, want 1", n)
	}
	if n := echo.Conns(); n != 0 {
		t.Errorf("the CONNECT target got %d connections, want 0", n)
	}
}
