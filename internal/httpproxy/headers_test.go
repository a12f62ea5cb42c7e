package httpproxy_test

import (
	"bytes"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
)

// field is a header rule's field.
func field(name, value string) origin.HeaderField {
	return origin.HeaderField{Name: name, Value: value}
}

// newHeaderRules compiles rules, and routeRules by the name of t's routes.
func newHeaderRules(t testing.TB, rt *route.Table, routeRules map[string]origin.HeaderRule, rules ...origin.HeaderRule) *origin.HeaderRules {
	t.Helper()
	hc := origin.HeaderRulesConfig{Rules: rules, Routes: make(map[*route.Route]origin.HeaderRule)}
	var routes []route.Route
	if rt != nil {
		routes = rt.Routes()
	}
	for i := range routes {
		if r, ok := routeRules[routes[i].Name()]; ok {
			hc.Routes[&routes[i]] = r
		}
	}
	h, err := origin.NewHeaderRules(hc)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestHeaderRules checks the header rules on the plain port: a route's
// apply to the requests it takes, a [[header_rules]] entry's to those it
// matches, after the route's; a set replaces the client's fields, a
// remove drops them (X-Forwarded-For rustle would add too), an add goes
// beside them; the client's Proxy-Authorization never reaches the
// origin; a TRACE gets the removals but no rule's value; the response's
// fields are dropped and added likewise.
func TestHeaderRules(t *testing.T) {
	t.Parallel()
	resp := proxytest.Respond(200, "origin", "Server: o", "X-Route: origin's", "Set-Cookie: s=1")
	a, b := proxytest.NewOrigin(t, resp), proxytest.NewOrigin(t, resp)
	_, portA, _ := net.SplitHostPort(a.Addr)
	rt, err := route.New(route.Config{Routes: []route.RouteConfig{{Name: "to-a", Match: acl.Rule{Ports: []string{portA}}, Via: []string{route.Direct}}}})
	if err != nil {
		t.Fatal(err)
	}
	rules := newHeaderRules(t, rt, map[string]origin.HeaderRule{"to-a": {Name: "to-a",
		Request:  origin.HeaderEdit{Set: []origin.HeaderField{field("X-Balancer", "token-a")}, Remove: []string{"X-Forwarded-For"}},
		Response: origin.HeaderEdit{Set: []origin.HeaderField{field("X-Route", "to-a")}, Remove: []string{"server"}},
	}}, origin.HeaderRule{Name: "bob", Match: acl.Rule{Users: []string{"bob"}},
		Request: origin.HeaderEdit{Set: []origin.HeaderField{field("X-Team", "devs")},
			Add: []origin.HeaderField{field("X-Tag", "rule")}, Remove: []string{"Cookie"}},
		Response: origin.HeaderEdit{Add: []origin.HeaderField{field("X-Rule", "bob")}, Remove: []string{"Set-Cookie"}},
	})
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Users: map[string]string{"alice": "pw", "bob": "pw"},
		Pool: proxytest.NewPool(t, dialer.PoolConfig{})})
	p.Routes = rt
	proxy := proxytest.StartProxy(t, p, serve(t, testCfg{Forwarded: origin.ForwardedXFF, Headers: rules}))
	clientFields := []string{"X-Forwarded-For: 198.51.100.7", "Cookie: c=1", "X-Team: client", "X-Tag: client"}
	tests := []struct {
		name, user, method string
		o                  *proxytest.Origin
		// want are the request's fields as the origin gets them, "" for
		// one it must not get; wantResp the response's.
		want, wantResp map[string]string
	}{
		{"route", "alice", "GET", a,
			map[string]string{"X-Balancer": "token-a", "X-Forwarded-For": "", "Cookie": "c=1", "X-Team": "client", "X-Tag": "client"},
			map[string]string{"Server": "", "X-Route": "to-a", "Set-Cookie": "s=1", "X-Rule": ""}},
		{"no rule", "alice", "GET", b,
			map[string]string{"X-Balancer": "", "X-Forwarded-For": "198.51.100.7, 127.0.0.1", "Cookie": "c=1", "X-Team": "client"},
			map[string]string{"Server": "o", "X-Route": "origin's", "Set-Cookie": "s=1"}},
		{"route then rule", "bob", "GET", a,
			map[string]string{"X-Balancer": "token-a", "X-Forwarded-For": "", "Cookie": "", "X-Team": "devs", "X-Tag": "client|rule"},
			map[string]string{"Server": "", "X-Route": "to-a", "Set-Cookie": "", "X-Rule": "bob"}},
		{"rule", "bob", "GET", b,
			map[string]string{"X-Balancer": "", "X-Forwarded-For": "198.51.100.7, 127.0.0.1", "Cookie": "", "X-Team": "devs", "X-Tag": "client|rule"},
			map[string]string{"Server": "o", "X-Route": "origin's", "Set-Cookie": "", "X-Rule": "bob"}},
		{"trace", "bob", "TRACE", a,
			map[string]string{"X-Balancer": "", "X-Forwarded-For": "", "Cookie": "", "X-Team": "", "X-Tag": "client"},
			map[string]string{"Server": "", "X-Route": "to-a", "Set-Cookie": "", "X-Rule": "bob"}},
	}
	c := proxytest.Dial(t, proxy)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(tt.o.Requests())
			header := append([]string{"Host: " + tt.o.Addr, basicAuth(tt.user, "pw"), "Max-Forwards: 5"}, clientFields...)
			r, _ := c.RoundTrip(request(tt.method, tt.o.URL("/h"), 1, "", header...))
			if r.Status != 200 || string(r.Body) != "origin" {
				t.Fatalf("answer %d %q", r.Status, r.Body)
			}
			reqs := tt.o.Requests()[before:]
			if len(reqs) != 1 {
				t.Fatalf("the origin got %d requests, want 1", len(reqs))
			}
			got := reqs[0].Header
			for name, want := range tt.want {
				if v := strings.Join(got.Values(name), "|"); v != want {
					t.Errorf("the origin got %s %q, want %q", name, v, want)
				}
			}
			if got.Has("Proxy-Authorization") {
				t.Errorf("the origin got the client's Proxy-Authorization")
			}
			for name, want := range tt.wantResp {
				if v := strings.Join(r.Header.Values(name), "|"); v != want {
					t.Errorf("the client got %s %q, want %q", name, v, want)
				}
			}
		})
	}
}

