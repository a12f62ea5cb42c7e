package h3

import (
	"net"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// BenchmarkForward1K measures forwarded GETs of a 1 KB response over one
// HTTP/3 connection, one at a time, through the proxy to an HTTP/1.1
// origin on the loopback, its connection kept in the upstream pool.
func BenchmarkForward1K(b *testing.B) {
	body := string(make([]byte, 1024))
	o := proxytest.NewOrigin(b, proxytest.Respond(200, body))
	pool := proxytest.NewPool(b, dialer.PoolConfig{MaxIdlePerHost: 4, MaxIdle: 16, IdleTimeout: time.Minute})
	p := startProxy(b, testConfig(), proxytest.NewPolicy(b, proxytest.PolicyConfig{Pool: pool}))
	cc := p.client(b)
	url := o.URL("/1k")
	b.ReportAllocs()
	for b.Loop() {
		if resp, got := get(b, cc, url, ""); resp.StatusCode != 200 || len(got) != 1024 {
			b.Fatalf("GET: %d, %d bytes", resp.StatusCode, len(got))
		}
	}
	b.ReportMetric(float64(o.Conns()), "origin-conns")
}

// BenchmarkFlowDatagram measures datagram round trips through a
// CONNECT-UDP flow (masque-go's client) to a UDP echo server on the
// loopback, one datagram in flight.
func BenchmarkFlowDatagram(b *testing.B) {
	echo, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	b.Cleanup(func() { echo.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := echo.ReadFromUDP(buf)
			if err != nil {
				return
			}
			echo.WriteToUDP(buf[:n], from)
		}
	}()
	p := startProxy(b, testConfig(), proxytest.NewPolicy(b, proxytest.PolicyConfig{}))
	conn, _, err := p.dialUDP(b, echo.LocalAddr().String(), "")
	if err != nil {
		b.Fatal(err)
	}
	msg := make([]byte, 512)
	buf := make([]byte, 2048)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := conn.WriteTo(msg, nil); err != nil {
			b.Fatal(err)
		}
		conn.SetReadDeadline(time.Now().Add(time.Second))
		if _, _, err := conn.ReadFrom(buf); err != nil {
			b.Fatal(err) // a datagram lost on the loopback: rerun
		}
	}
}
