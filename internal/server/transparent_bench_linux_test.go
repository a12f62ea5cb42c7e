package server

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// The benchmark's origin address, on the loopback of a namespace of its
// own, whose output rules redirect connections to it to rustle's
// transparent listener.
const benchOrigin = "192.0.2.100"

// BenchmarkTransparent compares, in one run and one rustle (one worker),
// the same traffic through the plain port (a client configured with the
// proxy) and through the transparent listener (a client with none, whose
// connections nftables REDIRECT rules send to rustle), in a network
// namespace it makes (root, ip and nft needed; it runs itself again
// inside and prints that run's lines):
//
//   - http-1k: keep-alive GETs of a 1 KiB response on one connection,
//     absolute-form to the plain port against origin-form redirected;
//   - bulk-16m: a new connection per op carrying 16 MiB from the origin,
//     a CONNECT tunnel against a redirected plain TCP connection (the
//     first bytes no TLS and no HTTP), MB/s;
//   - tls-setup: a new connection per op whose client sends a
//     browser-sized ClientHello and reads 1 KiB: a CONNECT (answered,
//     then the hello) against a redirected connection whose destination
//     rustle reads back (SO_ORIGINAL_DST) and whose hello it reads to
//     learn the name: the cost of learning the destination and the SNI
//     per connection.
//
// Run with -count for the spread:
//
//	go test ./internal/server -run '^$' -bench Transparent -benchtime 2000x -count 6
func BenchmarkTransparent(b *testing.B) {
	if _, child := proxytest.NetnsChild(); child {
		benchTransparentChild(b)
		return
	}
	proxytest.RequireNetns(b)
	proxytest.RequireTool(b, "nft", "nftables")
	ns := proxytest.NewNetns(b, "rustle-tb")
	proxytest.IP(b, "-n", ns, "addr", "add", benchOrigin+"/32", "dev", "lo")
	proxytest.RunBenchInNetns(b, ns, "bench")
}

