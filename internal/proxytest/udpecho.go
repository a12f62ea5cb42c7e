package proxytest

import (
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
)

// UDPEcho is a loopback UDP server that sends every datagram it receives
// back to its sender, and records what it received. Create one with
// NewUDPEcho.
type UDPEcho struct {
	// Addr is its address.
	Addr netip.AddrPort

	mu    sync.Mutex
	got   []string // payloads received, in order; guarded by mu
	bytes int64    // payload bytes received; guarded by mu
}

// NewUDPEcho starts a UDP echo server on network's loopback ("udp4":
// 127.0.0.1, "udp6": ::1), closed by t.Cleanup.
func NewUDPEcho(t testing.TB, network string) *UDPEcho {
	t.Helper()
	host := "127.0.0.1"
	if network == "udp6" {
		host = "::1"
	}
	pc, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(netip.MustParseAddr(host), 0)))
	if err != nil {
		t.Fatalf("proxytest: listen udp echo: %v", err)
	}
	e := &UDPEcho{Addr: pc.LocalAddr().(*net.UDPAddr).AddrPort()}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			e.mu.Lock()
			e.got = append(e.got, string(buf[:n]))
			e.bytes += int64(n)
			e.mu.Unlock()
			pc.WriteToUDPAddrPort(buf[:n], from)
		}
	})
	t.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
	return e
}

// Received returns the payloads the server has received so far, in order.
func (e *UDPEcho) Received() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.got)
}

// Bytes returns the payload bytes the server has received so far.
func (e *UDPEcho) Bytes() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bytes
}
