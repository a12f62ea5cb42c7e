package server

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestIdleInterceptedMemory measures what an idle intercepted
// connection costs the proxy beside an idle spliced TLS tunnel to the
// same origin (issue 29: at most twice as much): N CONNECT tunnels on a
// plain port, the client's TLS inside (HTTP/1.1), one 1 KB request
// made in each, then idle with keep-alive; the live Go heap, the heap
// spans in use and the goroutine stacks per connection, with the
// clients and the HTTPS origin in a child process. The spliced tunnels
// go to 127.0.0.1, which the interception rule (localhost, an injected
// Authorization) does not name; the intercepted ones to localhost.
//
// ICEPT_MEMORY_PROFILE=file writes the heap profiles (file.KIND.base
// before the connections open, file.KIND after), every allocation
// sampled.
func TestIdleInterceptedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 1,000 TLS connections twice")
	}
	const warm, conns = 50, 1000
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < 4*(warm+conns)+1000 {
		t.Skipf("needs %d open files, the limit is %d", 4*(warm+conns)+1000, lim.Cur)
	}
	if os.Getenv("ICEPT_MEMORY_PROFILE") != "" {
		prev := runtime.MemProfileRate
		runtime.MemProfileRate = 1
		t.Cleanup(func() { runtime.MemProfileRate = prev })
	}
	var spliced, intercepted idleMem
	t.Run("spliced", func(t *testing.T) { spliced = measureIdleTLS(t, warm, conns, false) })
	t.Run("intercepted", func(t *testing.T) { intercepted = measureIdleTLS(t, warm, conns, true) })
	if spliced.total() == 0 || intercepted.total() == 0 {
		return // a subtest failed
	}
	t.Logf("an idle intercepted connection keeps %.1f KiB of live heap and stacks, %.1fx an idle spliced TLS tunnel's %.1f KiB (heap spans and stacks: %.1f and %.1f KiB)",
		intercepted.total()/1024, intercepted.total()/spliced.total(), spliced.total()/1024,
		(intercepted.heap+intercepted.stacks)/1024, (spliced.heap+spliced.stacks)/1024)
	// limit and stackLimit bound the live heap and stacks per idle
	// intercepted connection, over what is measured, so as to catch a
	// buffer or a goroutine per connection too many, not to time
	// anything. Measured: 27.6 KiB, 8 KiB of it the stack of the
	// goroutine that serves it, which waits on the socket (an idle
	// spliced tunnel: 0.3 KiB); the rest is the two httpproxy
	// connections (the CONNECT's and the intercepted connection's, 4 KiB
	// each), the client's TLS connection (3.5 KiB with its ciphers and
	// 2.4 KiB of input and handshake buffers) and the two sessions with
	// their contexts (3.5 KiB). When the connection waited in a TLS read
	// holding its 8 KiB read buffer, with its upstream (TLS to the
	// origin, 6 KiB and a socket) kept: 51.2 KiB, 16 KiB of it stack.
	// Under the race detector: 47.3 KiB, 16 KiB of it stack.
	limit, stackLimit := 36.0*1024, 12.0*1024
	if proxytest.Race {
		limit, stackLimit = 64*1024, 24*1024
	}
	if intercepted.total() > limit {
		t.Errorf("%.1f KiB of live heap and stacks per idle intercepted connection, want under %.0f KiB", intercepted.total()/1024, limit/1024)
	}
	if intercepted.stacks > stackLimit {
		t.Errorf("%.1f KiB of goroutine stacks per idle intercepted connection, want under %.0f KiB", intercepted.stacks/1024, stackLimit/1024)
	}
}

// idleMem is what an idle connection keeps, in bytes: the live heap,
// the heap spans in use, the goroutine stacks.
type idleMem struct{ live, heap, stacks float64 }

func (m idleMem) total() float64 { return m.live + m.stacks }

