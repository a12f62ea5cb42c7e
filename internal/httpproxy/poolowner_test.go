package httpproxy_test

import (
	"fmt"
	"net"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
)

// TestForwardPoolPerUser: an upstream connection that carried a user's
// forwarded requests, to the origin or to an http parent, is never used
// for another user's, whether the client connection that kept it
// changes user between requests or it went to the pool when that
// client connection ended; the same user's later requests, on any
// client connection, reuse it. An origin that ties authentication to
// the connection (NTLM, Negotiate), or a parent that pins one to it,
// would otherwise serve bob as alice.
func TestForwardPoolPerUser(t *testing.T) {
	for _, viaParent := range []bool{false, true} {
		name := "direct"
		if viaParent {
			name = "http-parent"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// up is what the proxy's upstream connections reach: the
			// origin itself, or an http parent in front of it (which
			// answers as the origin would: only its connections count).
			up := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
			target := up
			pool := proxytest.NewPool(t, dialer.PoolConfig{})
			p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Users: map[string]string{"alice": "pw", "bob": "pw"}, Pool: pool})
			if viaParent {
				target = proxytest.NewOrigin(t, proxytest.Respond(500, "not through the parent"))
				_, port, _ := net.SplitHostPort(target.Addr)
				tab, err := route.New(proxytest.RouteDefaults(route.Config{
					Parents: []route.ParentConfig{{Name: "p", URL: "http://" + up.Addr}},
					Routes:  []route.RouteConfig{{Name: "via-p", Match: acl.Rule{Ports: []string{port}}, Via: []string{"p"}}},
				}))
				if err != nil {
					t.Fatal(err)
				}
				p.Routes = tab
			}
			proxy := proxytest.StartProxy(t, p, serve(t, testCfg{}))
			conns := map[string]int{}
			// send sends user's request on c and returns the upstream
			// connection it arrived on.
			send := func(c *proxytest.Client, user string) int {
				t.Helper()
				before := up.NumRequests()
				r, _ := c.RoundTrip(request("GET", target.URL("/"+user), 1, "", "Host: "+target.Addr, basicAuth(user, "pw")))
				if r.Status != 200 {
					t.Fatalf("%s's request: %q", user, r.Head)
				}
				reqs := up.Requests()
				if len(reqs) != before+1 {
					t.Fatalf("upstream got %d requests, want %d", len(reqs), before+1)
				}
				n := reqs[before].Conn
				for other, conn := range conns {
					if other != user && conn == n {
						t.Fatalf("%s's request went on %s's upstream connection %d", user, other, n)
					}
				}
				return n
			}
			c1 := proxytest.Dial(t, proxy)
			conns["alice"] = send(c1, "alice")
			conns["bob"] = send(c1, "bob") // the client connection kept alice's
			if got := send(c1, "alice"); got != conns["alice"] {
				t.Errorf("alice's second request went on connection %d, want her pooled %d", got, conns["alice"])
			}
			c1.Close()
			proxytest.WaitFor(t, "both users' connections pooled", func() bool { return pool.Len() == 2 })
			c2 := proxytest.Dial(t, proxy)
			for _, user := range []string{"bob", "alice", "bob"} {
				if got := send(c2, user); got != conns[user] {
					t.Errorf("%s's request on a new client connection went on connection %d, want %s's pooled %d",
						user, got, user, conns[user])
				}
			}
			if n := up.Conns(); n != 2 {
				t.Errorf("upstream accepted %d connections, want 2 (one per user): %s", n, fmt.Sprint(conns))
			}
		})
	}
}
