package gate_test

import (
	"context"
	"net"
	"testing"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/quota"
)

// quotaSession returns a session of a policy with alice and bob, a
// per-user connection limit and a quota of requests for alice, its
// connection's user made alice by a first request.
func quotaSession(t testing.TB, requests int64) (*gate.Session, *gate.Grant, *gate.Request) {
	t.Helper()
	q := quota.New(quota.Config{Rules: []quota.Rule{{Name: "daily", Users: []string{"alice"}, Requests: requests, Bytes: 1 << 50}}})
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Users: users, Limits: &limits.Config{MaxConnsPerUser: 8}, Quota: q})
	c1, c2 := net.Pipe()
	t.Cleanup(func() { c1.Close(); c2.Close() })
	s := proxytest.NewSession(t, p, c1, nil)
	g := new(gate.Grant)
	r := connectReq("example.com", basicAuth("alice", "pw"))
	if k := s.Authorize(r, g); k != gate.OK {
		t.Fatalf("first request: %v", k)
	}
	g.Answer(200, 0)
	g.Finish(10, 10)
	return s, g, r
}

// TestQuotaKeepAlive checks that the requests of a connection's user
// count against the user's quota and are refused with QuotaExceeded (429,
// reason quota) once it is spent.
func TestQuotaKeepAlive(t *testing.T) {
	s, g, r := quotaSession(t, 3)
	for i, want := range []gate.Kind{gate.OK, gate.OK, gate.QuotaExceeded, gate.QuotaExceeded} {
		k := s.Authorize(r, g)
		if k != want {
			t.Errorf("request %d: %v, want %v", i+2, k, want)
		}
		if k == gate.QuotaExceeded && (k.Status() != 429 || g.User != "alice") {
			t.Errorf("refusal: status %d, user %q", k.Status(), g.User)
		}
		g.Answer(k.Status(), 0)
		g.Finish(0, 0)
	}
}

// TestQuotaKeepAliveNoAllocs checks that the quota check adds no
// allocation to a keep-alive request of the connection's user.
func TestQuotaKeepAliveNoAllocs(t *testing.T) {
	s, g, r := quotaSession(t, 1<<50)
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		if s.Authorize(r, g) != gate.OK {
			t.Fatal("refused")
		}
		// A forwarded body is metered as it moves (HTTP/1.1, HTTP/2).
		if !g.Meter() || !g.Pace(ctx, 1024) {
			t.Fatal("not metered, or spent")
		}
		g.Answer(200, 0)
		g.Finish(1024, 1024)
	}); n != 0 {
		t.Errorf("a keep-alive request under a quota: %v allocations, want 0", n)
	}
}

// TestPaceDatagramNoAllocs checks that metering a flow's datagrams
// against a byte quota allocates nothing, batch charges included.
func TestPaceDatagramNoAllocs(t *testing.T) {
	s, g, r := quotaSession(t, 1<<50)
	ctx := context.Background()
	if s.Authorize(r, g) != gate.OK || !g.Meter() {
		t.Fatal("refused, or not metered")
	}
	if n := testing.AllocsPerRun(1000, func() {
		if !g.PaceDatagram(ctx, 1200) {
			t.Fatal("spent")
		}
	}); n != 0 {
		t.Errorf("a metered datagram: %v allocations, want 0", n)
	}
	g.Answer(200, 0)
	g.Finish(1000*1200, 0)
}

// BenchmarkQuotaKeepAlive measures a keep-alive request of the
// connection's user, authorized and finished, under a quota of bytes and
// requests.
func BenchmarkQuotaKeepAlive(b *testing.B) {
	s, g, r := quotaSession(b, 1<<50)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		s.Authorize(r, g)
		g.Meter()
		g.Pace(ctx, 1024)
		g.Answer(200, 0)
		g.Finish(1024, 1024)
	}
}

// TestQuotaAssociation checks that a SOCKS5 UDP association counts as a
// request of its user and is refused once the quota is spent.
func TestQuotaAssociation(t *testing.T) {
	q := quota.New(quota.Config{Rules: []quota.Rule{{Name: "daily", Users: []string{"alice"}, Requests: 1}}})
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Users: users, Quota: q})
	r := &gate.Request{Protocol: acl.SOCKS5UDP, Log: accesslog.ProtoSOCKS5UDP, Method: "UDP ASSOCIATE", Target: []byte("0.0.0.0:0")}
	for i, want := range []gate.Kind{gate.OK, gate.QuotaExceeded} {
		c1, c2 := net.Pipe()
		t.Cleanup(func() { c1.Close(); c2.Close() })
		s := proxytest.NewSession(t, p, c1, nil)
		g := new(gate.Grant)
		if _, k := s.Login([]byte("alice"), []byte("pw"), g); k != gate.OK {
			t.Fatalf("login: %v", k)
		}
		if k := s.AuthorizeAssociation(r, g); k != want {
			t.Errorf("association %d: %v, want %v", i, k, want)
		}
		g.Answer(0, 200)
		g.Finish(0, 0)
	}
}
