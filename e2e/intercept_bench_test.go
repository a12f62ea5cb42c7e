//go:build linux

package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// benchBody is what the benchmarks' origin answers: 1 KiB.
var benchBody = strings.Repeat("x", 1<<10)

// benchInterceptRig is two rustle processes (the binary, one worker
// each) in front of a Go HTTPS origin answering 1 KiB: one intercepts
// the tunnels to localhost and 127.0.0.1, the other splices every
// tunnel; and a client's trust of both rustle's CA and the origin's.
type benchInterceptRig struct {
	icept, plain *proc
	port         string
	roots        *x509.CertPool // the interception CA and the origins' root
}

func newBenchInterceptRig(b *testing.B, cacheSize int) *benchInterceptRig {
	b.Helper()
	pki := newOriginPKI(b)
	_, _, pair := pki.leaf(b, "origin")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, benchBody)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.StartTLS()
	b.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	caDir := filepath.Join(b.TempDir(), "ca")
	if r := runRustle(b, "", "ca", caDir); r.code != 0 {
		b.Fatalf("rustle ca: %s", r.stderr)
	}
	caPath := filepath.Join(caDir, "ca.pem")
	icfg := fmt.Sprintf(`workers = 1

[[listen]]
name = "bench"
address = "127.0.0.1:0"

[intercept]
ca_cert = %q
ca_key = %q
upstream_ca = %q
cache_size = %d

[[intercept.rules]]
hosts = ["localhost", "127.0.0.1"]
`, caPath, filepath.Join(caDir, "ca-key.pem"), pki.caPath, cacheSize)
	r := &benchInterceptRig{port: port, roots: x509.NewCertPool()}
	r.icept = startRustle(b, "-c", writeFile(b, "rustle.toml", icfg))
	r.plain = startRustle(b, "-c", writeFile(b, "rustle.toml", "workers = 1\n\n[[listen]]\nname = \"bench\"\naddress = \"127.0.0.1:0\"\n"))
	r.icept.waitStarted(b)
	r.plain.waitStarted(b)
	for _, p := range []string{caPath, pki.caPath} {
		pemBytes, _ := os.ReadFile(p)
		r.roots.AppendCertsFromPEM(pemBytes)
	}
	return r
}

// client returns a keep-alive HTTP/1.1 client through the proxy at
// addr.
func (r *benchInterceptRig) client(b *testing.B, addr string) *http.Client {
	tr := &http.Transport{Proxy: http.ProxyURL(proxyURL(addr, "", "")), TLSClientConfig: &tls.Config{RootCAs: r.roots},
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}, MaxIdleConnsPerHost: 16}
	b.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func benchGet(b *testing.B, c *http.Client, url string, buf []byte) {
	resp, err := c.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
	resp.Body.Close()
	if err != nil || n != int64(len(benchBody)) || resp.StatusCode != 200 {
		b.Fatalf("GET: %d, %d bytes, %v", resp.StatusCode, n, err)
	}
}

// BenchmarkInterceptRequests measures rustle's own CPU per 1 KiB request
// on keep-alive connections: intercepted (TLS terminated by rustle, the
// request decided, logged nowhere, sent over a pooled TLS connection to
// the origin) and, in the other process, through a plain CONNECT tunnel
// (spliced). Each iteration makes one request through each, four
// clients at once; the CPU is each process's schedstat run time (the
// clients and the origin run in the test process). req/s-per-core is
// what one core of rustle would serve at that cost.
//
//	go test ./e2e -run '^$' -bench InterceptRequests -benchtime 5000x -count 5
func BenchmarkInterceptRequests(b *testing.B) {
	r := newBenchInterceptRig(b, 4096)
	url := "https://localhost:" + r.port + "/"
	buf := make([]byte, 4096)
	icept, plain := r.client(b, r.icept.addr()), r.client(b, r.plain.addr())
	for range 100 {
		benchGet(b, icept, url, buf)
		benchGet(b, plain, url, buf)
	}
	cpuI, cpuP := schedCPU(b, r.icept.pid()), schedCPU(b, r.plain.pid())
	b.SetParallelism(2)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		buf := make([]byte, 4096)
		for pb.Next() {
			benchGet(b, icept, url, buf)
			benchGet(b, plain, url, buf)
		}
	})
	b.StopTimer()
	perI := float64(schedCPU(b, r.icept.pid())-cpuI) / float64(b.N)
	perP := float64(schedCPU(b, r.plain.pid())-cpuP) / float64(b.N)
	b.ReportMetric(perI, "intercepted-cpu-ns/req")
	b.ReportMetric(perP, "tunnel-cpu-ns/req")
	b.ReportMetric(1e9/perI, "intercepted-req/s-per-core")
}

