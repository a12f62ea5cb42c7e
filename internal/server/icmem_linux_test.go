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
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	xproxy "golang.org/x/net/proxy"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
)

// TestIdleInterceptedMemory measures what an idle intercepted
// connection costs the proxy beside an idle spliced TLS tunnel to the
// same origin (issue 29: at most twice as much): N CONNECT tunnels on a
// plain port, the client's TLS inside (HTTP/1.1), one 1 KB request
// made in each, then idle with keep-alive; the live Go heap, the heap
// spans in use and the goroutine stacks per connection, with the
// clients and the HTTPS origin in a child process. The spliced tunnels
// go to 127.0.0.1, which the interception rule (localhost, an injected
// Authorization) does not name; the intercepted ones to localhost. A
// third measure is of spliced tunnels made the same way through the
// https listener (TLS to rustle, the CONNECT inside, the client's TLS
// to the origin inside that): tunnels for which rustle, as when it
// intercepts, holds a TLS session with the client. A fourth is of
// intercepted tunnels made by SOCKS5 CONNECT on a socks5 listener, held
// to the same bounds as the CONNECT ones; a fifth of intercepted tunnels
// made by CONNECT on the https listener, held to the same bound on
// stacks (no goroutine waits for them either) and to the CONNECT ones'
// bound plus 8 KiB, about what an idle spliced tunnel through the https
// listener keeps beyond one on the plain port (the TLS session with the
// client). Those measure once the connection's upstream has gone
// (intercept.upstream_idle); the last two measure intercepted tunnels
// while it is kept, as it is for the first 5 s (its default) of every
// idle time, to an HTTP/1.1 origin and to an HTTP/2 one, each held to a
// bound of its own (see keptLimit).
//
// ICEPT_MEMORY_PROFILE=file writes the heap profiles (file.KIND.base.heap
// before the connections open, file.KIND.heap after), every allocation
// sampled.
func TestIdleInterceptedMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("opens 1,000 TLS connections twice")
	}
	const warm, conns = 50, 1000
	requireOpenFiles(t, 4*(warm+conns)+1000)
	sampleEveryAllocation(t, "ICEPT_MEMORY_PROFILE")
	var spliced, tlsSpliced, intercepted, socksIntercepted, tlsIntercepted idleMem
	t.Run(idleSpliced, func(t *testing.T) { spliced = measureIdleTLS(t, warm, conns, idleSpliced) })
	t.Run(idleTLSSpliced, func(t *testing.T) { tlsSpliced = measureIdleTLS(t, warm, conns, idleTLSSpliced) })
	t.Run(idleIntercepted, func(t *testing.T) { intercepted = measureIdleTLS(t, warm, conns, idleIntercepted) })
	t.Run(idleSOCKSIntercepted, func(t *testing.T) { socksIntercepted = measureIdleTLS(t, warm, conns, idleSOCKSIntercepted) })
	t.Run(idleTLSIntercepted, func(t *testing.T) { tlsIntercepted = measureIdleTLS(t, warm, conns, idleTLSIntercepted) })
	// An intercepted connection whose client chose h2, idle with no
	// stream: no goroutine waits for it either once it is quiet (h2's
	// quietWait), and its reader holds no buffer. Measured: 13.1 to 13.2
	// KiB of live heap, no stack (29.2 KiB and 8.0 KiB of stack, one
	// goroutine blocked in its read with a 16 KiB buffer, before); its
	// bound is the HTTP/1.1 one's plus 4 KiB, the HTTP/2 connection's
	// state (HPACK tables, framer, windows). Under the race detector
	// 22.3 KiB were measured, no stack either (where the 9 KiB more
	// come from was not looked into): its bound is 24 KiB.
	var h2Intercepted idleMem
	t.Run(idleH2Intercepted, func(t *testing.T) { h2Intercepted = measureIdleTLS(t, warm, conns, idleH2Intercepted) })
	if h2Intercepted.total() > 0 {
		h2Limit := 17.0 * 1024
		if proxytest.Race {
			h2Limit = 24 * 1024
		}
		if h2Intercepted.total() > h2Limit {
			t.Errorf("%.1f KiB of live heap and stacks per idle %s connection, want under %.1f KiB", h2Intercepted.total()/1024, idleH2Intercepted, h2Limit/1024)
		}
		if h2Intercepted.stacks > 1024 {
			t.Errorf("%.1f KiB of goroutine stacks per idle %s connection, want under 1 KiB", h2Intercepted.stacks/1024, idleH2Intercepted)
		}
	}
	// An intercepted tunnel that came by a CONNECT stream of HTTP/2 on
	// the https port (its client's TLS to the origin inside the stream,
	// inside the client's TLS to the proxy): no goroutine waits for it
	// either, neither the stream's nor the HTTP/2 connection's, and
	// neither the stream nor crypto/tls holds its client's bytes.
	// Measured: 22.8 KiB of live heap, 0.2 to 0.3 KiB of stacks, no
	// goroutine (34.9 KiB, 0.2 KiB of stacks, under the race detector);
	// before, the stream's worker waited in its read and the
	// connection's reader with it: 27.2 KiB and 12.0 KiB of stacks, two
	// goroutines (49.1 and 24.0 KiB under the race detector). The rest
	// is much as the https-intercepted row's, with the HTTP/2
	// connection (its conn, framer and HPACK state: about 3.2 KiB in
	// the heap profile), its stream (1.5 KiB), and the 2.25 KiB the
	// HTTP/2 reader's records left as the capacity of the outer
	// crypto/tls input buffer.
	t.Run(idleH2StreamIcept, func(t *testing.T) {
		m := measureIdleTLS(t, warm, conns, idleH2StreamIcept)
		limit := h2StreamLimit
		if proxytest.Race {
			limit = h2StreamRaceLimit
		}
		if m.total() > limit {
			t.Errorf("%.1f KiB of live heap and stacks per idle %s connection, want under %.1f KiB", m.total()/1024, idleH2StreamIcept, limit/1024)
		}
		if m.stacks > 1024 {
			t.Errorf("%.1f KiB of goroutine stacks per idle %s connection, want under 1 KiB", m.stacks/1024, idleH2StreamIcept)
		}
	})
	// The kept rows last: their origin connections and the h2 one's two
	// goroutines each outlive the subtest a while.
	for _, kind := range []string{idleKept, idleKeptH2} {
		t.Run(kind, func(t *testing.T) {
			m := measureIdleTLS(t, warm, conns, kind)
			limit := keptLimit
			if kind == idleKeptH2 {
				limit = keptH2Limit
			}
			if proxytest.Race && kind == idleKeptH2 {
				limit += 8 * 1024 // the two goroutines' stacks are twice as large
			}
			if m.total() > limit {
				t.Errorf("%.1f KiB of live heap and stacks per idle %s connection, want under %.1f KiB", m.total()/1024, kind, limit/1024)
			}
		})
	}
	if spliced.total() == 0 || tlsSpliced.total() == 0 || intercepted.total() == 0 || socksIntercepted.total() == 0 || tlsIntercepted.total() == 0 {
		return // a subtest failed
	}
	t.Logf("an idle intercepted connection keeps %.1f KiB of live heap and stacks, %.1fx an idle spliced TLS tunnel's %.1f KiB (heap spans and stacks: %.1f and %.1f KiB)",
		intercepted.total()/1024, intercepted.total()/spliced.total(), spliced.total()/1024,
		(intercepted.heap+intercepted.stacks)/1024, (spliced.heap+spliced.stacks)/1024)
	t.Logf("an idle spliced TLS tunnel through the https listener keeps %.1f KiB of live heap and stacks (heap spans and stacks: %.1f KiB): "+
		"%.1fx an idle spliced TLS tunnel's on the plain port; an idle intercepted connection keeps %.1fx as much",
		tlsSpliced.total()/1024, (tlsSpliced.heap+tlsSpliced.stacks)/1024,
		tlsSpliced.total()/spliced.total(), intercepted.total()/tlsSpliced.total())
	t.Logf("an idle intercepted connection made by CONNECT on the https listener keeps %.1f KiB of live heap and stacks, %.1fx an idle spliced TLS tunnel's through it",
		tlsIntercepted.total()/1024, tlsIntercepted.total()/tlsSpliced.total())
	// limit and stackLimit bound the live heap and stacks per idle
	// intercepted connection, just over what is measured, so as to catch
	// a buffer or a goroutine per connection too many, not to time
	// anything. Measured: 9.1 to 10.1 KiB, 0.2 KiB of it stacks (under
	// the race detector: 9.6 to 10.1 KiB): the connection waits
	// for its client with no goroutine (tunnel.Parker.Notify), and its
	// httpproxy conn has lent its request work area back (0.6 KiB left);
	// the rest is the client's TLS connection (3.5 KiB with its ciphers
	// and the 2 KiB its ClientHello left as its handshake buffer's
	// capacity), the two sessions (288 bytes each) with the contexts of
	// the client's (0.7 KiB: the tunnel's session runs under them), the
	// CONNECT's grant, moved out of its conn (896 bytes), and the wait
	// (Notice, Parker). Before: 11.1 to 11.4 KiB (11.3 under the race
	// detector), with contexts of the tunnel's session's own (1.6 KiB in
	// all), 384-byte sessions and a 1,024-byte grant. An idle spliced
	// TLS tunnel on the plain port: 0.3 KiB; through the https listener: 7.8 KiB. With a goroutine
	// waiting on the socket for each (8 KiB of stack; 16 KiB under the
	// race detector) and both httpproxy conns kept whole (4 KiB each):
	// 27.6 KiB (47.6 KiB under the race detector). An idle intercepted
	// connection made by SOCKS5 CONNECT keeps as much as a CONNECT's,
	// 9.6 to 9.8 KiB (31.8 KiB, 15.8 KiB of it stacks, while the goroutine
	// that read its SOCKS request served it throughout, its socks5 conn
	// and httpproxy conn kept whole). One made by CONNECT on the https
	// port: 16.9 to 17.2 KiB (18.0 to 18.7 before), its
	// client's TLS session with the proxy and its record-at-a-time
	// reader more (42.8 KiB, 16.0 KiB of it stacks, while a goroutine
	// waited for each, its stack grown by the two TLS layers' reads).
	limit, stackLimit := 10.75*1024, 1.0*1024
	if proxytest.Race {
		limit = 11 * 1024
	}
	for _, m := range []struct {
		kind  string
		m     idleMem
		limit float64
	}{
		{idleIntercepted, intercepted, limit},
		{idleSOCKSIntercepted, socksIntercepted, limit},
		{idleTLSIntercepted, tlsIntercepted, limit + 8*1024},
	} {
		if m.m.total() > m.limit {
			t.Errorf("%.1f KiB of live heap and stacks per idle %s connection, want under %.1f KiB", m.m.total()/1024, m.kind, m.limit/1024)
		}
		if m.m.stacks > stackLimit {
			t.Errorf("%.1f KiB of goroutine stacks per idle %s connection, want under %.0f KiB", m.m.stacks/1024, m.kind, stackLimit/1024)
		}
	}
}

