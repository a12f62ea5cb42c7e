package server

import (
	"encoding/binary"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"golang.org/x/net/dns/dnsmessage"
)

// udpAssociation is a client's SOCKS5 UDP association with rustle.
type udpAssociation struct {
	ctrl net.Conn
	uc   *net.UDPConn
}

// socksUDP logs in as user on rustle's SOCKS5 listener at addr and opens
// a UDP association.
func socksUDP(t *testing.T, addr, user, pass string) *udpAssociation {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	br := socksLogin(t, c, user, pass)
	relay := socksRequest(t, c, br, 3, netip.AddrPortFrom(netip.IPv4Unspecified(), 0))
	c.SetDeadline(time.Time{})
	uc, err := net.DialUDP("udp4", nil, net.UDPAddrFromAddrPort(relay))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uc.Close() })
	return &udpAssociation{ctrl: c, uc: uc}
}

// udpHeader returns the RFC 1928 UDP header for host (a name or an IPv4
// literal) and port.
func udpHeader(host string, port uint16) []byte {
	h := []byte{0, 0, 0}
	if ip, err := netip.ParseAddr(host); err == nil {
		a := ip.As4()
		h = append(append(h, 1), a[:]...)
	} else {
		h = append(append(h, 3, byte(len(host))), host...)
	}
	return binary.BigEndian.AppendUint16(h, port)
}

// query sends a DNS question for name (type A) to host:port through the
// association and returns the addresses answered; it sends again until
// an answer comes or 5s have passed (the first datagram makes the
// association with the parent).
func (u *udpAssociation) query(t *testing.T, host string, port uint16, name string) ([]netip.Addr, error) {
	t.Helper()
	q := dnsmessage.Message{
		Header:    dnsmessage.Header{ID: 0x5353, RecursionDesired: true},
		Questions: []dnsmessage.Question{{Name: dnsmessage.MustNewName(name), Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET}},
	}
	msg, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	dgram := append(udpHeader(host, port), msg...)
	buf := make([]byte, 1500)
	var last error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if _, err := u.uc.Write(dgram); err != nil {
			return nil, err
		}
		u.uc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		n, err := u.uc.Read(buf)
		if err != nil {
			last = err
			continue
		}
		if n < 10 || buf[3] != 1 {
			t.Fatalf("answer datagram % x: no IPv4 header", buf[:n])
		}
		var m dnsmessage.Message
		if err := m.Unpack(buf[10:n]); err != nil {
			t.Fatalf("DNS answer: %v", err)
		}
		var ips []netip.Addr
		for _, a := range m.Answers {
			if r, ok := a.Body.(*dnsmessage.AResource); ok {
				ips = append(ips, netip.AddrFrom4(r.A))
			}
		}
		return ips, nil
	}
	return nil, last
}

// udpCounter counts the datagrams that reach a UDP socket on ip.
func udpCounter(t *testing.T, ip string) (netip.AddrPort, *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(ip)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	var n atomic.Int64
	go func() {
		buf := make([]byte, 1500)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return pc.LocalAddr().(*net.UDPAddr).AddrPort(), &n
}

// TestRoutesSOCKSUDP sends real DNS queries over SOCKS5 UDP through
// rustle and a SOCKS5 parent's UDP ASSOCIATE to a DNS server the test
// runs: through rustle as a socks5 parent with username auth (rustle
// resolves a name and sends the address) and through Dante as a socks5h
// parent (the name goes to Dante). A datagram to a private address the
// guard refuses never reaches its destination through the parent; a
// parent that refuses UDP ASSOCIATE (Dante allowing only CONNECT) drops
// the datagrams, and the association's record says parent-refused.
func TestRoutesSOCKSUDP(t *testing.T) {
	dns := proxytest.NewDNSServer(t)
	dns.Set("udp.test", 60, "192.0.2.7")
	dnsAddr := netip.MustParseAddrPort(dns.UDP)
	_, psocks, _, _ := startRustleParent(t)
	dante := proxytest.StartDante(t)
	tcpOnly := proxytest.StartDanteTCPOnly(t)
	forbidden, reached := udpCounter(t, "127.0.0.2")
	addrs, access, m := startRouted(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.1/32"}
		c.Auth.Users = []config.User{{Name: "alice", Password: "a"}, {Name: "bob", Password: "b"}, {Name: "carol", Password: "c"}}
		c.Parents = []config.Parent{
			{Name: "r5", URL: "socks5://parent:ppw@" + psocks},
			{Name: "dante", URL: "socks5h://" + dante.Addr},
			{Name: "tcponly", URL: "socks5h://" + tcpOnly.Addr},
		}
		c.Routes = []config.Route{
			{Name: "via-rustle", Criteria: config.Criteria{Who: config.Who{Users: []string{"alice"}}}, Via: config.Strings{"r5"}},
			{Name: "via-dante", Criteria: config.Criteria{Who: config.Who{Users: []string{"bob"}}}, Via: config.Strings{"dante"}},
			{Name: "via-tcponly", Criteria: config.Criteria{Who: config.Who{Users: []string{"carol"}}}, Via: config.Strings{"tcponly"}},
		}
	})
	for _, tc := range []struct {
		user, pass, host, parent string
	}{
		{"alice", "a", "127.0.0.1", "r5"},
		{"alice", "a", "localhost", "r5"},
		{"bob", "b", "127.0.0.1", "dante"},
		{"bob", "b", "localhost", "dante"},
	} {
		t.Run(tc.parent+"/"+tc.host, func(t *testing.T) {
			u := socksUDP(t, addrs["socks"], tc.user, tc.pass)
			// First a datagram the guard refuses: 127.0.0.2 is not in
			// allow_private (the parents would let it through).
			if _, err := u.uc.Write(append(udpHeader(forbidden.Addr().String(), forbidden.Port()), "x"...)); err != nil {
				t.Fatal(err)
			}
			ips, err := u.query(t, tc.host, dnsAddr.Port(), "udp.test.")
			if err != nil || len(ips) != 1 || ips[0] != netip.MustParseAddr("192.0.2.7") {
				t.Fatalf("DNS answer through %s: %v, %v; want 192.0.2.7", tc.parent, ips, err)
			}
			if n := reached.Load(); n != 0 {
				t.Errorf("%d datagrams reached %s, which the guard refuses", n, forbidden)
			}
		})
	}
	if got := proxytest.Metric(t, m, "rustle_parent_requests_total", "parent", "dante"); got != 2 {
		t.Errorf("rustle_parent_requests_total{dante} = %v, want 2 (one UDP ASSOCIATE per association)", got)
	}

	u := socksUDP(t, addrs["socks"], "carol", "c")
	if ips, err := u.query(t, "127.0.0.1", dnsAddr.Port(), "udp.test."); err == nil {
		t.Fatalf("DNS answer %v through a parent that refuses UDP ASSOCIATE", ips)
	}
	u.ctrl.Close()
	proxytest.WaitFor(t, "the refused association's record", func() bool {
		for _, r := range routeRecords(t, access) {
			if r.Protocol == "socks5-udp" && r.Parent == "tcponly" {
				return r.Reason == "parent-refused" && r.Route == "via-tcponly"
			}
		}
		return false
	})
}
