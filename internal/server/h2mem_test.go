package server

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestIdleH2TunnelStacks measures the goroutine stacks that idle HTTP/2
// tunnels hold on an https listener that offers h2 and http/1.1 (whose
// first bytes after the handshake are read to tell the two apart): none,
// once the connection is idle; the connection's goroutine, had it waited
// for the client, would also have grown its stack reading them.
// The clients run in this process: their goroutines count too.
func TestIdleH2TunnelStacks(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 200 TLS connections")
	}
	tl, roots := proxyCerts(t)
	echo := proxytest.NewEcho(t)
	_, addrs := startListeners(t, 5*time.Second,
		config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:pw"))
	open := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			tc, err := tls.Dial("tcp", addrs[0], &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{"h2", "http/1.1"}})
			if err != nil {
				t.Fatal(err)
			}
			cc, err := (&http2.Transport{}).NewClientConn(tc)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cc.Close() })
			pr, pw := io.Pipe()
			t.Cleanup(func() { pw.Close() })
			req, _ := http.NewRequestWithContext(context.Background(), "CONNECT", "", pr)
			req.URL, req.Host = &url.URL{Host: echo.Addr}, echo.Addr
			req.Header.Set("Proxy-Authorization", auth)
			resp, err := cc.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 {
				t.Fatalf("CONNECT: %d", resp.StatusCode)
			}
			io.WriteString(pw, "hi")
			var b [2]byte
			if _, err := io.ReadFull(resp.Body, b[:]); err != nil {
				t.Fatal(err)
			}
		}
	}
	stacks := func() uint64 {
		var ms runtime.MemStats
		for i := 0; i < 4; i++ {
			runtime.GC() // each shrinks a stack by half at most
		}
		runtime.ReadMemStats(&ms)
		return ms.StackInuse
	}
	const warm, n = 10, 200
	open(warm)
	before := stacks()
	open(n)
	time.Sleep(100 * time.Millisecond) // the last tunnel's goroutines settle
	per := float64(stacks()-before) / n / 1024
	t.Logf("%.1f KiB of goroutine stacks per idle HTTP/2 tunnel, clients' included", per)
	// Measured: 15.8 KiB, the clients' (x/net's readLoop and the request
	// body's writer): the proxy's connection and tunnel wait on no
	// goroutine while idle (h2.Server.ServeConnThen, tunnel.Parker's
	// Notify). With ServeConn's goroutine parked on the connection (4
	// KiB) and the tunnel's on its upstream (2 KiB) it was 23.8 KiB; with
	// the first bytes read on the connection's goroutine as well, which
	// then kept an 8 KiB stack, 28 KiB.
	limit := 19.0
	if proxytest.Race {
		limit = 64 // the race detector's stacks are larger
	}
	if per > limit {
		t.Errorf("%.1f KiB of goroutine stacks per idle HTTP/2 tunnel, want under %.0f KiB", per, limit)
	}
}
