package h3

import (
	"io"
	"net/http"
	"net/url"
	"testing"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
)

// TestViaLoop checks that a request whose Via names this rustle is
// refused 508, a request and a CONNECT, and goes nowhere.
func TestViaLoop(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "origin"))
	echo := proxytest.NewEcho(t)
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	cc := p.client(t)
	// The test policy has no Instance: the process's default one
	// (a nil *route.Instance) names it.
	self := (*route.Instance)(nil).Token()
	via := "1.0 fred, 1.1 " + self
	req, err := http.NewRequest(http.MethodGet, o.URL("/v"), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Via", via)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 508 || string(body) != "rustle: "+gate.Loop.Reason()+"\n" {
		t.Errorf("GET: %d %q", resp.StatusCode, body)
	}
	req, err = http.NewRequest(http.MethodConnect, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.URL, req.Host = &url.URL{Host: echo.Addr}, echo.Addr
	req.Header.Set("Via", via)
	resp, err = cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 508 {
		t.Errorf("CONNECT: %d", resp.StatusCode)
	}
	if n := len(o.Requests()); n != 0 {
		t.Errorf("the origin got %d requests", n)
	}
	if n := echo.Conns(); n != 0 {
		t.Errorf("the CONNECT target got %d connections", n)
	}
}