// benchTransparentChild is BenchmarkTransparent inside its namespace.
func benchTransparentChild(b *testing.B) {
	const bulkSize = 16 << 20
	body := strings.Repeat("x", 1024)
	proxytest.NewStaticOriginOn(b, benchOrigin+":80",
		"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\nContent-Type: text/plain\r\n\r\n"+body)
	hello := proxytest.ClientHello(b, &tls.Config{ServerName: "origin.example", NextProtos: []string{"h2", "http/1.1"}})
	rawOrigin(b, benchOrigin+":443", len(hello), 1024)
	rawOrigin(b, benchOrigin+":9000", 1, bulkSize)

	cfg, err := config.Parse([]byte(`
workers = 1
allow_private = ["192.0.2.0/24"]

[egress]
mark = 0x2a

[[listen]]
name = "plain"
address = "127.0.0.1:0"

[[listen]]
name = "transparent"
protocol = "transparent"
address = ":0"
`), "bench.toml")
	if err != nil {
		b.Fatal(err)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		b.Fatal(err)
	}
	srv, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	addrs := map[string]string{}
	for _, a := range srv.Addrs() {
		addrs[a.Name] = a.Addr.String()
	}
	_, tport, _ := net.SplitHostPort(addrs["transparent"])
	cmd := fmt.Sprintf(`table inet bench {
	chain output {
		type nat hook output priority -100; policy accept;
		meta mark 0x2a return
		ip daddr %s tcp dport { 80, 443, 9000 } redirect to :%s
	}
}`, benchOrigin, tport)
	nftLoad(b, cmd)
	plain := addrs["plain"]

	b.Run("http-1k", func(b *testing.B) {
		get := func(b *testing.B, addr, req string) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReaderSize(c, 4096)
			buf := make([]byte, 2048)
			b.SetBytes(1024)
			b.ResetTimer()
			for range b.N {
				if _, err := io.WriteString(c, req); err != nil {
					b.Fatal(err)
				}
				readResponse(b, br, buf)
			}
		}
		b.Run("plain", func(b *testing.B) {
			get(b, plain, "GET http://"+benchOrigin+"/ HTTP/1.1\r\nHost: "+benchOrigin+"\r\n\r\n")
		})
		b.Run("transparent", func(b *testing.B) {
			get(b, benchOrigin+":80", "GET / HTTP/1.1\r\nHost: origin.example\r\n\r\n")
		})
	})

	b.Run("bulk-16m", func(b *testing.B) {
		buf := make([]byte, 256<<10)
		run := func(b *testing.B, dial func() net.Conn) {
			b.SetBytes(bulkSize)
			for range b.N {
				c := dial()
				if _, err := c.Write([]byte("x")); err != nil {
					b.Fatal(err)
				}
				n, err := io.CopyBuffer(io.Discard, c, buf)
				c.Close()
				if err != nil || n != bulkSize {
					b.Fatalf("%d bytes, %v", n, err)
				}
			}
		}
		b.Run("connect", func(b *testing.B) {
			run(b, func() net.Conn { return connectVia(b, plain, benchOrigin+":9000") })
		})
		b.Run("transparent", func(b *testing.B) {
			run(b, func() net.Conn { return dialOrFail(b, benchOrigin+":9000") })
		})
	})

	b.Run("tls-setup", func(b *testing.B) {
		buf := make([]byte, 4096)
		run := func(b *testing.B, dial func() net.Conn) {
			for range b.N {
				c := dial()
				if _, err := c.Write(hello); err != nil {
					b.Fatal(err)
				}
				n, err := io.CopyBuffer(io.Discard, c, buf)
				c.Close()
				if err != nil || n != 1024 {
					b.Fatalf("%d bytes, %v", n, err)
				}
			}
		}
		b.Run("connect", func(b *testing.B) {
			run(b, func() net.Conn { return connectVia(b, plain, benchOrigin+":443") })
		})
		b.Run("transparent", func(b *testing.B) {
			run(b, func() net.Conn { return dialOrFail(b, benchOrigin+":443") })
		})
	})
}

// nftLoad loads ruleset into the namespace the process runs in.
func nftLoad(b *testing.B, ruleset string) {
	b.Helper()
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(ruleset)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("nft: %v: %s", err, out)
	}
}

func dialOrFail(b *testing.B, addr string) net.Conn {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// connectVia opens a CONNECT tunnel to target through the proxy at
// proxy and returns it once answered 200.
func connectVia(b *testing.B, proxy, target string) net.Conn {
	c := dialOrFail(b, proxy)
	if _, err := io.WriteString(c, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
		b.Fatal(err)
	}
	// The answer is 39 bytes, which nothing follows before the client's
	// first bytes: read it whole, no more.
	var ans [len("HTTP/1.1 200 Connection established\r\n\r\n")]byte
	if _, err := io.ReadFull(c, ans[:]); err != nil || !strings.HasPrefix(string(ans[:]), "HTTP/1.1 200") {
		b.Fatalf("CONNECT %s: %q %v", target, ans, err)
	}
	return c
}

// readResponse reads one response with a Content-Length body from br.
func readResponse(b *testing.B, br *bufio.Reader, buf []byte) {
	n := -1
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			b.Fatal(err)
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := strings.CutPrefix(strings.ToLower(string(line)), "content-length: "); ok {
			n, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	if n < 0 {
		b.Fatal("a response without Content-Length")
	}
	if _, err := io.ReadFull(br, buf[:n]); err != nil {
		b.Fatal(err)
	}
}

// rawOrigin serves on addr: each connection's first n bytes are read,
// then reply bytes are written and the connection closed.
func rawOrigin(b *testing.B, addr string, n, reply int) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	out := make([]byte, reply)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				if _, err := io.ReadFull(c, make([]byte, n)); err != nil {
					return
				}
				c.Write(out)
			})
		}
	})
	b.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
}