// keptLimit and keptH2Limit bound the live heap and stacks of an idle
// intercepted connection whose origin connection is still kept
// (intercept.upstream_idle not yet over), to an HTTP/1.1 and an
// HTTP/2 origin, just over what is measured, to catch a buffer or a
// goroutine too many, not to time anything.
//
// To an HTTP/1.1 origin, measured: 16.3 KiB (17.6 to 18.0 KiB, the
// same under the race detector, before the tunnel's session ran under
// its client's contexts, see TestIdleInterceptedMemory), no goroutine:
// the 10 KiB of one whose upstream
// has gone (see TestIdleInterceptedMemory's limit), and the upstream
// the conn holds apart from its work, which it lends back (httpproxy
// conn.lendWork): its TLS connection (0.9 KiB), its two ciphers (1.7
// KiB), the 3 KiB its handshake left as the capacity of crypto/tls's
// buffers, its socket (0.5 KiB) and the origin.Kept (0.2 KiB); the TLS
// configuration is shared by the connections to the name. Before:
// 21.6 KiB, with the work kept whole (3.3 KiB) and a clone of the TLS
// configuration per connection (0.5 KiB).
//
// To an HTTP/2 origin, measured: 41.2 to 41.4 KiB, 8 KiB of it the
// stacks of two goroutines, x/net/http2's reader of the connection and
// the bridge's (origin.h2Conn), waiting for the next request (49.2 KiB,
// 16 KiB of it stacks, under the race detector); x/net/http2's
// ClientConn with its buffered reader and writer (4 KiB each) is 11.5
// KiB. Before: 97.6 KiB, the bridge holding its reader, writer and body
// buffer (52 KiB) between requests.
const (
	keptLimit   = 17.25 * 1024
	keptH2Limit = 46.0 * 1024
)