// BenchmarkInterceptNewConnection measures rustle's CPU per new
// intercepted connection (a CONNECT, the TLS handshake with a minted
// leaf, one 1 KiB request, the close), the names alternating between
// localhost and 127.0.0.1: with a warm cache (every leaf cached) and a
// cold one (a cache of one leaf: every connection mints). The upstream
// connection to the origin is pooled either way.
//
//	go test ./e2e -run '^$' -bench InterceptNewConnection -benchtime 2000x -count 5
func BenchmarkInterceptNewConnection(b *testing.B) {
	for _, tc := range []struct {
		name  string
		cache int
	}{{"warm", 4096}, {"cold", 1}} {
		b.Run(tc.name, func(b *testing.B) {
			r := newBenchInterceptRig(b, tc.cache)
			urls := []string{"https://localhost:" + r.port + "/", "https://127.0.0.1:" + r.port + "/"}
			conn := func(i int, buf []byte) {
				tr := &http.Transport{Proxy: http.ProxyURL(proxyURL(r.icept.addr(), "", "")), TLSClientConfig: &tls.Config{RootCAs: r.roots},
					TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}, DisableKeepAlives: true}
				benchGet(b, &http.Client{Transport: tr, Timeout: 10 * time.Second}, urls[i%2], buf)
			}
			buf := make([]byte, 4096)
			for i := range 50 {
				conn(i, buf)
			}
			cpu := schedCPU(b, r.icept.pid())
			b.ResetTimer()
			for i := range b.N {
				conn(i, buf)
			}
			b.StopTimer()
			b.ReportMetric(float64(schedCPU(b, r.icept.pid())-cpu)/float64(b.N), "cpu-ns/conn")
		})
	}
}

// BenchmarkInterceptIdleMemory measures rustle's resident memory per
// idle intercepted connection (a request made, then idle on its
// keep-alive connection) beside an idle spliced TLS tunnel (the
// client's TLS to the origin through a plain CONNECT, idle): n of each
// are opened, and the RSS grown by them is divided by n.
//
//	go test ./e2e -run '^$' -bench InterceptIdleMemory -benchtime 1x -count 3
func BenchmarkInterceptIdleMemory(b *testing.B) {
	const n = 200
	r := newBenchInterceptRig(b, 4096)
	target := "localhost:" + r.port
	open := func(addr string) []net.Conn {
		var conns []net.Conn
		for range n {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil || resp.StatusCode != 200 {
				b.Fatalf("CONNECT: %v %v", resp, err)
			}
			tc := tls.Client(c, &tls.Config{RootCAs: r.roots, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
			fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: %s\r\n\r\n", target)
			resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			conns = append(conns, tc)
		}
		return conns
	}
	for range b.N {
		var per [2]float64
		for i, p := range []*proc{r.icept, r.plain} {
			before := procRSS(b, p.pid())
			conns := open(p.addr())
			time.Sleep(2 * time.Second) // parked, their buffers back
			per[i] = float64(procRSS(b, p.pid())-before) / n
			for _, c := range conns {
				c.Close()
			}
		}
		b.ReportMetric(per[0], "intercepted-B/idle-conn")
		b.ReportMetric(per[1], "tunnel-B/idle-conn")
	}
}
