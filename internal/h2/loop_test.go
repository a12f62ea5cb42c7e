package h2

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
)

// TestViaLoop checks that a stream whose Via names this rustle is
// refused 508, a request and a CONNECT, and goes nowhere.
func TestViaLoop(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "origin"))
	echo := proxytest.NewEcho(t)
	p := startProxy(t, testConfig(Config{}), nil)
	cc := p.client(t)
	// The test policy has no Instance: the process's default one
	// (a nil *route.Instance) names it.
	self := (*route.Instance)(nil).Token()
	for _, tt := range []struct{ name, via string }{
		{"own", "1.1 " + self},
		{"behind others", "1.0 fred, 1.1 squid, 1.1 " + self},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := newRequest(t, "GET", o.URL("/v"), nil)
			req.Header.Set("Via", tt.via)
			resp, body := roundTrip(t, cc, req)
			if resp.StatusCode != 508 || body != "rustle: "+gate.Loop.Reason()+"\n" {
				t.Errorf("GET: %d %q", resp.StatusCode, body)
			}
			req = newRequest(t, "CONNECT", "", nil)
			req.URL.Host, req.Host = echo.Addr, echo.Addr
			req.Header.Set("Via", tt.via)
			resp, body = roundTrip(t, cc, req)
			if resp.StatusCode != 508 {
				t.Errorf("CONNECT: %d %q", resp.StatusCode, body)
			}
		})
	}
	if n := len(o.Requests()); n != 0 {
		t.Errorf("the origin got %d requests", n)
	}
	if n := echo.Conns(); n != 0 {
		t.Errorf("the CONNECT target got %d connections", n)
	}
}
