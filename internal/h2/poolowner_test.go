package h2

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestForwardPoolPerUser: the streams of one HTTP/2 connection that
// carry different users' forwarded requests never share an upstream
// connection (an origin that authenticates the connection, NTLM, would
// serve bob as alice), while each user's later requests reuse the one
// that user's first request left in the pool.
func TestForwardPoolPerUser(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	pool := proxytest.NewPool(t, dialer.PoolConfig{})
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{"alice": "pw", "bob": "pw"}, Pool: pool}))
	cc := p.client(t)
	conns := map[string]int{}
	for i, user := range []string{"alice", "bob", "alice", "bob"} {
		req := newRequest(t, "GET", o.URL("/"+user), nil)
		req.Header.Set("Proxy-Authorization", basic(user))
		if resp, body := roundTrip(t, cc, req); resp.StatusCode != 200 {
			t.Fatalf("%s's request: %d %q", user, resp.StatusCode, body)
		}
		reqs := o.Requests()
		if len(reqs) != i+1 {
			t.Fatalf("the origin got %d requests, want %d", len(reqs), i+1)
		}
		n := reqs[i].Conn
		for other, conn := range conns {
			if other != user && conn == n {
				t.Fatalf("%s's request went on %s's upstream connection %d", user, other, n)
			}
		}
		if want, ok := conns[user]; ok && n != want {
			t.Errorf("%s's later request went on connection %d, want %s's pooled %d", user, n, user, want)
		}
		conns[user] = n
		// The stream gives its upstream back once its answer is out:
		// the next request finds it pooled.
		proxytest.WaitFor(t, "the upstream back in the pool", func() bool { return pool.Len() == len(conns) })
	}
}
