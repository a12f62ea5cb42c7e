package gate_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestRegistryTunnelsOfOneUser checks the registry's list of one user's
// engine tunnels: tunnels that end first (the oldest, the newest, one in
// the middle) leave it, a revocation cuts exactly the others, and the
// user leaves the registry with the last one.
func TestRegistryTunnelsOfOneUser(t *testing.T) {
	reg := new(gate.Registry)
	cfg := proxytest.PolicyConfig{Users: users, Limits: &limits.Config{}, Revoked: reg}
	o := observe(t, &cfg)
	p := proxytest.NewPolicy(t, cfg)
	eng := newEngine(t)
	echo := proxytest.NewEcho(t)

	const n = 6
	var clients []net.Conn // in the order opened
	for range n {
		client, served := tcpPair(t)
		s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40007"), eng, nil)
		s.Attach(served)
		g, upc := dialGrant(t, s, "alice", "pw", echo.Addr)
		if !g.Tunnel(served, upc, nil) {
			t.Fatal("the tunnel was not handed to the engine")
		}
		s.Close()
		if err := echoThrough(client, "x"); err != nil {
			t.Fatal(err)
		}
		clients = append(clients, client)
	}
	ended := []int{0, n - 1, 2} // the oldest, the newest, one between
	for _, i := range ended {
		endTunnel(t, clients[i])
	}
	proxytest.WaitFor(t, "the ended tunnels gone", func() bool { return eng.Len() == n-len(ended) })
	if got := reg.Users(); got != 1 {
		t.Fatalf("Users() = %d with alice's %d tunnels open, want 1", got, n-len(ended))
	}
	if got := reg.Revoke(func(_, u string) bool { return u != "alice" }); got != 1 {
		t.Errorf("Revoke(alice) = %d, want 1", got)
	}
	proxytest.WaitFor(t, "alice's tunnels cut", func() bool { return eng.Len() == 0 })
	proxytest.WaitFor(t, "the registry empty", func() bool { return reg.Users() == 0 })

	revoked := 0
	for _, rec := range o.records(t, n) {
		if rec["reason"] == accesslog.ReasonRevoked {
			revoked++
		}
	}
	if revoked != n-len(ended) {
		t.Errorf("%d tunnels logged as revoked, want %d (those still open)", revoked, n-len(ended))
	}
}
