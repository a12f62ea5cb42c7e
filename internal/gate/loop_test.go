package gate_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
)

// TestAuthorizeLoop checks that a request whose Via names the policy's
// instance is refused before its credentials are asked for: Loop, 508,
// logged with the reason loop and a warning; one whose Via names another
// rustle is not.
func TestAuthorizeLoop(t *testing.T) {
	gate.ResetLoopWarn()
	var logs bytes.Buffer
	cfg := proxytest.PolicyConfig{
		Users:  map[string]string{"alice": "pw"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	o := observe(t, &cfg)
	p := proxytest.NewPolicy(t, cfg)
	p.Instance = route.NewInstance()
	s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40020"), nil, nil)
	defer s.Close()
	tests := []struct {
		name string
		via  string
		auth []byte
		want gate.Kind
	}{
		{"own element, no credentials", p.Instance.ViaElement(1), nil, gate.Loop},
		{"own element behind others", "1.0 fred, 1.1 squid (squid/5.7), " + p.Instance.ViaElement(2), basicAuth("alice", "pw"), gate.Loop},
		{"another rustle", route.NewInstance().ViaElement(1), basicAuth("alice", "pw"), gate.OK},
		{"the process's default", (*route.Instance)(nil).ViaElement(1), basicAuth("alice", "pw"), gate.OK},
		{"none", "", basicAuth("alice", "pw"), gate.OK},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := connectReq("www.example.com", tt.auth)
			if tt.via != "" {
				r.Via = []byte(tt.via)
			}
			var g gate.Grant
			k := s.Authorize(r, &g)
			g.Answer(k.Status(), 0)
			g.Finish(0, 0)
			if k != tt.want {
				t.Fatalf("Authorize = %v, want %v", k, tt.want)
			}
			rec := o.records(t, i+1)[i]
			if tt.want == gate.Loop {
				if k.Status() != 508 || rec["reason"] != "loop" || rec["status"] != 508.0 {
					t.Errorf("status %d, record %v", k.Status(), rec)
				}
				if !strings.Contains(k.Reason(), "loop detected") {
					t.Errorf("reason %q", k.Reason())
				}
			} else if rec["reason"] != nil {
				t.Errorf("record %v", rec)
			}
		})
	}
	if got := logs.String(); strings.Count(got, "loop detected") != 1 || !strings.Contains(got, "detected_by=via") || strings.Contains(got, "pw") {
		t.Errorf("log: %s", got)
	}
}

// TestForwardParentTrace checks that a TRACE is never sent in absolute
// form to an http parent rustle has credentials for (its echo would carry
// them back): it goes through a tunnel to the origin; other methods, and
// a TRACE to a parent without credentials, go to the parent.
func TestForwardParentTrace(t *testing.T) {
	for _, tt := range []struct {
		url, method string
		forward     bool
	}{
		{"http://u:pw@127.0.0.1:3128", "GET", true},
		{"http://u:pw@127.0.0.1:3128", "OPTIONS", true},
		{"http://u:pw@127.0.0.1:3128", "TRACE", false},
		{"https://u:pw@127.0.0.1:3129", "TRACE", false},
		{"http://127.0.0.1:3128", "TRACE", true},
	} {
		t.Run(tt.method+" "+tt.url, func(t *testing.T) {
			p := proxytest.NewPolicy(t, proxytest.PolicyConfig{})
			tab, err := route.New(proxytest.RouteDefaults(route.Config{
				Parents: []route.ParentConfig{{Name: "up", URL: tt.url}},
				Routes:  []route.RouteConfig{{Name: "all", Via: []string{"up"}}},
			}))
			if err != nil {
				t.Fatal(err)
			}
			p.Routes = tab
			s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40021"), nil, nil)
			defer s.Close()
			var g gate.Grant
			r := &gate.Request{Protocol: acl.HTTP, Method: tt.method, Host: "origin.test", Port: 80, Target: []byte("http://origin.test/")}
			if k := s.Authorize(r, &g); k != gate.OK {
				t.Fatal(k)
			}
			defer g.Finish(0, 0)
			fwd, err := g.ForwardParent()
			if err != nil {
				t.Fatal(err)
			}
			if got := fwd != nil; got != tt.forward || g.ViaParent() == tt.forward {
				t.Errorf("ForwardParent = %v, ViaParent = %v; want a forward: %v", fwd.Name(), g.ViaParent(), tt.forward)
			}
		})
	}
}

// TestAuthorizeViaAllocs checks that a request that carries a Via (one
// that came through another proxy) costs no allocation on the
// keep-alive path: the check and the copy kept for a tunnel reuse the
// grant's buffer.
func TestAuthorizeViaAllocs(t *testing.T) {
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Users: map[string]string{"alice": "pw"}})
	s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40022"), nil, nil)
	defer s.Close()
	r := connectReq("www.example.com", basicAuth("alice", "pw"))
	r.Via = []byte("1.0 fred, 1.1 squid (squid/5.7), " + route.NewInstance().ViaElement(1))
	var g gate.Grant
	if k := s.Authorize(r, &g); k != gate.OK {
		t.Fatal(k)
	}
	g.Finish(0, 0)
	if n := testing.AllocsPerRun(100, func() {
		s.Authorize(r, &g)
		g.Finish(0, 0)
	}); n != 0 {
		t.Errorf("Authorize with a Via allocates %v times", n)
	}
}