// idleMem is what an idle connection keeps, in bytes: the live heap,
// the heap spans in use, the goroutine stacks.
type idleMem struct{ live, heap, stacks float64 }

func (m idleMem) total() float64 { return m.live + m.stacks }

// The kinds of idle connection TestIdleInterceptedMemory measures.
const (
	idleSpliced          = "spliced"               // a CONNECT tunnel on the plain port, spliced
	idleTLSSpliced       = "https-spliced"         // a CONNECT tunnel on the https port, relayed
	idleIntercepted      = "intercepted"           // a CONNECT tunnel on the plain port, intercepted
	idleSOCKSIntercepted = "socks5-intercepted"    // a SOCKS5 CONNECT tunnel on the socks5 port, intercepted
	idleTLSIntercepted   = "https-intercepted"     // a CONNECT tunnel on the https port, intercepted
	idleKept             = "intercepted-kept"      // intercepted, its HTTP/1.1 origin connection still kept
	idleKeptH2           = "intercepted-kept-h2"   // intercepted, its HTTP/2 origin connection still kept
	idleH2Intercepted    = "intercepted-h2"        // a CONNECT tunnel on the plain port, intercepted, h2 inside
	idleH2StreamIcept    = "h2-stream-intercepted" // a CONNECT stream of HTTP/2 on the https port, intercepted
)

