package h2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// TestIdleTunnelMemory measures what an idle HTTP/2 tunnel (one TLS
// connection carrying one CONNECT stream, a few bytes echoed) costs the
// proxy: Go heap in use plus goroutine stacks, per tunnel, with the
// clients and the echo origin in a child process. For comparison it
// measures the same with x/net/http2's standard server and a CONNECT
// handler relaying with two goroutines, and then connections whose
// client reset their tunnel: idle with no stream, they must keep no
// goroutine.
func TestIdleTunnelMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 1,000 TLS connections")
	}
	waitWorkersGone(t)
	const tunnels = 400
	ours, stacks, _ := measureIdle(t, tunnels, false, false)
	std, _, _ := measureIdle(t, tunnels, true, false)
	// A connection whose tunnel the client reset: idle with no stream,
	// it keeps no goroutine either once its client is quiet (quietWait).
	// Measured: 7.0 to 7.4 KiB, no goroutine (10.2 to 10.6 KiB and one
	// goroutine, its worker parked in WaitRead, before).
	conn, _, connGoroutines := measureIdle(t, tunnels, false, true)
	summary(t, "h2: an idle HTTP/2 connection with no stream costs %.1f KiB of heap+stacks and %.2f goroutines (race detector %v)",
		conn/1024, connGoroutines, proxytest.Race)
	summary(t, "h2: an idle HTTP/2 tunnel costs %.1f KiB of heap+stacks, %.1f KiB of it stacks (x/net/http2's Server with a CONNECT handler: %.1f KiB; %d tunnels, race detector %v)",
		ours/1024, stacks/1024, std/1024, tunnels, proxytest.Race)
	// Bounds a little above what is measured (13 KiB, 0.3 KiB of it
	// stacks: no goroutine of the connection or the tunnel waits while it
	// is idle, see Parker.Notify), so as to catch a buffer, a goroutine or
	// a grown stack per tunnel too many, not to time anything. With the
	// connection's reader and the tunnel's upstream wait each parked on a
	// goroutine (4 and 2 KiB stacks) it was 22 KiB, 6.3 of it stacks; a
	// connection that waited for its client on the goroutine that had
	// read its frames held an 8 KiB stack (12 KiB of stacks per tunnel).
	limit, stackLimit := 16.0*1024, 1.5*1024
	if proxytest.Race {
		limit, stackLimit = 64*1024, 40*1024
	}
	if ours > limit {
		t.Errorf("%.1f KiB per idle HTTP/2 tunnel, want under %.0f KiB", ours/1024, limit/1024)
	}
	if stacks > stackLimit {
		t.Errorf("%.1f KiB of goroutine stacks per idle HTTP/2 tunnel, want under %.1f KiB", stacks/1024, stackLimit/1024)
	}
	if conn > limit {
		t.Errorf("%.1f KiB per idle HTTP/2 connection with no stream, want under %.0f KiB", conn/1024, limit/1024)
	}
	if connGoroutines > 0.5 {
		t.Errorf("%.2f goroutines per idle HTTP/2 connection with no stream, want none", connGoroutines)
	}
}

// measureIdle serves tunnels HTTP/2 tunnels whose clients and origin
// live in a child process and returns the growth of HeapInuse+StackInuse
// per tunnel, of StackInuse alone, and of the goroutines. std selects x/net/http2's server
// instead of rustle's; reset has the clients reset each tunnel once it
// has echoed, leaving its connection with no stream.
func measureIdle(t *testing.T, tunnels int, std, reset bool) (total, stacks, goroutines float64) {
	const warm = 20 // tunnels open before the baseline, to exclude one-time costs
	var addr string
	var caPEM []byte
	if std {
		addr, caPEM = startStdServer(t)
	} else {
		p := startProxy(t, testConfig(Config{}), nil)
		addr, caPEM = p.addr, p.caPEM
	}
	child := proxytest.StartChild(t, "^$",
		"H2_MEMORY_HELPER=1",
		"H2_MEMORY_PROXY="+addr,
		"H2_MEMORY_CA="+string(caPEM),
		fmt.Sprintf("H2_MEMORY_N=%d", tunnels),
		fmt.Sprintf("H2_MEMORY_WARM=%d", warm),
		fmt.Sprintf("H2_MEMORY_RESET=%v", reset),
	)
	defer child.Close()
	child.Expect("warm")
	g0 := runtime.NumGoroutine()
	m0 := proxytest.SettledMem()
	rssBefore := proxytest.VMRSS()
	child.Send("go")
	child.Expect("open")
	m1 := proxytest.SettledMem()
	rssAfter := proxytest.VMRSS()
	n := float64(tunnels - warm)
	goroutines = float64(runtime.NumGoroutine()-g0) / n
	t.Logf("std=%v reset=%v: VmRSS grew %.1f KiB, goroutines %.2f per tunnel", std, reset,
		float64(rssAfter-rssBefore)/n/1024, goroutines)
	if path := os.Getenv("H2_MEMORY_PROFILE"); path != "" && !std {
		proxytest.WriteProfiles(t, path, "heap", "goroutine")
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		t.Logf("goroutines %d, stack in use %d KiB, heap in use %d KiB", runtime.NumGoroutine(), ms.StackInuse>>10, ms.HeapInuse>>10)
		for i := 0; i < 10; i++ {
			runtime.GC()
		}
		runtime.ReadMemStats(&ms)
		t.Logf("after 10 more GCs: goroutines %d, stack in use %d KiB, heap in use %d KiB", runtime.NumGoroutine(), ms.StackInuse>>10, ms.HeapInuse>>10)
	}
	return (float64(m1.Heap+m1.Stacks) - float64(m0.Heap+m0.Stacks)) / n, (float64(m1.Stacks) - float64(m0.Stacks)) / n, goroutines
}

