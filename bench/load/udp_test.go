package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/h3"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/socks5"
)

// The credentials of the in-process proxies.
const (
	udpUser = "bench"
	udpPass = "0123456789abcdef"
)

// startUDPEcho runs a UDP echo on a loopback port until the test ends.
func startUDPEcho(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo(buf[:n], from)
		}
	})
	t.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
	return pc.LocalAddr().String()
}

// udpPolicy is the policy of the in-process proxies: one user, loopback
// destinations allowed.
func udpPolicy(t *testing.T) *gate.Policy {
	t.Helper()
	return proxytest.NewPolicy(t, proxytest.PolicyConfig{Users: map[string]string{udpUser: udpPass}})
}

// startRustleH3 serves rustle's HTTP/3 front-end (internal/h3) on a
// loopback UDP port until the test ends, with maxFlows flows per
// connection, and returns its address and the TLS config that trusts it.
func startRustleH3(t *testing.T, maxFlows int) (string, *tls.Config) {
	t.Helper()
	oc, err := origin.New(origin.Config{Forwarded: origin.ForwardedNone, MaxHeaderBytes: 65536,
		ResponseHeaderTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := h3.New(h3.Config{
		Origin: oc, HandshakeTimeout: 5 * time.Second, IdleTimeout: 30 * time.Second,
		UDPIdleTimeout: 30 * time.Second, MaxStreams: 100, MaxFlows: maxFlows,
	})
	if err != nil {
		t.Fatal(err)
	}
	cert, roots := proxytest.SelfSigned(t)
	base := &tls.Config{Certificates: []tls.Certificate{cert}}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tr := &quic.Transport{Conn: udp}
	ln, err := tr.Listen(h3.TLSConfig(func() *tls.Config { return base }), srv.QUICConfig())
	if err != nil {
		t.Fatal(err)
	}
	pol := udpPolicy(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept(context.Background())
			if err != nil {
				return
			}
			wg.Go(func() {
				sess := pol.NewSession(ctx, c.RemoteAddr().(*net.UDPAddr).AddrPort(), nil, nil)
				srv.ServeConn(c, sess)
				sess.Close()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		cancel()
		wg.Wait()
		tr.Close()
	})
	return udp.LocalAddr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
}

// startRustleSOCKS serves rustle's SOCKS5 front-end (internal/socks5) on
// a loopback port until the test ends.
func startRustleSOCKS(t *testing.T) string {
	t.Helper()
	srv := socks5.New(socks5.Config{HandshakeTimeout: 5 * time.Second, UDPIdleTimeout: 30 * time.Second})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pol := udpPolicy(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	active := map[net.Conn]bool{}
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*net.TCPConn)
			mu.Lock()
			active[tc] = true
			mu.Unlock()
			wg.Go(func() {
				sess := pol.NewSession(ctx, tc.RemoteAddr().(*net.TCPAddr).AddrPort(), nil, nil)
				sess.Attach(tc)
				srv.ServeConn(tc, sess)
				sess.Close()
				mu.Lock()
				delete(active, tc)
				mu.Unlock()
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		cancel()
		mu.Lock()
		for c := range active {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestUDPWorker runs the flows of "load udp" for a moment against
// rustle's own CONNECT-UDP (HTTP/3) and SOCKS5 UDP ASSOCIATE servers, and
// straight to the echo: datagrams come back, one flow opened, nothing
// lost; wrong credentials fail every open.
func TestUDPWorker(t *testing.T) {
	echoAddr := startUDPEcho(t)
	h3Addr, h3TLS := startRustleH3(t, 64)
	socksAddr := startRustleSOCKS(t)
	for _, tt := range []struct {
		name, proxy, auth string
		socks, tls        bool
		wantOK            bool
	}{
		{name: "straight"},
		{name: "CONNECT-UDP over HTTP/3", proxy: h3Addr, auth: udpUser + ":" + udpPass, tls: true, wantOK: true},
		{name: "SOCKS5 UDP ASSOCIATE", proxy: socksAddr, auth: udpUser + ":" + udpPass, socks: true, wantOK: true},
		{name: "CONNECT-UDP, wrong password", proxy: h3Addr, auth: udpUser + ":wrong", tls: true},
		{name: "SOCKS5, wrong password", proxy: socksAddr, auth: udpUser + ":wrong", socks: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := newDialer(tt.proxy, tt.auth, echoAddr, 5*time.Second)
			if tt.tls {
				d.tlsConf = h3TLS.Clone()
			}
			fd, err := newFlowDialer(d, tt.socks, 1, "/.well-known/masque/udp/{target_host}/{target_port}/")
			if err != nil {
				t.Fatal(err)
			}
			var c udpCounts
			udpWorker(context.Background(), fd, 64, time.Now().Add(loadWindow), time.Second, &c)
			if tt.proxy == "" || tt.wantOK {
				if c.requests == 0 || c.opened != 1 || c.lost != 0 || c.firstErr != nil {
					t.Fatalf("%d datagrams echoed on %d flows opened, %d lost, first error %v; want some on one flow, none lost", c.requests, c.opened, c.lost, c.firstErr)
				}
				if c.bytes != 64*c.requests || int64(len(c.latencies)) != c.requests {
					t.Fatalf("%d bytes and %d latencies for %d datagrams of 64 bytes", c.bytes, len(c.latencies), c.requests)
				}
				return
			}
			if c.requests != 0 || c.opened != 0 || c.errs.Connect == 0 {
				t.Fatalf("wrong password: %d datagrams, %d flows opened, %d connect errors; want none, none, some", c.requests, c.opened, c.errs.Connect)
			}
		})
	}
}

// TestFlowsPerConn opens held flows as "load hold -udp" does: perConn
// flows share a QUIC connection, each echoes its datagram, and one past
// rustle's per-connection flow limit would be refused, so a new
// connection is opened in time.
func TestFlowsPerConn(t *testing.T) {
	echoAddr := startUDPEcho(t)
	h3Addr, h3TLS := startRustleH3(t, 3)
	d := newDialer(h3Addr, udpUser+":"+udpPass, echoAddr, 5*time.Second)
	d.tlsConf = h3TLS.Clone()
	fd, err := newFlowDialer(d, false, 3, "/.well-known/masque/udp/{target_host}/{target_port}/")
	if err != nil {
		t.Fatal(err)
	}
	defer fd.close()
	var flows []flow
	defer func() {
		for _, f := range flows {
			f.Close()
		}
	}()
	for i := range 7 {
		f, err := fd.open(context.Background())
		if err != nil {
			t.Fatalf("flow %d: %v", i, err)
		}
		flows = append(flows, f)
		if err := flowHoldCheck(f); err != nil {
			t.Fatalf("flow %d: %v", i, err)
		}
	}
	if n := len(fd.conns); n != 3 {
		t.Fatalf("7 flows, 3 per connection, on %d QUIC connections, want 3", n)
	}
}

// TestHoldH3 holds QUIC connections as "load hold -h3" does, each after
// a forwarded GET through rustle's HTTP/3 front-end to an HTTP origin.
func TestHoldH3(t *testing.T) {
	h3Addr, h3TLS := startRustleH3(t, 64)
	ln := listen(t)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), 1024))
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	d := newDialer(h3Addr, udpUser+":"+udpPass, ln.Addr().String(), 5*time.Second)
	d.tlsConf = h3TLS.Clone()
	d.tlsConf.NextProtos = []string{"h3"}
	var errs errorLog
	held := dialParallel(context.Background(), 5, 2, &errs, func(ctx context.Context) (io.Closer, error) {
		return holdH3(ctx, d, "http://"+d.target+"/1k")
	})
	for _, c := range held {
		defer c.Close()
	}
	if len(held) != 5 || errs.n.Load() != 0 {
		t.Fatalf("%d of 5 connections held, %d errors, first: %s", len(held), errs.n.Load(), errs.firstText())
	}
	bad := newDialer(h3Addr, udpUser+":wrong", ln.Addr().String(), 5*time.Second)
	bad.tlsConf = d.tlsConf
	if c, err := holdH3(context.Background(), bad, "http://"+d.target+"/1k"); err == nil {
		c.Close()
		t.Fatal("held a connection whose request was refused (407)")
	}
}

// TestSOCKSUDPHeader checks the RFC 1928 §7 header written before each
// payload and its removal from the relay's datagrams.
func TestSOCKSUDPHeader(t *testing.T) {
	hdr, err := socksUDPHeader("127.0.0.1:5353")
	if err != nil {
		t.Fatal(err)
	}
	if want := []byte{0, 0, 0, 1, 127, 0, 0, 1, 0x14, 0xe9}; !bytes.Equal(hdr, want) {
		t.Fatalf("header % x, want % x", hdr, want)
	}
	if len(hdr) != 10 {
		t.Fatalf("IPv4 header of %d bytes, want 10", len(hdr))
	}
	for _, tt := range []struct {
		name string
		in   []byte
		want string // "" = an error
	}{
		{"IPv4", append(append([]byte(nil), hdr...), "ping"...), "ping"},
		{"IPv6", append([]byte{0, 0, 0, 4, 15: 0, 21: 0}, "ab"...), "ab"},
		{"domain", append([]byte{0, 0, 0, 3, 3, 'a', '.', 'b', 0, 53}, "x"...), "x"},
		{"fragment", []byte{0, 0, 1, 1, 127, 0, 0, 1, 0, 53, 'x'}, ""},
		{"short", []byte{0, 0, 0, 1, 127}, ""},
		{"bad type", []byte{0, 0, 0, 9, 0, 0}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := socksUDPPayload(tt.in)
			switch {
			case tt.want == "" && !errors.Is(err, errSOCKS):
				t.Fatalf("payload %q, error %v; want an errSOCKS", got, err)
			case tt.want != "" && (err != nil || string(got) != tt.want):
				t.Fatalf("payload %q, error %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := socksUDPHeader("example.com:53"); err == nil {
		t.Fatal("a header for a host name, want an error (the bench sends to IP addresses)")
	}
}