// keptKind reports whether the connections of kind keep their origin
// connection while measured.
func keptKind(kind string) bool { return kind == idleKept || kind == idleKeptH2 }

// interceptedKind reports whether the connections of kind are
// intercepted.
func interceptedKind(kind string) bool {
	return kind == idleIntercepted || kind == idleSOCKSIntercepted || kind == idleTLSIntercepted || kind == idleH2Intercepted ||
		kind == idleH2StreamIcept || keptKind(kind)
}

// measureIdleTLS serves a plain listener that intercepts the tunnels to
// localhost, an https listener and a socks5 listener, whose clients and HTTPS origin live
// in a child process, which opens warm connections, then conns more of
// the kind (idleSpliced, idleTLSSpliced, idleIntercepted, ...), and returns
// the growth of memory per connection over the latter.
func measureIdleTLS(t *testing.T, warm, conns int, kind string) idleMem {
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
	// idle for a second: the measure waits for that; the kept kinds'
	// stays throughout, as it does for the 5 s of the default
	// intercept.upstream_idle after each request.
	upIdle := time.Second
	if keptKind(kind) {
		upIdle = time.Hour
	}
	cfg, _ := interceptLocalConfig(t, dir, certPath, upIdle)
	proxyCA, proxyCert, proxyKey, err := tlsconf.WriteSelfSigned(filepath.Join(dir, "proxy"), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Listen = append(cfg.Listen, config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https",
		TLS: config.ListenerTLS{Cert: proxyCert, Key: proxyKey}, ALPN: []string{"h2", "http/1.1"}},
		config.Listener{Name: "socks", Address: "127.0.0.1:0", Protocol: "socks5"})
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Start(); err != nil {
		s.Close()
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { s.Close() })

	child := proxytest.StartChild(t, "^TestIdleInterceptedHelper$",
		"ICEPT_MEMORY_HELPER=1",
		"ICEPT_MEMORY_PROXY="+s.Addrs()[0].Addr.String(),
		"ICEPT_MEMORY_PROXY_TLS="+s.Addrs()[1].Addr.String(),
		"ICEPT_MEMORY_PROXY_SOCKS="+s.Addrs()[2].Addr.String(),
		"ICEPT_MEMORY_PROXY_CA="+proxyCA,
		"ICEPT_MEMORY_KIND="+kind,
		"ICEPT_MEMORY_CERT="+certPath,
		"ICEPT_MEMORY_KEY="+keyPath,
		"ICEPT_MEMORY_CA="+cfg.Intercept.CACert,
		fmt.Sprintf("ICEPT_MEMORY_N=%d", conns),
		fmt.Sprintf("ICEPT_MEMORY_WARM=%d", warm),
	)

	child.Expect("warm")
	goroutines, fds := runtime.NumGoroutine(), openFiles(t)
	m0 := proxytest.SettledMem()
	rss0 := proxytest.VMRSS()
	writeHeapProfile(t, "ICEPT_MEMORY_PROFILE", "."+kind+".base")
	child.Send("go")
	child.Expect("open")
	// Memory settles once what the requests left behind is gone: the
	// goroutines that served them (a spliced tunnel's go to the engine),
	// and an intercepted connection's upstream, closed once its client
	// is idle (UpstreamIdle): one socket per connection is left, the
	// client's (a spliced tunnel's upstream stays, as does a kept
	// kind's).
	want := fds + conns
	if !interceptedKind(kind) || keptKind(kind) {
		want += conns
	}
	deadline := time.Now().Add(20 * time.Second)
	for (runtime.NumGoroutine() > goroutines+conns || openFiles(t) > want+conns/100) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	m1 := proxytest.SettledMem()
	rss1 := proxytest.VMRSS()
	writeHeapProfile(t, "ICEPT_MEMORY_PROFILE", "."+kind)
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
// them until its standard input closes. ICEPT_MEMORY_KIND (see
// measureIdleTLS) intercepted, socks5-intercepted and https-intercepted
// send them to localhost, which the proxy intercepts with leaves of the
// CA in ICEPT_MEMORY_CA, the others to 127.0.0.1; https-spliced and
// https-intercepted through the https listener at
// ICEPT_MEMORY_PROXY_TLS, whose certificate is
// ICEPT_MEMORY_PROXY_CA's; socks5-intercepted through the socks5
// listener at ICEPT_MEMORY_PROXY_SOCKS.
func TestIdleInterceptedHelper(t *testing.T) {
	if os.Getenv("ICEPT_MEMORY_HELPER") != "1" {
		t.Skip("run by TestIdleInterceptedMemory")
	}
	n, warm := envInt(t, "ICEPT_MEMORY_N"), envInt(t, "ICEPT_MEMORY_WARM")
	cert, err := tls.LoadX509KeyPair(os.Getenv("ICEPT_MEMORY_CERT"), os.Getenv("ICEPT_MEMORY_KEY"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	proxyRoots := x509.NewCertPool()
	if b, err := os.ReadFile(os.Getenv("ICEPT_MEMORY_PROXY_CA")); err != nil || !proxyRoots.AppendCertsFromPEM(b) {
		t.Fatalf("read ICEPT_MEMORY_PROXY_CA: %v", err)
	}
	for _, name := range []string{"ICEPT_MEMORY_CERT", "ICEPT_MEMORY_CA"} {
		b, err := os.ReadFile(os.Getenv(name))
		if err != nil || !roots.AppendCertsFromPEM(b) {
			t.Fatalf("read %s: %v", name, err)
		}
	}
	originALPN := []string{"http/1.1"}
	if os.Getenv("ICEPT_MEMORY_KIND") == idleKeptH2 {
		originALPN = []string{"h2", "http/1.1"}
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: originALPN})
	if err != nil {
		t.Fatal(err)
	}
	body := strings.Repeat("x", 1<<10)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	kind, host := os.Getenv("ICEPT_MEMORY_KIND"), "127.0.0.1"
	if interceptedKind(kind) {
		host = "localhost"
	}
	target := net.JoinHostPort(host, port)
	proxy := os.Getenv("ICEPT_MEMORY_PROXY")
	connect := func() net.Conn {
		if kind == idleSOCKSIntercepted {
			d, err := xproxy.SOCKS5("tcp", os.Getenv("ICEPT_MEMORY_PROXY_SOCKS"), nil, &net.Dialer{Timeout: proxytest.DefaultTimeout})
			if err != nil {
				t.Fatal(err)
			}
			c, err := d.Dial("tcp", target)
			if err != nil {
				t.Fatalf("SOCKS5 CONNECT %s: %v", target, err)
			}
			t.Cleanup(func() { c.Close() })
			return c
		}
		if kind != idleTLSSpliced && kind != idleTLSIntercepted && kind != idleH2StreamIcept {
			return proxytest.Connect(t, proxy, target)
		}
		alpn := "http/1.1"
		if kind == idleH2StreamIcept {
			alpn = "h2"
		}
		pc, err := tls.DialWithDialer(&net.Dialer{Timeout: proxytest.DefaultTimeout}, "tcp", os.Getenv("ICEPT_MEMORY_PROXY_TLS"),
			&tls.Config{RootCAs: proxyRoots, ServerName: "localhost", NextProtos: []string{alpn}})
		if err != nil {
			t.Fatalf("TLS to the proxy: %v", err)
		}
		t.Cleanup(func() { pc.Close() })
		if kind == idleH2StreamIcept {
			cc, err := (&http2.Transport{}).NewClientConn(pc)
			if err != nil {
				t.Fatalf("HTTP/2 to the proxy: %v", err)
			}
			c, _ := proxytest.H2Connect(t, cc, target)
			return c
		}
		return proxytest.ConnectOn(t, pc, target)
	}
	open := func(count int) {
		for range count {
			c := connect()
			c.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
			if kind == idleH2Intercepted {
				tc := tls.Client(c, &tls.Config{RootCAs: roots, ServerName: host, NextProtos: []string{"h2"}})
				h, err := proxytest.NewH2Client(tc)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tc.Write(h.Get(1, target, "/1k")); err != nil {
					t.Fatalf("write the request: %v", err)
				}
				status, got, err := h.Answer(1)
				if err != nil || status != "200" || len(got) != len(body) {
					t.Fatalf("response: %s, %d bytes, %v", status, len(got), err)
				}
				c.SetDeadline(time.Time{})
				continue
			}
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

// h2StreamLimit and h2StreamRaceLimit (under the race detector) bound
// the live heap and stacks of an idle intercepted tunnel that came by a
// CONNECT stream of HTTP/2, just over what is measured (see
// TestIdleInterceptedMemory), to catch a buffer or a goroutine per
// connection too many, not to time anything.
const (
	h2StreamLimit     = 25.0 * 1024
	h2StreamRaceLimit = 37.0 * 1024
)
