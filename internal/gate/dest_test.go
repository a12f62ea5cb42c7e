package gate_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
)

// TestAppendDest checks the destination a grant dials, as Authorize was
// given it: the host and port an HTTP front-end parsed (a name in lower
// case, an IPv4 spelling in dotted decimal, an IPv6 literal in brackets),
// or the address and port a SOCKS client sent; and that appending it
// allocates nothing.
func TestAppendDest(t *testing.T) {
	s := newSession(t, proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	tests := []struct {
		name string
		host string
		addr netip.Addr
		port uint16
		want string
	}{
		{"name", "www.example.com", netip.Addr{}, 443, "www.example.com:443"},
		{"name in upper case", "WWW.Example.COM", netip.Addr{}, 80, "www.example.com:80"},
		{"IPv4", "192.0.2.1", netip.Addr{}, 8080, "192.0.2.1:8080"},
		{"IPv4 spelling", "127.1", netip.Addr{}, 80, "127.0.0.1:80"},
		{"IPv4 in hex", "0x7f000001", netip.Addr{}, 80, "127.0.0.1:80"},
		{"IPv6", "2001:DB8::1", netip.Addr{}, 443, "[2001:db8::1]:443"},
		{"SOCKS IPv4", "", netip.MustParseAddr("192.0.2.7"), 1080, "192.0.2.7:1080"},
		{"SOCKS IPv6", "", netip.MustParseAddr("2001:db8::7"), 22, "[2001:db8::7]:22"},
		{"port 0", "h", netip.Addr{}, 0, "h:0"},
	}
	var g gate.Grant
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &gate.Request{Method: "CONNECT", Host: tt.host, Addr: tt.addr, Port: tt.port}
			if k := s.Authorize(r, &g); k != gate.OK {
				t.Fatalf("Authorize = %v", k)
			}
			defer g.Finish(0, 0)
			if got := string(g.AppendDest([]byte("dst="))); got != "dst="+tt.want {
				t.Errorf("AppendDest = %q, want %q", got, "dst="+tt.want)
			}
			buf := make([]byte, 0, 64)
			if n := testing.AllocsPerRun(100, func() { buf = g.AppendDest(buf[:0]) }); n != 0 {
				t.Errorf("AppendDest allocates %v times", n)
			}
		})
	}
}

// TestDialDestination checks that a grant dials the destination its
// request named, and that a grant reused for the next request of the
// connection dials that one's, not the destination it dialled before.
func TestDialDestination(t *testing.T) {
	s := newSession(t, proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	first, second := proxytest.NewEcho(t), proxytest.NewEcho(t)
	var g gate.Grant
	for _, addr := range []string{first.Addr, second.Addr, second.Addr, first.Addr} {
		if k := s.Authorize(connectTo(t, addr, nil), &g); k != gate.OK {
			t.Fatalf("Authorize(%s) = %v", addr, k)
		}
		c, err := g.Dial(context.Background())
		if err != nil {
			t.Fatalf("Dial for %s: %v", addr, err)
		}
		if got := c.RemoteAddr().String(); got != addr {
			t.Errorf("the grant for %s dialled %s", addr, got)
		}
		c.Close()
		g.Finish(0, 0)
	}
}

// TestForwardParentKeepAlive checks that asking for the http parent of a
// plain request to a destination the grant's previous request went to
// (a keep-alive connection's next request) allocates nothing.
func TestForwardParentKeepAlive(t *testing.T) {
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{})
	tab, err := route.New(proxytest.RouteDefaults(route.Config{
		Parents: []route.ParentConfig{{Name: "a", URL: "http://127.0.0.1:3128"}},
		Routes:  []route.RouteConfig{{Name: "all", Via: []string{"a"}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	p.Routes = tab
	s := newSession(t, p)
	r := &gate.Request{Protocol: acl.HTTP, Method: "GET", Host: "www.example.com", Port: 80, Target: []byte("http://www.example.com/")}
	var g gate.Grant
	ask := func() {
		if k := s.Authorize(r, &g); k != gate.OK {
			t.Fatalf("Authorize = %v", k)
		}
		if pp, err := g.ForwardParent(); err != nil || pp == nil || pp.Name() != "a" {
			t.Fatalf("ForwardParent = %v, %v; want the http parent a", pp, err)
		}
		g.Finish(0, 0)
	}
	ask()
	if n := testing.AllocsPerRun(100, ask); n != 0 {
		t.Errorf("ForwardParent on the keep-alive path allocates %v times", n)
	}
}
