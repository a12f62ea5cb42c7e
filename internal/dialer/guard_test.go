package dialer

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestPrivate(t *testing.T) {
	private := []string{
		"0.0.0.0", "0.1.2.3", "10.0.0.1", "100.64.0.1", "100.127.255.254", "127.0.0.1", "127.8.9.10",
		"169.254.169.254", "172.16.0.1", "172.31.255.255", "192.0.0.8", "192.168.1.1", "198.18.0.1",
		"224.0.0.1", "239.255.255.250", "240.0.0.1", "255.255.255.255",
		"::", "::1", "fc00::1", "fd12:3456::1", "fe80::1", "fe80::1%eth0", "fec0::1", "ff02::1",
		"::ffff:127.0.0.1", "::ffff:10.1.2.3", "::ffff:169.254.169.254", // IPv4-mapped
		"::127.0.0.1", "::10.0.0.1", // IPv4-compatible
		"64:ff9b::127.0.0.1", "64:ff9b::a9fe:a9fe", "64:ff9b::192.168.0.1", // NAT64
		"64:ff9b:1::8.8.8.8",                 // local-use NAT64
		"2002:7f00:1::1", "2002:a9fe:a9fe::", // 6to4 of 127.0.0.1 and 169.254.169.254
	}
	public := []string{
		"1.1.1.1", "8.8.8.8", "100.63.255.255", "100.128.0.0", "172.15.255.255", "172.32.0.0",
		"192.0.2.1", "193.0.0.1", "223.255.255.255",
		"2001:db8::1", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::8.8.8.8", "2002:808:808::1",
	}
	for _, s := range private {
		if !Private(netip.MustParseAddr(s)) {
			t.Errorf("Private(%s) = false", s)
		}
	}
	for _, s := range public {
		if Private(netip.MustParseAddr(s)) {
			t.Errorf("Private(%s) = true", s)
		}
	}
}

func TestGuardCheck(t *testing.T) {
	g := NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::ffff:10.1.0.0/112")})
	g.SetOwn([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:3128"), netip.MustParseAddrPort("[::]:1080")})
	tests := []struct {
		addr      string
		privateOK bool
		want      error
	}{
		{"127.0.0.1:80", false, nil},
		{"[::ffff:127.0.0.2]:80", false, nil},
		{"[64:ff9b::7f00:1]:80", false, nil}, // NAT64 form of an allowed address
		{"10.1.2.3:80", false, nil},
		{"10.2.0.1:80", false, ErrPrivate},
		{"10.2.0.1:80", true, nil},
		{"[::1]:80", false, ErrPrivate},
		{"169.254.169.254:80", false, ErrPrivate},
		{"8.8.8.8:53", false, nil},
		{"127.0.0.1:3128", false, ErrOwnAddress},
		{"127.0.0.1:3128", true, ErrOwnAddress},
		{"[::ffff:127.0.0.1]:3128", false, ErrOwnAddress},
		{"127.0.0.1:1080", false, ErrOwnAddress}, // the wildcard listener
		{"[::1]:1080", true, ErrOwnAddress},
		{"127.0.0.2:3128", false, nil},
	}
	for _, tt := range tests {
		if err := g.Check(netip.MustParseAddrPort(tt.addr), tt.privateOK); err != tt.want {
			t.Errorf("Check(%s, %v) = %v, want %v", tt.addr, tt.privateOK, err, tt.want)
		}
	}
	if got := g.Allowed(); len(got) != 2 || got[1].String() != "10.1.0.0/16" {
		t.Errorf("Allowed() = %v", got)
	}
}

// TestGuardSupersede checks that a superseded guard decides as the guard
// that superseded it, through a chain of reloads.
func TestGuardSupersede(t *testing.T) {
	loop := netip.MustParseAddrPort("127.0.0.1:80")
	g1 := NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})
	if err := g1.Check(loop, false); err != nil {
		t.Fatalf("allowed range: %v", err)
	}
	g2 := NewGuard(nil)
	g1.Supersede(g2)
	if err := g1.Check(loop, false); err != ErrPrivate {
		t.Errorf("superseded guard: %v, want ErrPrivate", err)
	}
	g3 := NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	g3.SetOwn([]netip.AddrPort{netip.MustParseAddrPort("127.0.0.1:3128")})
	g2.Supersede(g3)
	g3.Supersede(g3) // a guard never supersedes itself
	for _, g := range []*Guard{g1, g2, g3} {
		if err := g.Check(loop, false); err != nil {
			t.Errorf("chain: %v, want the last guard's nil", err)
		}
		if err := g.Check(netip.MustParseAddrPort("127.0.0.1:3128"), true); err != ErrOwnAddress {
			t.Errorf("chain, own address: %v", err)
		}
		if a := g.Allowed(); len(a) != 1 || a[0].String() != "127.0.0.1/32" {
			t.Errorf("Allowed() = %v", a)
		}
	}
}

