//go:build linux

package e2e

import (
	"bufio"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// blobSize is the Content-Length of the origin's /blob.
const blobSize = 12345

// slowDelay is how long the origin's /slow sleeps before answering.
const slowDelay = 500 * time.Millisecond

// origin is a local HTTP or HTTPS origin that counts the connections it
// accepts.
type origin struct {
	*httptest.Server
	conns atomic.Int64 // connections accepted

	// slowStarted receives a value when a /slow request reaches the
	// handler.
	slowStarted chan struct{}
}

// echoReply is what the origin's /echo answers, as JSON.
type echoReply struct {
	Method           string
	Length           int64
	SHA256           string
	ContentLength    int64
	TransferEncoding []string
	ProxyAuth        string
	Via              string
}

// newOrigin starts an origin listening on host ("127.0.0.1" or "::1"),
// with TLS when useTLS is set, and closes it when the test ends.
func newOrigin(t testing.TB, host string, useTLS bool) *origin {
	t.Helper()
	o := &origin{slowStarted: make(chan struct{}, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Origin", "e2e")
		io.WriteString(w, "hello from origin\n")
	})
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(blobSize))
		w.Header().Set("X-Origin", "e2e")
		if r.Method != http.MethodHead {
			w.Write(make([]byte, blobSize))
		}
	})
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(echoReply{
			Method:           r.Method,
			Length:           n,
			SHA256:           hex.EncodeToString(h.Sum(nil)),
			ContentLength:    r.ContentLength,
			TransferEncoding: r.TransferEncoding,
			ProxyAuth:        r.Header.Get("Proxy-Authorization"),
			Via:              r.Header.Get("Via"),
		})
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, r *http.Request) {
		select {
		case o.slowStarted <- struct{}{}:
		default:
		}
		time.Sleep(slowDelay)
		io.WriteString(w, "slow done\n")
	})
	srv := httptest.NewUnstartedServer(mux)
	if host != "127.0.0.1" {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatalf("origin listen on %s: %v", host, err)
		}
		srv.Listener.Close()
		srv.Listener = ln
	}
	// Clients that CONNECT and hang up without a TLS handshake are
	// expected here; keep their errors out of the test output.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			o.conns.Add(1)
		}
	}
	if useTLS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	o.Server = srv
	t.Cleanup(srv.Close)
	return o
}

// hostPort returns the origin's host:port.
func (o *origin) hostPort() string {
	return o.Listener.Addr().String()
}

// certFile writes the TLS origin's certificate as PEM and returns the
// file's path, for curl --cacert.
func (o *origin) certFile(t testing.TB) string {
	t.Helper()
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: o.Certificate().Raw})
	return writeFile(t, "origin.pem", string(pemBytes))
}

// proxyURL returns http://[user:pass@]addr for a proxy listening on addr.
func proxyURL(addr, user, pass string) *url.URL {
	u := &url.URL{Scheme: "http", Host: addr}
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	return u
}

// proxyClient is a Go HTTP client that goes through a proxy, counting
// the connections it opens to the proxy.
type proxyClient struct {
	*http.Client
	tr    *http.Transport
	dials atomic.Int64
}

// newProxyClient returns a client using proxy (Transport.Proxy, as
// HTTP_PROXY would set it) and trusting tlsOrigin's certificate when
// tlsOrigin is not nil.
func newProxyClient(t testing.TB, proxy *url.URL, tlsOrigin *origin) *proxyClient {
	t.Helper()
	pc := &proxyClient{}
	d := &net.Dialer{Timeout: 5 * time.Second}
	pc.tr = &http.Transport{
		Proxy: http.ProxyURL(proxy),
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			pc.dials.Add(1)
			return d.DialContext(ctx, network, addr)
		},
		DisableCompression:  true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
	if tlsOrigin != nil {
		pc.tr.TLSClientConfig = tlsConfigFor(tlsOrigin)
	}
	pc.Client = &http.Client{Transport: pc.tr, Timeout: 20 * time.Second}
	t.Cleanup(pc.tr.CloseIdleConnections)
	return pc
}

