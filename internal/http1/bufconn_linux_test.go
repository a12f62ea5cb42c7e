package http1

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// TestArmLowat checks that armLowat sets TCP_NOTSENT_LOWAT on the socket
// once, and that setNotSentLowat(0) clears it for a tunnel.
func TestArmLowat(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := c.(*net.TCPConn)
	get := func() int {
		t.Helper()
		rc, err := tc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		var gerr error
		rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT) })
		if gerr != nil {
			t.Fatal(gerr)
		}
		return v
	}
	b := Conn{C: tc, TCP: tc}
	b.ArmLowat()
	if v := get(); v != notSentLowat || !b.lowat {
		t.Fatalf("TCP_NOTSENT_LOWAT = %d (lowat %v), want %d", v, b.lowat, notSentLowat)
	}
	SetNotSentLowat(tc, 0)
	if v := get(); v != 0 {
		t.Fatalf("TCP_NOTSENT_LOWAT = %d after clearing, want 0", v)
	}
	b.ArmLowat() // armed already: left alone
	if v := get(); v != 0 {
		t.Fatalf("TCP_NOTSENT_LOWAT = %d after a second armLowat, want it left at 0", v)
	}
}