// measureIdleTLS serves a plain listener that intercepts the tunnels to
// localhost, whose clients and HTTPS origin live in a child process,
// which opens warm connections, then conns more, intercepted or
// spliced, and returns the growth of memory per connection over the
// latter.
func measureIdleTLS(t *testing.T, warm, conns int, intercepted bool) idleMem {
	dir := t.TempDir()
	cert, _ := proxytest.SelfSigned(t)
	certPath, keyPath := filepath.Join(dir, "origin.pem"), filepath.Join(dir, "origin-key.pem")
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, proxytest.CertPEM(cert.Leaf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		t.Fatal(err)
	}
	// An intercepted connection's upstream goes once its client is
	// idle for a second: the measure waits for that.
	cfg, _ := interceptLocalConfig(t, dir, certPath, time.Second)
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(); err != nil {
		s.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })

	kind := "spliced"
	if intercepted {
		kind = "intercepted"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestIdleInterceptedHelper$")
	cmd.Env = append(os.Environ(),
		"ICEPT_MEMORY_HELPER=1",
		"ICEPT_MEMORY_PROXY="+s.Addrs()[0].Addr.String(),
		"ICEPT_MEMORY_KIND="+kind,
		"ICEPT_MEMORY_CERT="+certPath,
		"ICEPT_MEMORY_KEY="+keyPath,
		"ICEPT_MEMORY_CA="+cfg.Intercept.CACert,
		fmt.Sprintf("ICEPT_MEMORY_N=%d", conns),
		fmt.Sprintf("ICEPT_MEMORY_WARM=%d", warm),
	)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start helper: %v", err)
	}
	t.Cleanup(func() {
		stdin.Close() // the helper closes its connections and exits
		cmd.Wait()
	})
	lines := bufio.NewScanner(stdout)
	expect := func(want string) {
		t.Helper()
		for lines.Scan() {
			if lines.Text() == want {
				return
			}
		}
		t.Fatalf("helper ended before %q: %v\n%s", want, lines.Err(), stderr.String())
	}
	profile := func(suffix string) {
		t.Helper()
		path := os.Getenv("ICEPT_MEMORY_PROFILE")
		if path == "" {
			return
		}
		f, err := os.Create(path + "." + kind + suffix)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
	}

	expect("warm")
	goroutines, fds := runtime.NumGoroutine(), openFiles(t)
	m0 := proxytest.SettledMem()
	rss0 := proxytest.VMRSS()
	profile(".base")
	io.WriteString(stdin, "go\n")
	expect("open")
	// Memory settles once what the requests left behind is gone: the
	// goroutines that served them (a spliced tunnel's go to the engine),
	// and an intercepted connection's upstream, closed once its client
	// is idle (UpstreamIdle): one socket per connection is left, the
	// client's (a spliced tunnel's upstream stays).
	want := fds + conns
	if !intercepted {
		want += conns
	}
	deadline := time.Now().Add(20 * time.Second)
	for (runtime.NumGoroutine() > goroutines+conns || openFiles(t) > want+conns/100) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	m1 := proxytest.SettledMem()
	rss1 := proxytest.VMRSS()
	profile("")
	n := float64(conns)
	per := func(a, b uint64) float64 { return (float64(b) - float64(a)) / n }
	m := idleMem{live: per(m0.Live, m1.Live), heap: per(m0.Heap, m1.Heap), stacks: per(m0.Stacks, m1.Stacks)}
	t.Logf("an idle %s connection keeps %.1f KiB of live heap, %.1f KiB of heap spans and %.1f KiB of stacks, %.2f goroutines, %.2f sockets (VmRSS %.1f KiB; %d connections, race detector %v)",
		kind, m.live/1024, m.heap/1024, m.stacks/1024, float64(runtime.NumGoroutine()-goroutines)/n, float64(openFiles(t)-fds)/n,
		float64(rss1-rss0)/n/1024, conns, proxytest.Race)
	return m
}

// openFiles returns how many descriptors the process has open.
func openFiles(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestIdleInterceptedHelper is the child process of
// TestIdleInterceptedMemory: an HTTPS origin (HTTP/1.1, 1 KB answers)
// with the certificate and key ICEPT_MEMORY_CERT and ICEPT_MEMORY_KEY
// name, and the clients. It opens ICEPT_MEMORY_WARM connections through
// the proxy at ICEPT_MEMORY_PROXY, each making one request, says "warm",
// waits for a line, opens ICEPT_MEMORY_N more, says "open" and holds
// them until its standard input closes. ICEPT_MEMORY_KIND intercepted
// sends them to localhost, which the proxy intercepts with leaves of the
// CA in ICEPT_MEMORY_CA, spliced to 127.0.0.1.
func TestIdleInterceptedHelper(t *testing.T) {
	if os.Getenv("ICEPT_MEMORY_HELPER") != "1" {
		t.Skip("run by TestIdleInterceptedMemory")
	}
	n, err := strconv.Atoi(os.Getenv("ICEPT_MEMORY_N"))
	if err != nil {
		t.Fatal(err)
	}
	warm, err := strconv.Atoi(os.Getenv("ICEPT_MEMORY_WARM"))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(os.Getenv("ICEPT_MEMORY_CERT"), os.Getenv("ICEPT_MEMORY_KEY"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	for _, name := range []string{"ICEPT_MEMORY_CERT", "ICEPT_MEMORY_CA"} {
		b, err := os.ReadFile(os.Getenv(name))
		if err != nil || !roots.AppendCertsFromPEM(b) {
			t.Fatalf("read %s: %v", name, err)
		}
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("x", 1<<10)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	host := "127.0.0.1"
	if os.Getenv("ICEPT_MEMORY_KIND") == "intercepted" {
		host = "localhost"
	}
	target := net.JoinHostPort(host, port)
	proxy := os.Getenv("ICEPT_MEMORY_PROXY")
	open := func(count int) {
		for range count {
			c := proxytest.Connect(t, proxy, target)
			c.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
			tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: host, NextProtos: []string{"http/1.1"}})
			if _, err := io.WriteString(tc, "GET /1k HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
				t.Fatalf("write the request: %v", err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				t.Fatalf("read the response: %v", err)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil || resp.StatusCode != 200 || len(got) != len(body) {
				t.Fatalf("response: %d, %d bytes, %v", resp.StatusCode, len(got), err)
			}
			c.SetDeadline(time.Time{})
		}
	}
	open(warm)
	fmt.Println("warm")
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	open(n)
	fmt.Println("open")
	io.Copy(io.Discard, in) // until the parent closes stdin
}