// startStdServer serves x/net/http2's Server with a CONNECT handler, on
// TLS over tunnel.RecordConn like rustle's listener, for comparison.
func startStdServer(t *testing.T) (addr string, caPEM []byte) {
	t.Helper()
	tc := newTestCert(t)
	cert := tc.cert
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http2.Server{}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			w.WriteHeader(502)
			return
		}
		defer up.Close()
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		done := make(chan struct{})
		go func() {
			io.Copy(up, r.Body)
			close(done)
		}()
		buf := make([]byte, 16<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				w.(http.Flusher).Flush()
			}
			if err != nil {
				break
			}
		}
		<-done
	})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				tc := tls.Server(tunnel.RecordConn(c.(*net.TCPConn)), &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}})
				if tc.Handshake() != nil {
					c.Close()
					return
				}
				srv.ServeConn(tc, &http2.ServeConnOpts{Handler: h})
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String(), tc.caPEM
}

// memoryHelper is the child process of measureIdle: an echo origin and
// the clients of the tunnels. It opens H2_MEMORY_WARM tunnels, says
// "warm", waits for "go", opens the rest, says "open", and holds them
// until its standard input closes; with H2_MEMORY_RESET=true it resets
// each tunnel once it has echoed, and holds its connection.
func memoryHelper() int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	n, _ := strconv.Atoi(os.Getenv("H2_MEMORY_N"))
	warm, _ := strconv.Atoi(os.Getenv("H2_MEMORY_WARM"))
	roots := x509.NewCertPool()
	block, _ := pem.Decode([]byte(os.Getenv("H2_MEMORY_CA")))
	if block == nil {
		return fail(fmt.Errorf("no CA"))
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fail(err)
	}
	roots.AddCert(ca)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c)
		}
	}()
	var keep []io.Closer
	open := func(count int) error {
		for i := 0; i < count; i++ {
			c, err := tls.Dial("tcp", os.Getenv("H2_MEMORY_PROXY"), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
			if err != nil {
				return err
			}
			cc, err := (&http2.Transport{}).NewClientConn(c)
			if err != nil {
				return err
			}
			pr, pw := io.Pipe()
			req, _ := http.NewRequestWithContext(context.Background(), "CONNECT", "", pr)
			req.URL, req.Host = &url.URL{Host: echo.Addr().String()}, echo.Addr().String()
			resp, err := cc.RoundTrip(req)
			if err != nil {
				return err
			}
			if resp.StatusCode != 200 {
				return fmt.Errorf("CONNECT: %d", resp.StatusCode)
			}
			io.WriteString(pw, "hi")
			var b [2]byte
			if _, err := io.ReadFull(resp.Body, b[:]); err != nil {
				return err
			}
			if os.Getenv("H2_MEMORY_RESET") == "true" {
				resp.Body.Close() // RST_STREAM
			}
			keep = append(keep, pw, cc)
		}
		return nil
	}
	if err := open(warm); err != nil {
		return fail(err)
	}
	fmt.Println("warm")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return 0
	}
	if err := open(n - warm); err != nil {
		return fail(err)
	}
	time.Sleep(200 * time.Millisecond) // let the proxy settle
	fmt.Println("open")
	io.Copy(io.Discard, os.Stdin)
	for _, c := range keep {
		c.Close()
	}
	return 0
}

// BenchmarkForward1K measures 1 KiB GETs forwarded to an HTTP/1.1
// origin over the upstream pool, many streams at once on one client
// connection.
func BenchmarkForward1K(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	b.Cleanup(o.Close)
	p := startProxy(b, testConfig(Config{}), proxytest.NewPolicy(b, proxytest.PolicyConfig{Pool: proxytest.NewPool(b, dialer.PoolConfig{})}))
	cc := p.client(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.SetParallelism(8) // streams in flight per core
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("GET", o.URL+"/1k", nil)
			resp, err := cc.RoundTrip(req)
			if err != nil {
				b.Error(err)
				return
			}
			n, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if n != int64(len(body)) {
				b.Errorf("got %d bytes", n)
				return
			}
		}
	})
}

// BenchmarkForward1KSerial is BenchmarkForward1K for a client that
// sends one request at a time on its connection, the next once the
// answer has come: the connection has no stream between them.
func BenchmarkForward1KSerial(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	b.Cleanup(o.Close)
	p := startProxy(b, testConfig(Config{}), proxytest.NewPolicy(b, proxytest.PolicyConfig{Pool: proxytest.NewPool(b, dialer.PoolConfig{})}))
	cc := p.client(b)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for range b.N {
		req, _ := http.NewRequest("GET", o.URL+"/1k", nil)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if n != int64(len(body)) {
			b.Fatalf("got %d bytes", n)
		}
	}
}

// BenchmarkConnectBulk measures bytes through one CONNECT stream, both
// ways, to an echo server.
func BenchmarkConnectBulk(b *testing.B) {
	echo := proxytest.NewEcho(b)
	p := startProxy(b, testConfig(Config{}), nil)
	cc := p.client(b)
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("CONNECT", "", pr)
	req.URL, req.Host = &url.URL{Host: echo.Addr}, echo.Addr
	resp, err := cc.RoundTrip(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	chunk := bytes.Repeat([]byte("y"), 64<<10)
	buf := make([]byte, len(chunk))
	b.ReportAllocs()
	b.SetBytes(int64(len(chunk)))
	b.ResetTimer()
	go func() {
		for i := 0; i < b.N; i++ {
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
	}()
	for i := 0; i < b.N; i++ {
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	pw.Close()
}