// fetch does a request and returns the response with its body read.
func (pc *proxyClient) fetch(t testing.TB, method, rawURL string, body io.Reader) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := pc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, rawURL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, rawURL, err)
	}
	return resp, string(b)
}

// rawExchange sends req (a complete request head, and body if any) on a
// new connection to addr and reads one response.
func rawExchange(t testing.TB, addr, method, req string) (*http.Response, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial proxy %s: %v", addr, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatalf("write request: %v", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read response to %q: %v", firstLine(req), err)
	}
	defer resp.Body.Close()
	var body []byte
	if method != http.MethodConnect || resp.StatusCode != http.StatusOK {
		body, err = io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("read response body to %q: %v", firstLine(req), err)
		}
	}
	return resp, string(body)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

// basicAuth returns a Proxy-Authorization header line.
func basicAuth(user, pass string) string {
	r := &http.Request{Header: http.Header{}}
	r.SetBasicAuth(user, pass)
	return "Proxy-Authorization: " + r.Header.Get("Authorization") + "\r\n"
}

// echoServer is a TCP origin that echoes every byte back and closes its
// side when the client closes its write side.
type echoServer struct {
	ln   net.Listener
	wg   sync.WaitGroup
	open atomic.Int64 // connections open now

	mu    sync.Mutex
	conns map[net.Conn]struct{} // guarded by mu
}

// newEchoServer starts an echo server on 127.0.0.1 and stops it when the
// test ends.
func newEchoServer(t testing.TB) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, conns: make(map[net.Conn]struct{})}
	e.wg.Add(1)
	go e.acceptLoop()
	t.Cleanup(e.close)
	return e
}

func (e *echoServer) addr() string { return e.ln.Addr().String() }

func (e *echoServer) acceptLoop() {
	defer e.wg.Done()
	for {
		c, err := e.ln.Accept()
		if err != nil {
			return
		}
		e.mu.Lock()
		e.conns[c] = struct{}{}
		e.mu.Unlock()
		e.open.Add(1)
		e.wg.Add(1)
		go e.serve(c)
	}
}

func (e *echoServer) serve(c net.Conn) {
	defer e.wg.Done()
	io.Copy(c, c)
	c.Close()
	e.mu.Lock()
	delete(e.conns, c)
	e.mu.Unlock()
	e.open.Add(-1)
}

func (e *echoServer) close() {
	e.ln.Close()
	e.mu.Lock()
	for c := range e.conns {
		c.Close()
	}
	e.mu.Unlock()
	e.wg.Wait()
}

// openTunnel dials the proxy at proxyAddr and asks it to CONNECT to
// target, with the given extra header lines. It returns the tunnel
// connection once the proxy answered 200.
func openTunnel(ctx context.Context, proxyAddr, target, extra string) (net.Conn, error) {
	d := net.Dialer{Timeout: 5 * time.Second}
	c, err := d.DialContext(ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, fmt.Errorf("dial proxy %s: %w", proxyAddr, err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, target, extra); err != nil {
		c.Close()
		return nil, fmt.Errorf("write CONNECT: %w", err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("read CONNECT response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %s", target, resp.Status)
	}
	if n := br.Buffered(); n > 0 {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %d unexpected bytes after the 200 head", target, n)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// procFDs returns the number of open file descriptors of pid, skipping
// the test where /proc is not readable.
func procFDs(t testing.TB, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Skipf("cannot count file descriptors: %v", err)
	}
	return len(ents)
}

// procRSS returns the resident set size (VmRSS) of pid in bytes.
func procRSS(t testing.TB, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("cannot read VmRSS: %v", err)
	}
	for line := range strings.Lines(string(b)) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			t.Fatalf("odd VmRSS line %q", line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			t.Fatalf("odd VmRSS line %q: %v", line, err)
		}
		return kb << 10
	}
	t.Fatalf("no VmRSS in /proc/%d/status", pid)
	return 0
}

// mib formats a byte count in MiB.
func mib(n int64) string {
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// tlsConfigFor returns a client TLS configuration trusting o.
func tlsConfigFor(o *origin) *tls.Config {
	return o.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
}