// BenchmarkForward1KHeaderRules is BenchmarkForward1K with a header rule
// that applies to every request: it sets one request field and removes
// another, removes a response field and adds one. Its cost over
// BenchmarkForward1K is the rules'.
func BenchmarkForward1KHeaderRules(b *testing.B) {
	body := strings.Repeat("b", 1024)
	o := proxytest.NewStaticOrigin(b, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1024\r\n\r\n"+body)
	rules := newHeaderRules(b, nil, nil, origin.HeaderRule{Name: "all",
		Request:  origin.HeaderEdit{Set: []origin.HeaderField{field("X-Api-Key", "0123456789abcdef")}, Remove: []string{"User-Agent"}},
		Response: origin.HeaderEdit{Add: []origin.HeaderField{field("X-Proxy", "rustle")}, Remove: []string{"Content-Type"}},
	})
	proxy := startProxy(b, testCfg{Headers: rules}, proxytest.PolicyConfig{Pool: proxytest.NewPool(b, dialer.PoolConfig{})})
	c := proxytest.Dial(b, proxy)
	req := []byte("GET http://" + o.Addr + "/1k HTTP/1.1\r\nHost: " + o.Addr + "\r\nUser-Agent: bench\r\n\r\n")
	resp := "HTTP/1.1 200 OK\r\nContent-Length: 1024\r\nX-Proxy: rustle\r\n\r\n" + body
	buf := make([]byte, len(resp))
	exchange := func() error {
		if _, err := c.Conn.Write(req); err != nil {
			return err
		}
		_, err := io.ReadFull(c.Conn, buf)
		return err
	}
	c.Conn.SetDeadline(time.Now().Add(5 * time.Minute))
	if err := exchange(); err != nil || !bytes.Equal(buf, []byte(resp)) {
		b.Fatalf("first exchange: %v, got %q, want %q", err, buf, resp)
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := exchange(); err != nil {
			b.Fatal(err)
		}
	}
}
