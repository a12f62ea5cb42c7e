// Command origin is the benchmark campaign's origin server: the far end of
// every request and tunnel the proxies under test forward.
//
// It runs these listeners on loopback, each on its own port:
//
//   - http: a minimal HTTP/1.1 server with fixed bodies and Content-Length:
//     /1k (1,024 bytes), /10k, /1m (1 MiB) and /10m, keep-alive unless the
//     request says otherwise, and /_stats with the counters below as JSON.
//   - sink: accepts TCP connections and discards what it reads, counting
//     the bytes; CONNECT bulk tunnels end here and their throughput is the
//     byte count's growth.
//   - hold: accepts TCP connections, echoes what it reads and otherwise
//     keeps them open and idle; the tunnels of the memory test end here.
//   - ws: a WebSocket echo (any path): answers the upgrade, then sends
//     every message back; the WebSocket tests end here.
//   - dns (UDP): a DNS responder for the zone bench.test, where
//     origin.bench.test is 127.0.0.1 (A, TTL 300 s; no AAAA), the
//     resolver of rustle's [dns] rows; /_stats counts its queries.
//   - udp (UDP): a UDP echo, every datagram sent back to its sender as it
//     is; the datagram rows (CONNECT-UDP and SOCKS5 UDP ASSOCIATE) end
//     here.
//
// With -cert and -key (PEM) it also runs TLS variants for the "no proxy"
// column of the TLS tests, where the client talks TLS straight to the
// origin: https (the HTTP origin), wss (the WebSocket echo) and sinktls
// (the sink); and h2, HTTP/2 over TLS (ALPN "h2", golang.org/x/net/http2's
// server) with the same bodies and a POST sink at /_sink, for the HTTP/2
// rows; and h3, HTTP/3 over QUIC on a UDP port (quic-go's server), the
// same bodies, for the HTTP/3 rows. Through a proxy the origin side is
// always plain HTTP/1.1.
//
// At start it prints one JSON line to stdout with the address of each
// listener, e.g. {"http":"127.0.0.1:40001","sink":"127.0.0.1:40002",...}.
// It stops on SIGTERM or SIGINT, or after -lifetime.
//
// The HTTP server is written by hand rather than with net/http so that the
// origin, which shares one core with the load generator, costs as little
// CPU per request as possible (the h2 listener, only for the no-proxy
// column, uses x/net/http2).
//
// Usage:
//
//	origin [-http ADDR] [-sink ADDR] [-hold ADDR] [-ws ADDR] [-dns ADDR] [-udp ADDR] [-cert PEM -key PEM] [-lifetime D]
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/internal/rawio"

	"github.com/quic-go/quic-go/http3"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("origin: ")
	httpAddr := flag.String("http", "127.0.0.1:0", "`address` of the HTTP origin")
	sinkAddr := flag.String("sink", "127.0.0.1:0", "`address` of the TCP sink")
	holdAddr := flag.String("hold", "127.0.0.1:0", "`address` of the TCP hold (echo, then idle) port")
	wsAddr := flag.String("ws", "127.0.0.1:0", "`address` of the WebSocket echo")
	dnsAddr := flag.String("dns", "127.0.0.1:0", "UDP `address` of the DNS responder (zone bench.test)")
	udpAddr := flag.String("udp", "127.0.0.1:0", "UDP `address` of the UDP echo")
	certFile := flag.String("cert", "", "PEM certificate `file` for the TLS listeners (https, wss, sinktls); none without it")
	keyFile := flag.String("key", "", "PEM key `file` of -cert")
	lifetime := flag.Duration("lifetime", 6*time.Hour, "exit after this long even without a signal")
	flag.Parse()

	o := newOrigin()
	// services lists the listeners the origin runs, in the order of the
	// address line. A new kind of endpoint (the WebSocket echo, the TLS
	// variant of the HTTP origin) is one more entry here: a name, a flag
	// for its address and a per-connection handler.
	services := []service{
		{name: "http", addr: *httpAddr, handle: o.serveHTTP},
		{name: "sink", addr: *sinkAddr, handle: o.serveSink},
		{name: "hold", addr: *holdAddr, handle: o.serveHold},
		{name: "ws", addr: *wsAddr, handle: o.serveWS},
	}
	if *certFile != "" || *keyFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			log.Fatalf("load TLS certificate %s: %v", *certFile, err)
		}
		conf := &tls.Config{Certificates: []tls.Certificate{cert}}
		services = append(services,
			service{name: "https", addr: "127.0.0.1:0", handle: withTLS(conf, o.serveHTTP)},
			service{name: "wss", addr: "127.0.0.1:0", handle: withTLS(conf, o.serveWS)},
			service{name: "sinktls", addr: "127.0.0.1:0", handle: withTLS(conf, o.serveSink)},
			service{name: "h2", addr: "127.0.0.1:0", handle: o.serveH2(cert)},
		)
	}
	addrs := map[string]string{}
	var h3srv *http3.Server
	if *certFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			log.Fatalf("load TLS certificate %s: %v", *certFile, err)
		}
		udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			log.Fatalf("listen h3: %v", err)
		}
		h3srv = &http3.Server{
			TLSConfig: http3.ConfigureTLSConfig(&tls.Config{Certificates: []tls.Certificate{cert}}),
			Handler:   http.HandlerFunc(o.handleH2),
		}
		addrs["h3"] = udp.LocalAddr().String()
		go h3srv.Serve(udp)
	}
	for i := range services {
		s := &services[i]
		ln, err := net.Listen("tcp", s.addr)
		if err != nil {
			log.Fatalf("listen %s on %s: %v", s.name, s.addr, err)
		}
		s.ln = ln
		addrs[s.name] = ln.Addr().String()
	}
	dnsConn, err := net.ListenPacket("udp", *dnsAddr)
	if err != nil {
		log.Fatalf("listen dns on %s: %v", *dnsAddr, err)
	}
	addrs["dns"] = dnsConn.LocalAddr().String()
	udpConn, err := net.ListenPacket("udp", *udpAddr)
	if err != nil {
		log.Fatalf("listen udp on %s: %v", *udpAddr, err)
	}
	addrs["udp"] = udpConn.LocalAddr().String()
	line, err := json.Marshal(addrs)
	if err != nil {
		log.Fatalf("encode addresses: %v", err)
	}
	fmt.Println(string(line))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *lifetime)
	defer cancel()

	var wg sync.WaitGroup
	for i := range services {
		s := &services[i]
		wg.Go(func() { acceptLoop(s.ln, s.handle) })
	}
	wg.Go(func() { o.dns.serve(dnsConn) })
	wg.Go(func() { serveUDPEcho(udpConn) })
	<-ctx.Done()
	for i := range services {
		services[i].ln.Close()
	}
	if h3srv != nil {
		h3srv.Close()
	}
	dnsConn.Close()
	udpConn.Close()
	// Accept loops return once their listener is closed; connections still
	// open end with the process.
	wg.Wait()
}

// service is one listener of the origin.
type service struct {
	name   string
	addr   string
	handle func(net.Conn)
	ln     net.Listener
}

// withTLS returns a handler that runs handle on the server side of a TLS
// connection over c; the handshake happens on its first read.
func withTLS(conf *tls.Config, handle func(net.Conn)) func(net.Conn) {
	return func(c net.Conn) { handle(tls.Server(c, conf)) }
}

// acceptLoop serves every connection of ln in its own goroutine until ln is
// closed, its reads and writes raw system calls (package rawio). Running out of file descriptors pauses accepting briefly instead
// of ending the loop.
func acceptLoop(ln net.Listener, handle func(net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				continue
			}
			if isTemporary(err) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			return
		}
		go handle(rawio.Wrap(c))
	}
}

// isTemporary reports whether an accept error is worth retrying (EMFILE,
// ENFILE, ECONNABORTED).
func isTemporary(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ECONNABORTED, syscall.ENOBUFS} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
