package server

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestParkCost is a measurement, not a check (skipped unless PARKCOST_N
// is set): it sends PARKCOST_N requests one at a time on one connection,
// PARKCOST_GAP apart (a time.Duration; 0 is back to back), on the path
// PARKCOST_MODE names: h2fwd (an HTTP/2 client of the https listener
// forwarding http:// GETs), ic-h1 and ic-h2 (an intercepted connection
// by a CONNECT on the plain port, HTTP/1.1 or h2 inside), ic-stream (an
// intercepted HTTP/1.1 connection inside an HTTP/2 CONNECT stream), none
// (no request: what the process costs idling through the gaps). It
// logs what the whole process (client, proxy and origin) spent per
// request: goroutines started, allocations and bytes, CPU time. With
// PARKCOST_DIR set it writes its pid to DIR/ready and waits for DIR/go
// before the measured requests, and writes DIR/done after them, so that
// strace -c -f -p can count the syscalls of exactly those requests.
//
//	PARKCOST_N=200 PARKCOST_GAP=100ms PARKCOST_MODE=ic-h1 go test ./internal/server -run TestParkCost -v
func TestParkCost(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("PARKCOST_N"))
	if n <= 0 {
		t.Skip("a measurement: set PARKCOST_N, PARKCOST_GAP, PARKCOST_MODE")
	}
	gap, err := time.ParseDuration(os.Getenv("PARKCOST_GAP"))
	if err != nil {
		t.Fatalf("PARKCOST_GAP: %v", err)
	}
	mode := os.Getenv("PARKCOST_MODE")
	target, upstreamCA := pathOrigin(t)
	cfg, ca := interceptLocalConfig(t, t.TempDir(), upstreamCA, time.Minute)
	proxyTLS, proxyRoots := proxyCerts(t)
	if mode == "h2fwd" || mode == "ic-stream" {
		cfg.Listen[0].Protocol = "https"
		cfg.Listen[0].TLS = proxyTLS
		cfg.Listen[0].ALPN = []string{"h2"}
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	_, addrs := startLogged(t, cfg, nil, &logBuffer{})
	addr := addrs["plain"]
	roots := x509.NewCertPool()
	roots.AddCert(ca)
	h2conn := func() *http2.ClientConn {
		pc, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: proxyRoots, ServerName: "localhost", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatalf("TLS to the proxy: %v", err)
		}
		t.Cleanup(func() { pc.Close() })
		cc, err := (&http2.Transport{}).NewClientConn(pc)
		if err != nil {
			t.Fatal(err)
		}
		return cc
	}
	h1 := func(c net.Conn) func(int) {
		cc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
		br := bufio.NewReader(cc)
		return func(i int) {
			path := "/" + strconv.Itoa(i)
			if _, err := io.WriteString(cc, "GET "+path+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil || string(body) != path {
				t.Fatalf("%s: %q %v", path, body, err)
			}
		}
	}
	var do func(int)
	switch mode {
	case "h2fwd":
		o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
		cc := h2conn()
		do = func(i int) {
			req, _ := http.NewRequest("GET", o.URL("/"+strconv.Itoa(i)), nil)
			resp, err := cc.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || string(body) != "ok" {
				t.Fatalf("%d %q %v", resp.StatusCode, body, err)
			}
		}
	case "ic-h1":
		do = h1(proxytest.Connect(t, addr, target))
	case "ic-stream":
		c, _ := proxytest.H2Connect(t, h2conn(), target)
		do = h1(c)
	case "ic-h2":
		cc := tls.Client(proxytest.Connect(t, addr, target), &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{"h2"}})
		if err := cc.Handshake(); err != nil {
			t.Fatal(err)
		}
		h2c, err := proxytest.NewH2Client(cc)
		if err != nil {
			t.Fatal(err)
		}
		do = func(i int) {
			id := uint32(2*i - 1)
			path := "/" + strconv.Itoa(i)
			if _, err := cc.Write(h2c.Get(id, target, path)); err != nil {
				t.Fatal(err)
			}
			status, body, err := h2c.Answer(id)
			if err != nil || status != "200" || string(body) != path {
				t.Fatalf("%s: %s %q %v", path, status, body, err)
			}
		}
	case "none": // the control: the process idle for the gaps, no request
		do = func(int) {}
	default:
		t.Fatalf("PARKCOST_MODE %q", mode)
	}
	i := 1
	for ; i <= 20; i++ { // warm: upstream connected, buffers grown
		do(i)
	}
	dir := os.Getenv("PARKCOST_DIR")
	if dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "ready"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			t.Fatal(err)
		}
		for end := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(dir, "go")); err == nil {
				break
			}
			if time.Now().After(end) {
				t.Fatal("no DIR/go in a minute")
			}
		}
	}
	time.Sleep(gap)
	runtime.GC()
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	var m0, m1 runtime.MemStats
	var r0, r1 syscall.Rusage
	metrics.Read(s)
	g0 := s[0].Value.Uint64()
	runtime.ReadMemStats(&m0)
	syscall.Getrusage(syscall.RUSAGE_SELF, &r0)
	for end := i + n; i < end; i++ {
		do(i)
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &r1)
	runtime.ReadMemStats(&m1)
	metrics.Read(s)
	cpu := time.Duration(r1.Utime.Nano()+r1.Stime.Nano()-r0.Utime.Nano()-r0.Stime.Nano()) / time.Duration(n)
	res := fmt.Sprintf("mode=%s gap=%v n=%d goroutines/req=%.2f allocs/req=%.1f bytes/req=%.0f cpu/req=%v",
		mode, gap, n, float64(s[0].Value.Uint64()-g0)/float64(n), float64(m1.Mallocs-m0.Mallocs)/float64(n),
		float64(m1.TotalAlloc-m0.TotalAlloc)/float64(n), cpu)
	t.Log(res)
	if dir != "" {
		os.WriteFile(filepath.Join(dir, "done"), []byte(res+"\n"), 0o644)
		for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(filepath.Join(dir, "exit")); err == nil {
				break // the syscalls of what follows are not counted
			}
		}
	}
}
