package gate_test

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestTransparentPinned checks a transparent request: it is dialled at
// its original destination whatever its Host names (a name, or an IP
// literal of another address, which the rules then do not see), and
// the connection it dialled is taken for a loop until the request ends
// (closed or not: a tunnel's socket may live on the splice engine after
// its net.TCPConn is closed), by a session whose client is its local
// end, for its remote end, and no longer once it has ended (a client
// given the same port afterwards is no loop).
func TestTransparentPinned(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	orig := ln.Addr().(*net.TCPAddr).AddrPort()
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Default: acl.Allow, Rules: []acl.Rule{{Name: "no-loopback-by-name", Action: acl.Deny, Hosts: []string{"127.0.0.2"}}},
	})
	for _, host := range []string{"origin.example", "127.0.0.2", ""} {
		s := p.NewSession(context.Background(), netip.MustParseAddrPort("192.0.2.10:40000"), nil, nil)
		var g gate.Grant
		r := gate.Request{Protocol: acl.Transparent, Log: accesslog.ProtoTransparent, Method: "GET", Host: host,
			Addr: orig.Addr(), Port: orig.Port(), Original: orig, HelloRead: true, Target: []byte("http://x/")}
		if k := s.Authorize(&r, &g); k != gate.OK {
			t.Fatalf("Host %q: %v, rule %q", host, k, g.Rule)
		}
		if got := string(g.AppendDest(nil)); got != orig.String() {
			t.Errorf("Host %q: dest %s, want %s", host, got, orig)
		}
		c, err := g.DialConn(context.Background())
		if err != nil {
			t.Fatalf("Host %q: dial: %v", host, err)
		}
		local := c.LocalAddr().(*net.TCPAddr).AddrPort()
		back := p.NewSession(context.Background(), local, nil, nil)
		if !back.ComesBack(orig) {
			t.Errorf("Host %q: the open upstream is not taken for a loop", host)
		}
		if p.NewSession(context.Background(), netip.AddrPortFrom(local.Addr(), local.Port()+1), nil, nil).ComesBack(orig) {
			t.Errorf("Host %q: another port is taken for a loop", host)
		}
		c.Close()
		if !back.ComesBack(orig) {
			t.Errorf("Host %q: the upstream of a request not ended is not taken for a loop", host)
		}
		g.Finish(0, 0)
		if back.ComesBack(orig) {
			t.Errorf("Host %q: an ended request's upstream is still taken for a loop", host)
		}
		s.Close()
		back.Close()
	}
}