// permitter is a Permitter that records the addresses it is asked about.
type permitter struct {
	mu      sync.Mutex
	asked   []netip.Addr
	deny    map[netip.Addr]bool
	private bool
}

func (p *permitter) Permit(ip netip.Addr) (bool, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.asked = append(p.asked, ip)
	return !p.deny[ip], p.private
}

func TestDialGuard(t *testing.T) {
	ln := listen(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	target := ln.Addr().String()
	byName := net.JoinHostPort("localhost", strings.TrimPrefix(target, "127.0.0.1:"))
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	ctx := context.Background()

	tests := []struct {
		name      string
		guard     *Guard
		addr      string
		p         *permitter
		wantErr   error
		forbidden bool
	}{
		{name: "no guard", addr: target},
		{name: "guard refuses loopback", guard: NewGuard(nil), addr: target, wantErr: ErrPrivate, forbidden: true},
		{name: "guard refuses a name resolving to loopback", guard: NewGuard(nil), addr: byName, wantErr: ErrPrivate, forbidden: true},
		{name: "guard refuses the mapped form", guard: NewGuard(nil), addr: "[::ffff:127.0.0.1]:" + strconv.Itoa(port), wantErr: ErrPrivate, forbidden: true},
		{name: "allowed range", guard: NewGuard(loopback), addr: target},
		{name: "allowed range by name", guard: NewGuard(loopback), addr: byName},
		{name: "policy allows private", guard: NewGuard(nil), addr: target, p: &permitter{private: true}},
		{name: "policy denies", guard: NewGuard(loopback), addr: target, p: &permitter{deny: map[netip.Addr]bool{netip.MustParseAddr("127.0.0.1"): true}},
			wantErr: ErrDenied, forbidden: true},
		{name: "own address", guard: ownGuard(loopback, target), addr: target, wantErr: ErrOwnAddress, forbidden: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDialer(t, Config{Timeout: 5 * time.Second, Guard: tt.guard})
			var p Permitter
			if tt.p != nil {
				p = tt.p
			}
			c, err := d.DialPermit(ctx, tt.addr, p)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("DialPermit(%s): %v", tt.addr, err)
				}
				got := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
				c.Close()
				if tt.p != nil && !contains(tt.p.asked, got) {
					t.Errorf("connected to %s, which the policy was not asked about (%v)", got, tt.p.asked)
				}
				if err := d.Check(c.RemoteAddr().(*net.TCPAddr).AddrPort(), p); err != nil {
					t.Errorf("Check of the dialed address: %v", err)
				}
				return
			}
			var de *Error
			if !errors.As(err, &de) || !errors.Is(err, tt.wantErr) || de.Forbidden != tt.forbidden {
				t.Fatalf("DialPermit(%s) = %v, want a *Error wrapping %v with Forbidden %v", tt.addr, err, tt.wantErr, tt.forbidden)
			}
			if strings.Contains(de.Reason(), "127.0.0.1") && !strings.Contains(tt.addr, "127.0.0.1") {
				t.Errorf("Reason() %q reveals the resolved address", de.Reason())
			}
			if c != nil {
				t.Errorf("DialPermit returned a connection with an error")
			}
		})
	}
}

func ownGuard(allow []netip.Prefix, addr string) *Guard {
	g := NewGuard(allow)
	g.SetOwn([]netip.AddrPort{netip.MustParseAddrPort(addr)})
	return g
}

func contains(list []netip.Addr, a netip.Addr) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}

// TestDialAddrsFallback checks that a dial moves on from addresses that
// refuse to one that answers, within one family and across families.
func TestDialAddrsFallback(t *testing.T) {
	ln := listen(t)
	good := ln.Addr().(*net.TCPAddr).AddrPort()
	closedLn := listen(t)
	closed := closedLn.Addr().(*net.TCPAddr).AddrPort()
	closedLn.Close()
	v6closed := netip.AddrPortFrom(netip.MustParseAddr("::1"), closed.Port())
	d := newDialer(t, Config{Timeout: 5 * time.Second, Guard: NewGuard([]netip.Prefix{netip.MustParsePrefix("::/0"), netip.MustParsePrefix("0.0.0.0/0")})})
	for _, tt := range []struct {
		name  string
		addrs []netip.AddrPort
	}{
		{"same family", []netip.AddrPort{closed, good}},
		{"other family", []netip.AddrPort{v6closed, good}},
		{"first works", []netip.AddrPort{good, v6closed}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := d.dialAddrs(context.Background(), tt.addrs, nil)
			if err != nil {
				t.Fatalf("dialAddrs(%v): %v", tt.addrs, err)
			}
			if got := c.RemoteAddr().(*net.TCPAddr).AddrPort(); got != good {
				t.Errorf("connected to %s, want %s", got, good)
			}
			c.Close()
		})
	}
	if _, err := d.dialAddrs(context.Background(), []netip.AddrPort{closed, v6closed}, nil); err == nil {
		t.Errorf("dialAddrs to closed ports succeeded")
	}
}
