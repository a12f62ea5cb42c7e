package server

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
)

// TestOpenWithQUICPortTaken checks that an http3 listener on port 0
// whose TCP port is held over UDP by another socket opens again on
// another port (a loaded CI run's Start failed: "listen udp
// 127.0.0.1:33587: bind: address already in use", another test's UDP
// socket holding the number the kernel had given the TCP socket), and
// that a listener whose configuration names the port reports the error.
func TestOpenWithQUICPortTaken(t *testing.T) {
	tl, _ := proxyCerts(t)
	s, err := New(reloadConfig(t, func(c *config.Config) {
		c.Listen = []config.Listener{{Name: "main", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, HTTP3: true}}
	}), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	l := s.gen.listeners[0]
	first, port := udpHeldPort(t)
	opens := 0
	// open gives the taken port number over TCP first (as the kernel may
	// for port 0), then what openSockets gives.
	open := func() ([]net.Listener, error) {
		opens++
		if opens > 1 {
			return openSockets(l.Config, 1)
		}
		return []net.Listener{first}, nil
	}
	if err := openWithQUIC(l, open, s.log); err != nil {
		t.Fatalf("port 0, its first port taken over UDP: %v", err)
	}
	got := l.lns[0].Addr().(*net.TCPAddr).Port
	t.Cleanup(func() { closeAll(l.lns); l.quic.close() })
	if opens != 2 || got == port || l.quic == nil || l.quic.udp.LocalAddr().(*net.UDPAddr).Port != got {
		t.Errorf("opened %d times, TCP port %d (the taken one %d), QUIC %v: want a second try on a port of its own for both", opens, got, port, l.quic)
	}
	if first.(*net.TCPListener).SetDeadline(time.Now()) == nil {
		t.Error("the first try's TCP socket was left open")
	}

	// A port the configuration names is not changed.
	first, port = udpHeldPort(t)
	fixed := *l
	fixed.Listener = new(*l.Listener)
	fixed.Config.Address = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	opens = 0
	err = openWithQUIC(&fixed, open, s.log)
	if !errors.Is(err, syscall.EADDRINUSE) || opens != 1 {
		t.Errorf("a configured port taken over UDP: %v after %d tries, want EADDRINUSE after one", err, opens)
	}
}

// udpHeldPort returns a TCP listener on 127.0.0.1 whose port number a UDP
// socket holds, both closed when the test ends (the listener maybe
// before). A port the kernel gives a UDP socket may be in use over TCP
// (a connection's local port): then it tries another.
func udpHeldPort(t *testing.T) (net.Listener, int) {
	t.Helper()
	for range 50 {
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := udp.LocalAddr().(*net.UDPAddr).Port
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			udp.Close()
			continue
		}
		t.Cleanup(func() { ln.Close(); udp.Close() })
		return ln, port
	}
	t.Fatal("no port number free over TCP among 50 the kernel gave UDP sockets")
	return nil, 0
}
