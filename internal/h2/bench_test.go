package h2

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// BenchmarkForward1K measures 1 KiB GETs forwarded to an HTTP/1.1
// origin over the upstream pool, many streams at once on one client
// connection.
func BenchmarkForward1K(b *testing.B) {
	body := bytes.Repeat([]byte("x"), 1024)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	b.Cleanup(o.Close)
	p := startProxy(b, Config{Pool: proxytest.NewPool(b, dialer.PoolConfig{})})
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

// BenchmarkConnectBulk measures bytes through one CONNECT stream, both
// ways, to an echo server.
func BenchmarkConnectBulk(b *testing.B) {
	echo := proxytest.NewEcho(b)
	p := startProxy(b, Config{})
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
