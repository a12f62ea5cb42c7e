package h2

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

func TestMain(m *testing.M) {
	if os.Getenv("H2_MEMORY_HELPER") != "" {
		os.Exit(memoryHelper())
	}
	if os.Getenv("H2_FLOOD_HELPER") != "" {
		os.Exit(floodHelper())
	}
	if os.Getenv("H2_MEMORY_PROFILE") != "" {
		runtime.MemProfileRate = 1
	}
	os.Exit(proxytest.VerifyNoLeaks(m))
}

// testProxy is an HTTP/2 proxy on a loopback TLS listener.
type testProxy struct {
	addr   string
	roots  *x509.CertPool
	caPEM  []byte
	policy *gate.Policy
	srv    *Server
}

// testCert is a self-signed CA and a server certificate for 127.0.0.1.
type testCert struct {
	cert  tls.Certificate
	roots *x509.CertPool
	caPEM []byte
}

func newTestCert(t testing.TB) *testCert {
	t.Helper()
	dir := t.TempDir()
	ca, crt, key, err := tlsconf.WriteSelfSigned(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.LoadX509KeyPair(crt, key)
	if err != nil {
		t.Fatal(err)
	}
	pemCA, err := os.ReadFile(ca)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pemCA)
	return &testCert{cert: cert, roots: roots, caPEM: pemCA}
}

// testConfig returns c with each field left zero set as the
// configuration's defaults set it, and an origin client made from oc
// (the first, if given), whose zero fields get the defaults too.
func testConfig(c Config, oc ...origin.Config) Config {
	set32 := func(v *uint32, def uint32) {
		if *v == 0 {
			*v = def
		}
	}
	set32(&c.MaxConcurrentStreams, 100)
	set32(&c.MaxHeaderListSize, 65536)
	set32(&c.InitialStreamWindow, 256<<10)
	set32(&c.InitialConnWindow, 1<<20)
	set32(&c.MaxFrameSize, 16384)
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setDur(&c.HandshakeTimeout, 30*time.Second) // timeouts.read_header
	setDur(&c.IdleTimeout, 60*time.Second)      // timeouts.idle_client
	setDur(&c.WriteTimeout, 60*time.Second)     // timeouts.write
	setDur(&c.TunnelIdleTimeout, time.Hour)     // timeouts.idle_tunnel
	var o origin.Config
	if len(oc) > 0 {
		o = oc[0]
	}
	if o.Forwarded == "" {
		o.Forwarded = origin.ForwardedNone
	}
	if o.MaxHeaderBytes == 0 {
		o.MaxHeaderBytes = 65536
	}
	setDur(&o.ResponseHeaderTimeout, 60*time.Second) // timeouts.response_header
	setDur(&o.WriteTimeout, c.WriteTimeout)
	c.Origin = mustOrigin(o)
	return c
}

// mustOrigin returns the origin client of o, which must be valid.
func mustOrigin(o origin.Config) *origin.Client {
	client, err := origin.New(o)
	if err != nil {
		panic(err)
	}
	return client
}

// startProxy serves h2 with cfg (testConfig(...) in the tests) under pol
// (nil: a policy without users, rules or limits) on a loopback TLS listener made like rustle's
// https listeners: ALPN h2, TLS over tunnel.RecordConn, and, as
// internal/server does, a gate.Session per connection that is given the
// handshake's client certificate and closed when ServeConn returns. The
// proxy shuts down gracefully at cleanup.
func startProxy(t testing.TB, cfg Config, pol *gate.Policy) *testProxy {
	t.Helper()
	return startProxyTLS(t, cfg, pol, nil)
}

// startProxyTLS is startProxy with client certificates: the listener
// verifies those signed by clientCAs, when a client sends one.
func startProxyTLS(t testing.TB, cfg Config, pol *gate.Policy, clientCAs *x509.CertPool) *testProxy {
	t.Helper()
	tc := newTestCert(t)
	cert, roots := tc.cert, tc.roots
	if pol == nil {
		pol = proxytest.NewPolicy(t, proxytest.PolicyConfig{})
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	if clientCAs != nil {
		conf.ClientCAs, conf.ClientAuth = clientCAs, tls.VerifyClientCertIfGiven
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = struct{}{}
			mu.Unlock()
			wg.Add(1)
			go serveTestConn(ctx, srv, pol, c.(*net.TCPConn), conf, func() {
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
				wg.Done()
			})
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			mu.Lock()
			for c := range conns {
				c.Close()
			}
			mu.Unlock()
			<-done
		}
		srv.Close() // its idle stream workers
	})
	return &testProxy{addr: ln.Addr().String(), roots: roots, caPEM: tc.caPEM, policy: pol, srv: srv}
}

// serveTestConn serves one accepted connection as internal/server does:
// TLS handshake, a session of pol given the client certificate,
// ServeConn, and the session closed after it.
func serveTestConn(ctx context.Context, srv *Server, pol *gate.Policy, c *net.TCPConn, conf *tls.Config, done func()) {
	tc := tls.Server(tunnel.RecordConn(c), conf)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	// On a goroutine of its own, as internal/server does: the serving
	// goroutine's stack does not grow with the handshake's.
	errc := make(chan error, 1)
	go func() { errc <- tc.HandshakeContext(ctx) }()
	if err := <-errc; err != nil {
		c.Close()
		done()
		return
	}
	c.SetDeadline(time.Time{})
	sess := pol.NewSession(ctx, c.RemoteAddr().(*net.TCPAddr).AddrPort(), nil, nil)
	sess.Attach(tc)
	sess.SetTLS(tc.ConnectionState())
	// As internal/server does: this goroutine ends, the connection's
	// own serve it.
	srv.ServeConnThen(tc, sess, func() {
		sess.Close()
		done()
	})
}

// dialTLS opens a TLS connection to the proxy offering h2, and the
// client certificates certs.
func (p *testProxy) dialTLS(t testing.TB, certs ...tls.Certificate) *tls.Conn {
	t.Helper()
	return p.dialTLSFrom(t, nil, certs...)
}

// dialTLSFrom is dialTLS from the local address from (nil: the system's
// choice).
func (p *testProxy) dialTLSFrom(t testing.TB, from net.IP, certs ...tls.Certificate) *tls.Conn {
	t.Helper()
	d := &net.Dialer{}
	if from != nil {
		d.LocalAddr = &net.TCPAddr{IP: from}
	}
	c, err := tls.DialWithDialer(d, "tcp", p.addr, &tls.Config{RootCAs: p.roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}, Certificates: certs})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ConnectionState().NegotiatedProtocol; got != "h2" {
		t.Fatalf("ALPN negotiated %q, want h2", got)
	}
	return c
}

// client returns one HTTP/2 client connection to the proxy, made by Go's
// x/net/http2 Transport. Requests on it are proxy-style: their URL is the
// origin's (:scheme http and the origin's :authority), or CONNECT.
func (p *testProxy) client(t testing.TB, certs ...tls.Certificate) *http2.ClientConn {
	t.Helper()
	tr := &http2.Transport{AllowHTTP: true}
	cc, err := tr.NewClientConn(p.dialTLS(t, certs...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func newRequest(t testing.TB, method, u string, body io.Reader) *http.Request {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func roundTrip(t testing.TB, cc *http2.ClientConn, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	return resp, string(b)
}

// echoOrigin answers every request with its method, path, Host and the
// request body, and sets X-Origin.
func echoOrigin(t testing.TB) *httptest.Server {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Origin", "yes")
		w.Header().Set("X-Proto", r.Proto)
		w.Header().Set("X-Cookie", r.Header.Get("Cookie"))
		w.Header().Set("X-Chunked", fmt.Sprint(len(r.TransferEncoding) > 0))
		w.Header().Set("X-Via", r.Header.Get("Via"))
		w.Header().Set("X-Forwarded-For", r.Header.Get("X-Forwarded-For"))
		fmt.Fprintf(w, "%s %s host=%s body=%s", r.Method, r.URL.RequestURI(), r.Host, body)
	}))
	t.Cleanup(o.Close)
	return o
}

func TestForward(t *testing.T) {
	o := echoOrigin(t)
	pool := proxytest.NewPool(t, dialer.PoolConfig{})
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: pool}))
	cc := p.client(t)
	host := strings.TrimPrefix(o.URL, "http://")

	tests := []struct {
		name    string
		method  string
		path    string
		body    io.Reader
		header  map[string]string
		want    string
		chunked string
		cookie  string
	}{
		{name: "GET", method: "GET", path: "/a?b=c", want: "GET /a?b=c host=" + host + " body="},
		{name: "POST with length", method: "POST", path: "/post", body: strings.NewReader("hello h2"),
			want: "POST /post host=" + host + " body=hello h2", chunked: "false"},
		{name: "POST streamed", method: "POST", path: "/stream", body: io.MultiReader(strings.NewReader("one "), strings.NewReader("two")),
			want: "POST /stream host=" + host + " body=one two", chunked: "true"},
		{name: "cookies joined", method: "GET", path: "/c", header: map[string]string{"Cookie": "a=1; b=2"}, want: "GET /c host=" + host + " body=",
			cookie: "a=1; b=2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := newRequest(t, tt.method, o.URL+tt.path, tt.body)
			if _, ok := tt.body.(*strings.Reader); !ok && tt.body != nil {
				req.ContentLength = -1
			}
			for k, v := range tt.header {
				req.Header.Set(k, v)
			}
			resp, body := roundTrip(t, cc, req)
			if resp.StatusCode != 200 || body != tt.want {
				t.Fatalf("got %d %q, want 200 %q", resp.StatusCode, body, tt.want)
			}
			if resp.Header.Get("X-Origin") != "yes" || resp.Header.Get("X-Proto") != "HTTP/1.1" {
				t.Errorf("response header %v: want X-Origin from an HTTP/1.1 exchange", resp.Header)
			}
			if tt.cookie != "" && resp.Header.Get("X-Cookie") != tt.cookie {
				t.Errorf("origin saw Cookie %q, want %q", resp.Header.Get("X-Cookie"), tt.cookie)
			}
			if tt.chunked != "" && resp.Header.Get("X-Chunked") != tt.chunked {
				t.Errorf("origin saw chunked=%s, want %s", resp.Header.Get("X-Chunked"), tt.chunked)
			}
		})
	}
	if hits, _ := pool.Stats(); hits == 0 {
		t.Errorf("no upstream connection was reused from the pool")
	}
}

// TestPooledClosedByOrigin checks that a request with a body, which
// cannot be sent twice, does not go out on a pooled upstream the origin
// closed while it was idle: it is sent once, on a fresh connection
// (issue 15: uploads met 502 after the origin's keep-alive timeout).
func TestPooledClosedByOrigin(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.ThenClose(proxytest.Respond(200, "ok")))
	pool := proxytest.NewPool(t, dialer.PoolConfig{})
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: pool}))
	cc := p.client(t)
	if resp, _ := roundTrip(t, cc, newRequest(t, "GET", o.URL("/"), nil)); resp.StatusCode != 200 {
		t.Fatalf("first answer %d", resp.StatusCode)
	}
	proxytest.WaitFor(t, "a dead connection in the pool", func() bool {
		return pool.Len() == 1 && o.ClosedConns() == 1
	})
	for _, method := range []string{"POST", "PUT"} {
		resp, _ := roundTrip(t, cc, newRequest(t, method, o.URL("/up"), strings.NewReader("upload")))
		if resp.StatusCode != 200 {
			t.Errorf("%s on a dead pooled upstream: %d, want 200 from a fresh connection", method, resp.StatusCode)
		}
		proxytest.WaitFor(t, "the origin to close", func() bool { return o.ClosedConns() == o.Conns() })
	}
	if n := o.NumRequests(); n != 3 {
		t.Errorf("origin got %d requests, want 3: each sent once", n)
	}
}

// bigOrigin starts an origin that answers GET with size bytes (returned)
// and POST with the number of body bytes it read.
func bigOrigin(t *testing.T, size int) (*httptest.Server, []byte) {
	t.Helper()
	big := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "POST" {
			n, _ := io.Copy(io.Discard, r.Body)
			fmt.Fprint(w, n)
			return
		}
		w.Write(big)
	}))
	t.Cleanup(o.Close)
	return o, big
}

func TestForwardLargeBodies(t *testing.T) {
	const size = 3 << 20
	o, big := bigOrigin(t, size)
	p := startProxy(t, testConfig(Config{}), nil)
	cc := p.client(t)
	_, body := roundTrip(t, cc, newRequest(t, "GET", o.URL+"/big", nil))
	if body != string(big) {
		t.Errorf("GET: got %d bytes, want %d", len(body), len(big))
	}
	_, body = roundTrip(t, cc, newRequest(t, "POST", o.URL+"/up", bytes.NewReader(big)))
	if body != fmt.Sprint(size) {
		t.Errorf("POST: origin read %s bytes, want %d", body, size)
	}
}

func TestConnect(t *testing.T) {
	echo := proxytest.NewEcho(t)
	p := startProxy(t, testConfig(Config{}), nil)
	cc := p.client(t)
	pr, pw := io.Pipe()
	req := newRequest(t, "CONNECT", "", pr)
	req.URL = &url.URL{Host: echo.Addr}
	req.Host = echo.Addr
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: status %d", resp.StatusCode)
	}
	for i := 0; i < 3; i++ {
		msg := fmt.Sprintf("ping %d", i)
		if _, err := io.WriteString(pw, msg); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, len(msg))
		if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != msg {
			t.Fatalf("echo %d: got %q, %v", i, buf, err)
		}
	}
	// Half-close: END_STREAM reaches the echo server as a FIN, and its
	// FIN comes back as END_STREAM.
	big := bytes.Repeat([]byte("x"), 1<<20)
	go func() {
		pw.Write(big)
		pw.Close()
	}()
	got, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("after half-close: got %d bytes, %v; want %d", len(got), err, len(big))
	}
}

func TestAuthPerStream(t *testing.T) {
	o := echoOrigin(t)
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{Users: map[string]string{"u": "p"}}))
	cc := p.client(t)

	bad := newRequest(t, "GET", o.URL+"/nope", nil)
	resp, body := roundTrip(t, cc, bad)
	if ch := p.policy.Challenge(); resp.StatusCode != 407 || ch == "" || resp.Header.Get("Proxy-Authenticate") != ch {
		t.Fatalf("without credentials: %d %v %q, want 407 with a challenge", resp.StatusCode, resp.Header, body)
	}
	good := newRequest(t, "GET", o.URL+"/yes", nil)
	good.Header.Set("Proxy-Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("u:p")))
	resp, body = roundTrip(t, cc, good)
	if resp.StatusCode != 200 || !strings.HasPrefix(body, "GET /yes") {
		t.Fatalf("with credentials on the same connection: %d %q", resp.StatusCode, body)
	}
	if got := o.Config.Handler; got == nil {
		t.Fatal("no origin")
	}
	// A CONNECT without credentials is refused too, and the connection
	// still serves.
	req := newRequest(t, "CONNECT", "", nil)
	req.URL = &url.URL{Host: "127.0.0.1:1"}
	req.Host = "127.0.0.1:1"
	resp, _ = roundTrip(t, cc, req)
	if resp.StatusCode != 407 {
		t.Fatalf("CONNECT without credentials: %d, want 407", resp.StatusCode)
	}
	resp, _ = roundTrip(t, cc, good.Clone(good.Context()))
	if resp.StatusCode != 200 {
		t.Fatalf("after the 407s: %d", resp.StatusCode)
	}
}

func TestLocalAnswers(t *testing.T) {
	p := startProxy(t, testConfig(Config{}), nil)
	cc := p.client(t)
	tests := []struct {
		name string
		url  string
		want int
	}{
		{"https scheme", "https://example.test/", 400},
		{"the proxy itself", "http://" + p.addr + "/", 400},
		{"unreachable origin", "http://" + proxytest.ClosedPort(t) + "/", 502},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := roundTrip(t, cc, newRequest(t, "GET", tt.url, nil))
			if resp.StatusCode != tt.want || !strings.HasPrefix(body, "rustle: ") {
				t.Errorf("got %d %q, want %d from rustle", resp.StatusCode, body, tt.want)
			}
		})
	}
}

func TestWebSocket(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"echo"}})
		if err != nil {
			return
		}
		defer ws.CloseNow()
		for {
			typ, msg, err := ws.Read(r.Context())
			if err != nil {
				return
			}
			if err := ws.Write(r.Context(), typ, msg); err != nil {
				return
			}
		}
	}))
	t.Cleanup(o.Close)
	p := startProxy(t, testConfig(Config{}), nil)
	cc := p.client(t)
	pr, pw := io.Pipe()
	defer pw.Close()
	req := newRequest(t, "CONNECT", o.URL+"/chat", pr)
	req.Header.Set(":protocol", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Protocol", "echo")
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Sec-WebSocket-Protocol") != "echo" {
		t.Fatalf("extended CONNECT: %d %v, want 200 with the subprotocol", resp.StatusCode, resp.Header)
	}
	for _, msg := range []string{"hello", strings.Repeat("long ", 100)} {
		if _, err := pw.Write(wsFrame(msg)); err != nil {
			t.Fatal(err)
		}
		got, err := readWSFrame(resp.Body)
		if err != nil || got != msg {
			t.Fatalf("echo: got %q, %v; want %q", got, err, msg)
		}
	}
}

// wsFrame is a masked WebSocket text frame (RFC 6455 §5.2), as a client
// sends.
func wsFrame(msg string) []byte {
	b := []byte{0x81}
	switch n := len(msg); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	default:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	}
	mask := [4]byte{1, 2, 3, 4}
	b = append(b, mask[:]...)
	for i := 0; i < len(msg); i++ {
		b = append(b, msg[i]^mask[i%4])
	}
	return b
}

// readWSFrame reads one unmasked text frame, as a server sends.
func readWSFrame(r io.Reader) (string, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return "", err
	}
	if h[0] != 0x81 || h[1]&0x80 != 0 {
		return "", fmt.Errorf("unexpected frame header % x", h)
	}
	n := int(h[1] & 0x7f)
	if n == 126 {
		var ext [2]byte
		if _, err := io.ReadFull(r, ext[:]); err != nil {
			return "", err
		}
		n = int(ext[0])<<8 | int(ext[1])
	}
	p := make([]byte, n)
	_, err := io.ReadFull(r, p)
	return string(p), err
}

// rawClient speaks HTTP/2 frame by frame, for what Go's client will not
// do (exceeding the stream limit).
type rawClient struct {
	t   testing.TB
	c   *tls.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
}

func (p *testProxy) raw(t testing.TB) *rawClient {
	t.Helper()
	return p.rawFrom(t, nil)
}

// ownClients numbers the connections of rawOwn.
var ownClients atomic.Uint32

// rawOwn is raw from a loopback address no other connection of the test
// process used (127.4.x.y): the access log records of its client
// address and port are its own, where the kernel could give a later
// connection from 127.0.0.1 the port of one that has closed.
func (p *testProxy) rawOwn(t testing.TB) *rawClient {
	t.Helper()
	n := ownClients.Add(1)
	return p.rawFrom(t, net.IPv4(127, 4, byte(n>>8), byte(n)))
}

// rawFrom is raw from the local address from (nil: the system's choice).
func (p *testProxy) rawFrom(t testing.TB, from net.IP) *rawClient {
	t.Helper()
	c := p.dialTLSFrom(t, from)
	t.Cleanup(func() { c.Close() })
	rc := &rawClient{t: t, c: c, fr: http2.NewFramer(c, c)}
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rc.enc = hpack.NewEncoder(&rc.buf)
	io.WriteString(c, http2.ClientPreface)
	rc.fr.WriteSettings()
	return rc
}

func (rc *rawClient) headers(id uint32, end bool, fields ...string) {
	rc.t.Helper()
	rc.buf.Reset()
	for i := 0; i+1 < len(fields); i += 2 {
		rc.enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := rc.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.buf.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		rc.t.Fatal(err)
	}
}

// next returns the next frame other than SETTINGS, WINDOW_UPDATE and PING.
func (rc *rawClient) next() http2.Frame {
	rc.t.Helper()
	rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := rc.fr.ReadFrame()
		if err != nil {
			rc.t.Fatalf("read frame: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				rc.fr.WriteSettingsAck()
			}
			continue
		case *http2.WindowUpdateFrame, *http2.PingFrame:
			continue
		}
		return f
	}
}

func TestRefusedStream(t *testing.T) {
	echo := proxytest.NewEcho(t)
	p := startProxy(t, testConfig(Config{MaxConcurrentStreams: 2}), nil)
	rc := p.raw(t)
	// Two tunnels stay open; the third stream is refused, and once one
	// tunnel is reset a new stream is accepted.
	for _, id := range []uint32{1, 3, 5} {
		rc.headers(id, false, ":method", "CONNECT", ":authority", echo.Addr)
	}
	statuses := map[uint32]string{}
	var refused uint32
	for len(statuses) < 2 || refused == 0 {
		switch f := rc.next().(type) {
		case *http2.MetaHeadersFrame:
			statuses[f.StreamID] = f.PseudoValue("status")
		case *http2.RSTStreamFrame:
			if f.ErrCode != http2.ErrCodeRefusedStream {
				t.Fatalf("RST_STREAM %v on stream %d, want REFUSED_STREAM", f.ErrCode, f.StreamID)
			}
			refused = f.StreamID
		default:
			t.Fatalf("unexpected %v", f)
		}
	}
	if refused != 5 || statuses[1] != "200" || statuses[3] != "200" {
		t.Fatalf("statuses %v, refused %d: want 200 on 1 and 3, stream 5 refused", statuses, refused)
	}
	rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	rc.headers(7, false, ":method", "CONNECT", ":authority", echo.Addr)
	for {
		f := rc.next()
		if h, ok := f.(*http2.MetaHeadersFrame); ok && h.StreamID == 7 {
			if s := h.PseudoValue("status"); s != "200" {
				t.Fatalf("stream 7: status %s", s)
			}
			break
		}
		if r, ok := f.(*http2.RSTStreamFrame); ok {
			t.Fatalf("stream %d reset: %v", r.StreamID, r.ErrCode)
		}
	}
}

func TestSlowStreamDoesNotStallOthers(t *testing.T) {
	// The client never reads tunnel 1 (its window fills) and never
	// empties the upstream of tunnel 3 (its upstream stalls); another
	// stream still gets through.
	stall := make(chan struct{})
	t.Cleanup(func() { close(stall) })
	stuck, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stuck.Close() })
	go func() {
		for {
			c, err := stuck.Accept()
			if err != nil {
				return
			}
			go func() { <-stall; c.Close() }() // accepts, never reads
		}
	}()
	o := echoOrigin(t)
	flood := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("z"), 4<<20))
	}))
	t.Cleanup(flood.Close)
	p := startProxy(t, testConfig(Config{InitialStreamWindow: 65535, InitialConnWindow: 256 << 10}), nil)
	cc := p.client(t)

	// Stream 1: a big download nobody reads.
	slow, err := cc.RoundTrip(newRequest(t, "GET", flood.URL+"/", nil))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Body.Close()
	// Stream 3: an upload into a socket nobody reads.
	pr, pw := io.Pipe()
	defer pw.Close()
	req := newRequest(t, "CONNECT", "", pr)
	req.URL = &url.URL{Host: stuck.Addr().String()}
	req.Host = stuck.Addr().String()
	up, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Body.Close()
	written := make(chan struct{})
	go func() {
		defer close(written)
		chunk := bytes.Repeat([]byte("u"), 64<<10)
		for i := 0; i < 200; i++ { // far more than the socket buffers and the stream window
			if _, err := pw.Write(chunk); err != nil {
				return
			}
		}
	}()
	time.Sleep(200 * time.Millisecond)
	for i := 0; i < 3; i++ {
		resp, body := roundTrip(t, cc, newRequest(t, "GET", o.URL+fmt.Sprintf("/other%d", i), nil))
		if resp.StatusCode != 200 || !strings.HasPrefix(body, "GET /other") {
			t.Fatalf("sibling stream: %d %q", resp.StatusCode, body)
		}
	}
	select {
	case <-written:
		t.Errorf("the stalled upload was taken in full; flow control did not hold it back")
	default:
	}
}

func TestShutdownSendsGoAway(t *testing.T) {
	echo := proxytest.NewEcho(t)
	cert := newTestCert(t).cert
	srv, err := New(testConfig(Config{}))
	if err != nil {
		t.Fatal(err)
	}
	pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan struct{})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(served)
			return
		}
		serveTestConn(ctx, srv, pol, c.(*net.TCPConn), &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}, func() { close(served) })
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc := &rawClient{t: t, c: c, fr: http2.NewFramer(c, c)}
	rc.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	rc.enc = hpack.NewEncoder(&rc.buf)
	io.WriteString(c, http2.ClientPreface)
	rc.fr.WriteSettings()
	rc.headers(1, false, ":method", "CONNECT", ":authority", echo.Addr)
	if h, ok := rc.next().(*http2.MetaHeadersFrame); !ok || h.PseudoValue("status") != "200" {
		t.Fatalf("CONNECT not answered 200")
	}
	cancel()
	g, ok := rc.next().(*http2.GoAwayFrame)
	if !ok || g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
		t.Fatalf("after shutdown: want GOAWAY(NO_ERROR, last stream 1), got %v", g)
	}
	// The tunnel in progress still works; closing it ends the
	// connection.
	rc.fr.WriteData(1, false, []byte("still"))
	d, ok := rc.next().(*http2.DataFrame)
	if !ok || string(d.Data()) != "still" {
		t.Fatalf("tunnel after GOAWAY: got %v", d)
	}
	rc.fr.WriteData(1, true, nil)
	for {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := rc.fr.ReadFrame()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("want the connection closed after the last stream, got %v", err)
		}
		_ = f
	}
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("ServeConn did not return after draining")
	}
}

func TestAccessPolicy(t *testing.T) {
	o := echoOrigin(t)
	echo := proxytest.NewEcho(t)
	_, echoPort, _ := net.SplitHostPort(echo.Addr)
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Default: acl.Allow,
		Rules: []acl.Rule{
			{Name: "no-connect-to-echo", Action: acl.Deny, Ports: []string{echoPort}, Protocols: []string{"connect"}},
			{Name: "no-secret", Action: acl.Deny, Methods: []string{"DELETE"}},
		},
	}))
	cc := p.client(t)
	resp, _ := roundTrip(t, cc, newRequest(t, "DELETE", o.URL+"/x", nil))
	if resp.StatusCode != 403 {
		t.Errorf("DELETE denied by a rule: %d, want 403", resp.StatusCode)
	}
	resp, _ = roundTrip(t, cc, newRequest(t, "GET", o.URL+"/x", nil))
	if resp.StatusCode != 200 {
		t.Errorf("GET allowed by default: %d, want 200", resp.StatusCode)
	}
	req := newRequest(t, "CONNECT", "", nil)
	req.URL = &url.URL{Host: echo.Addr}
	req.Host = echo.Addr
	resp, _ = roundTrip(t, cc, req)
	if resp.StatusCode != 403 {
		t.Errorf("CONNECT denied by a rule: %d, want 403", resp.StatusCode)
	}
}

// TestTrailers checks that an origin's response trailers reach the
// client, and that the client's request trailers are dropped.
func TestTrailers(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Trailer", "X-Resp-Trailer")
		fmt.Fprintf(w, "got %s with trailer %q", body, r.Trailer.Get("X-Req-Trailer"))
		w.(http.Flusher).Flush()
		w.Header().Set("X-Resp-Trailer", "from origin")
	}))
	t.Cleanup(o.Close)
	p := startProxy(t, testConfig(Config{}), nil)
	cc := p.client(t)
	req := newRequest(t, "POST", o.URL+"/t", io.MultiReader(strings.NewReader("abc")))
	req.ContentLength = -1
	req.Trailer = http.Header{"X-Req-Trailer": {"from client"}}
	resp, body := roundTrip(t, cc, req)
	// The client's trailers are dropped, as on HTTP/1.1.
	if resp.StatusCode != 200 || body != `got abc with trailer ""` {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if got := resp.Trailer.Get("X-Resp-Trailer"); got != "from origin" {
		t.Errorf("response trailer %q, want %q (trailers %v)", got, "from origin", resp.Trailer)
	}
}

func TestHeaderListTooLarge(t *testing.T) {
	p := startProxy(t, testConfig(Config{MaxHeaderListSize: 1024}), nil)
	rc := p.raw(t)
	big := strings.Repeat("b", 500) // each field fits; together they do not
	rc.headers(1, true, ":method", "GET", ":scheme", "http", ":authority", "example.test", ":path", "/",
		"x-a", big, "x-b", big, "x-c", big)
	h, ok := rc.next().(*http2.MetaHeadersFrame)
	if !ok || h.PseudoValue("status") != "431" {
		t.Fatalf("want a 431 answer, got %v", h)
	}
}

func TestIdleConnectionClosed(t *testing.T) {
	p := startProxy(t, testConfig(Config{IdleTimeout: 200 * time.Millisecond}), nil)
	rc := p.raw(t)
	g, ok := rc.next().(*http2.GoAwayFrame)
	if !ok || g.ErrCode != http2.ErrCodeNo {
		t.Fatalf("idle connection: want GOAWAY(NO_ERROR), got %v", g)
	}
	rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := rc.fr.ReadFrame(); err == nil {
		t.Fatal("connection still open after GOAWAY")
	}
}

func TestResetClosesUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	closed := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err = io.Copy(io.Discard, c)
		closed <- err
	}()
	p := startProxy(t, testConfig(Config{}), nil)
	rc := p.raw(t)
	rc.headers(1, false, ":method", "CONNECT", ":authority", ln.Addr().String())
	if h, ok := rc.next().(*http2.MetaHeadersFrame); !ok || h.PseudoValue("status") != "200" {
		t.Fatalf("CONNECT: got %v", h)
	}
	rc.fr.WriteData(1, false, []byte("some bytes"))
	rc.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	select {
	case err := <-closed:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("upstream not closed after RST_STREAM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("upstream not closed after RST_STREAM")
	}
	// The connection serves on.
	rc.fr.WritePing(false, [8]byte{7})
	for {
		rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		f, err := rc.fr.ReadFrame()
		if err != nil {
			t.Fatal(err)
		}
		if pf, ok := f.(*http2.PingFrame); ok && pf.IsAck() {
			break
		}
	}
}

func TestWebSocketRefused(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no sockets here", http.StatusForbidden)
	}))
	t.Cleanup(o.Close)
	p := startProxy(t, testConfig(Config{}), nil)
	cc := p.client(t)
	req := newRequest(t, "CONNECT", o.URL+"/ws", nil)
	req.Header.Set(":protocol", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	resp, body := roundTrip(t, cc, req)
	if resp.StatusCode != 403 || !strings.Contains(body, "no sockets here") {
		t.Fatalf("refused upgrade: %d %q, want the origin's 403", resp.StatusCode, body)
	}
}

func TestViaAndForwarded(t *testing.T) {
	o := echoOrigin(t)
	p := startProxy(t, testConfig(Config{}, origin.Config{Via: true, Forwarded: origin.ForwardedXFF}), nil)
	cc := p.client(t)
	req := newRequest(t, "GET", o.URL+"/v", nil)
	req.Header.Set("X-Forwarded-For", "192.0.2.7")
	resp, _ := roundTrip(t, cc, req)
	if got := resp.Header.Get("X-Via"); got != "2 rustle" {
		t.Errorf("origin got Via %q, want %q", got, "2 rustle")
	}
	if got := resp.Header.Get("X-Forwarded-For"); got != "192.0.2.7, 127.0.0.1" {
		t.Errorf("origin got X-Forwarded-For %q, want the client's value and its address", got)
	}
	if got := resp.Header.Values("Via"); len(got) != 1 || got[0] != "1.1 rustle" {
		t.Errorf("client got Via %q, want [1.1 rustle]", got)
	}
}

// TestAccessLogAndMetrics checks the JSON access log records and the
// counts of a forwarded GET, a 407, a 403 and a CONNECT tunnel over h2.
func TestAccessLogAndMetrics(t *testing.T) {
	var out proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &out)
	m := metrics.New(metrics.Config{PerUser: true, MaxUsers: 10})
	o := echoOrigin(t)
	echo := proxytest.NewEcho(t)
	creds := basic("u")
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users:    map[string]string{"u": "pw"},
		Default:  acl.Allow,
		Rules:    []acl.Rule{{Name: "no-delete", Action: acl.Deny, Methods: []string{"DELETE"}}},
		Listener: "tls", Metrics: m.Listener("tls", "https"), UserMetrics: m.User, AccessLog: al,
	}))
	cc := p.client(t)

	get := newRequest(t, "GET", o.URL+"/a?b=1", nil)
	get.Header.Set("Proxy-Authorization", creds)
	if resp, body := roundTrip(t, cc, get); resp.StatusCode != 200 {
		t.Fatalf("GET: %d %q", resp.StatusCode, body)
	}
	if resp, _ := roundTrip(t, cc, newRequest(t, "GET", o.URL+"/noauth", nil)); resp.StatusCode != 407 {
		t.Fatalf("GET without credentials: %d, want 407", resp.StatusCode)
	}
	del := newRequest(t, "DELETE", o.URL+"/x", nil)
	del.Header.Set("Proxy-Authorization", creds)
	if resp, _ := roundTrip(t, cc, del); resp.StatusCode != 403 {
		t.Fatalf("DELETE: %d, want 403", resp.StatusCode)
	}

	pr, pw := io.Pipe()
	req := newRequest(t, "CONNECT", "", pr)
	req.URL, req.Host = &url.URL{Host: echo.Addr}, echo.Addr
	req.Header.Set("Proxy-Authorization", creds)
	resp, err := cc.RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	io.WriteString(pw, "ping!")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "ping!" {
		t.Fatalf("tunnel echo: %q %v", buf, err)
	}
	pw.Close() // END_STREAM: the echo server closes, and the tunnel ends
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Fatalf("after END_STREAM: %q %v", rest, err)
	}
	resp.Body.Close()
	proxytest.WaitFor(t, "the tunnel's access log line", func() bool {
		return strings.Count(out.String(), "\n") >= 4
	})

	// A stream is logged when its worker is done, which may be after the
	// client has its answer and sends the next request: find the records
	// by method and status.
	recs := make(map[string]map[string]any)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	for _, line := range lines {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		recs[fmt.Sprint(r["method"], " ", r["status"])] = r
	}
	if len(lines) != 4 || len(recs) != 4 {
		t.Fatalf("%d access log lines, want 4 different ones:\n%s", len(lines), out.String())
	}
	echoPrefix := "127.0.0.1:"
	checks := []struct {
		name string
		rec  map[string]any
		want map[string]any
	}{
		{"GET", recs["GET 200"], map[string]any{"protocol": "h2", "listener": "tls", "user": "u", "method": "GET",
			"target": o.URL + "/a?b=1", "status": float64(200), "upstream": strings.TrimPrefix(o.URL, "http://"), "bytes_up": float64(0)}},
		{"407", recs["GET 407"], map[string]any{"protocol": "h2", "user": "", "method": "GET", "target": o.URL + "/noauth",
			"status": float64(407), "upstream": "", "reason": "auth-missing"}},
		{"403", recs["DELETE 403"], map[string]any{"protocol": "h2", "user": "u", "method": "DELETE", "status": float64(403),
			"rule": "no-delete", "upstream": ""}},
		{"CONNECT", recs["CONNECT 200"], map[string]any{"protocol": "h2", "user": "u", "method": "CONNECT", "target": echo.Addr,
			"status": float64(200), "upstream": echo.Addr, "bytes_up": float64(5), "bytes_down": float64(5)}},
	}
	for _, c := range checks {
		for k, v := range c.want {
			if c.rec[k] != v {
				t.Errorf("%s record: %s = %v, want %v (record %v)", c.name, k, c.rec[k], v, c.rec)
			}
		}
		if cl, _ := c.rec["client"].(string); !strings.HasPrefix(cl, echoPrefix) {
			t.Errorf("%s record: client = %q, want a loopback address", c.name, cl)
		}
	}
	if n, _ := recs["GET 200"]["bytes_down"].(float64); n < 10 {
		t.Errorf("GET record: bytes_down = %v, want the response body", recs["GET 200"]["bytes_down"])
	}

	for _, c := range []struct {
		name string
		want float64
	}{
		{"rustle_requests_total", 4}, // GET, 407, 403, the tunnel's 200
		{"rustle_tunnels_total", 1},
		{"rustle_auth_challenges_total", 1}, // the 407 without credentials
		{"rustle_auth_failures_total", 0},
		{"rustle_acl_denials_total", 1},
		{"rustle_upstream_dial_duration_seconds", 2}, // the GET's and the CONNECT's
		{"rustle_upstream_first_byte_seconds", 1},
		{"rustle_user_requests_total", 3}, // the GET, the DELETE and the tunnel
	} {
		if got := proxytest.Metric(t, m, c.name); got != c.want {
			t.Errorf("%s = %v, want %v", c.name, got, c.want)
		}
	}
	if got := proxytest.Metric(t, m, "rustle_bytes_total"); got < 10+10 {
		t.Errorf("rustle_bytes_total = %v, want the GET's body and the tunnel's 10 bytes", got)
	}
}

// userFree reports whether user may be counted once more by lim: with
// MaxConnsPerUser 1, whether no connection or stream holds a count for
// it. It is asked while no request is in flight.
func userFree(lim *limits.Limiter, user string) bool {
	if !lim.UserConn(user) {
		return false
	}
	lim.UserDone(user)
	return true
}

// waitFree waits until user's counts are all given back.
func waitFree(t *testing.T, lim *limits.Limiter, user string) {
	t.Helper()
	proxytest.WaitFor(t, user+"'s connection count given back", func() bool { return userFree(lim, user) })
}

// basic returns the Proxy-Authorization value of user with password "pw".
func basic(user string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":pw"))
}

func TestLimiterAuthCoolDown(t *testing.T) {
	echo := proxytest.NewEcho(t)
	o := echoOrigin(t)
	host := strings.TrimPrefix(o.URL, "http://")
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users:  map[string]string{"u": "pw"},
		Limits: &limits.Config{AuthFailures: 3, AuthCooldown: 1500 * time.Millisecond, MaxConnsPerUser: 1},
	}))
	lim := p.policy.Limiter
	rc := p.raw(t)
	// A tunnel is open before the cool-down starts, and outlives it.
	rc.headers(1, false, ":method", "CONNECT", ":authority", echo.Addr, "proxy-authorization", basic("u"))
	if h, ok := rc.next().(*http2.MetaHeadersFrame); !ok || h.StreamID != 1 || h.PseudoValue("status") != "200" {
		t.Fatalf("CONNECT: want 200 on stream 1")
	}
	get := func(id uint32, auth ...string) {
		rc.headers(id, true, append([]string{":method", "GET", ":scheme", "http", ":authority", host, ":path", "/"}, auth...)...)
	}
	// answer reads frames up to the HEADERS answering id, and returns it
	// and a GOAWAY seen meanwhile.
	answer := func(id uint32) (h *http2.MetaHeadersFrame, g *http2.GoAwayFrame) {
		t.Helper()
		for {
			switch f := rc.next().(type) {
			case *http2.MetaHeadersFrame:
				if f.StreamID == id {
					return f, g
				}
			case *http2.GoAwayFrame:
				g = f
			case *http2.RSTStreamFrame:
				t.Fatalf("stream %d reset: %v", f.StreamID, f.ErrCode)
			}
		}
	}
	// A stream without credentials is a 407 that does not count.
	get(3)
	if h, _ := answer(3); h.PseudoValue("status") != "407" {
		t.Fatalf("no credentials: %s, want 407", h.PseudoValue("status"))
	}
	for _, id := range []uint32{5, 7} {
		get(id, "proxy-authorization", basic("bad"))
		if h, g := answer(id); h.PseudoValue("status") != "407" || g != nil {
			t.Fatalf("failure on stream %d: %s, GOAWAY %v; want 407 and no GOAWAY", id, h.PseudoValue("status"), g)
		}
	}
	client := netip.MustParseAddr("127.0.0.1")
	if d, dn := lim.CoolingDown(client), lim.CoolingDownAs(client, []byte("bad")); d != 0 || dn != 0 {
		t.Fatalf("cooling down after two failures (%v, %v); the missing credentials counted", d, dn)
	}
	get(9, "proxy-authorization", basic("bad"))
	h, g := answer(9)
	if s, ra := h.PseudoValue("status"), fieldValue(h, "retry-after"); s != "429" || ra != "2" {
		t.Fatalf("third failure: status %s, retry-after %q; want 429, 2", s, ra)
	}
	for g == nil {
		// The 429's body may come first.
		g, _ = rc.next().(*http2.GoAwayFrame)
	}
	if g.ErrCode != http2.ErrCodeEnhanceYourCalm || g.LastStreamID != 9 {
		t.Fatalf("GOAWAY %v, last stream %d; want ENHANCE_YOUR_CALM, 9", g.ErrCode, g.LastStreamID)
	}
	if d := lim.CoolingDownAs(client, []byte("bad")); d <= 0 {
		t.Fatal("the client is not cooling down after three failures")
	}
	// The tunnel still works; once it ends, the connection closes.
	rc.fr.WriteData(1, false, []byte("still"))
	for {
		if d, ok := rc.next().(*http2.DataFrame); ok && d.StreamID == 1 {
			if string(d.Data()) != "still" {
				t.Fatalf("tunnel after GOAWAY: %q", d.Data())
			}
			break
		}
	}
	if userFree(lim, "u") {
		t.Fatal("u is not counted while its tunnel's connection is open")
	}
	rc.fr.WriteData(1, true, nil)
	for {
		rc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := rc.fr.ReadFrame(); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("want the connection closed after the tunnel, got %v", err)
			}
			break
		}
	}
	waitFree(t, lim, "u")
}

// fieldValue returns the value of h's field name.
func fieldValue(h *http2.MetaHeadersFrame, name string) string {
	for _, f := range h.Fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

func TestLimiterUserConns(t *testing.T) {
	echo := proxytest.NewEcho(t)
	o := echoOrigin(t)
	var log proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &log)
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users:     map[string]string{"u": "pw", "v": "pw"},
		Limits:    &limits.Config{MaxConnsPerUser: 1},
		AccessLog: al,
	}))
	lim := p.policy.Limiter
	get := func(cc *http2.ClientConn, user string) int {
		t.Helper()
		req := newRequest(t, "GET", o.URL+"/", nil)
		req.Header.Set("Proxy-Authorization", basic(user))
		resp, _ := roundTrip(t, cc, req)
		return resp.StatusCode
	}
	cc1, cc2 := p.client(t), p.client(t)
	// u is cc1's user for its life; v, another user on cc1, only for
	// its stream's.
	if s := get(cc1, "u"); s != 200 {
		t.Fatalf("u on cc1: %d", s)
	}
	if s := get(cc1, "v"); s != 200 {
		t.Fatalf("v on cc1: %d", s)
	}
	waitFree(t, lim, "v")
	if s := get(cc1, "u"); s != 200 {
		t.Fatalf("u again on cc1: %d", s)
	}
	if userFree(lim, "u") {
		t.Fatal("u is not counted for cc1")
	}
	// u is at its limit on another connection.
	if s := get(cc2, "u"); s != 429 {
		t.Fatalf("u on cc2: %d, want 429", s)
	}
	// v's tunnel makes v cc2's user; v is then at its limit on cc1.
	pr, pw := io.Pipe()
	req := newRequest(t, "CONNECT", "", pr)
	req.URL = &url.URL{Host: echo.Addr}
	req.Host = echo.Addr
	req.Header.Set("Proxy-Authorization", basic("v"))
	resp, err := cc2.RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("v's CONNECT on cc2: %v %v", resp, err)
	}
	if s := get(cc1, "v"); s != 429 {
		t.Fatalf("v on cc1 with a tunnel on cc2: %d, want 429", s)
	}
	// Closing cc1 ends u's count; u may then use cc2, counted for the
	// stream.
	cc1.Close()
	waitFree(t, lim, "u")
	if s := get(cc2, "u"); s != 200 {
		t.Fatalf("u on cc2 after cc1 closed: %d", s)
	}
	waitFree(t, lim, "u")
	// The tunnel's end does not end v's count: the connection's does.
	pw.Close()
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	proxytest.WaitFor(t, "the tunnel's access log record", func() bool {
		return strings.Contains(log.String(), `"method":"CONNECT"`)
	})
	if userFree(lim, "v") {
		t.Fatal("v's count ended with its tunnel, not with its connection")
	}
	cc2.Close()
	waitFree(t, lim, "v")
	waitFree(t, lim, "u")
}

func TestLimiterThrottle(t *testing.T) {
	echo := proxytest.NewEcho(t)
	o := echoOrigin(t)
	// Refilling at 1 byte/s, the bucket keeps count of the bytes taken.
	const burst = 1 << 30
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users:  map[string]string{"u": "pw"},
		Limits: &limits.Config{UserBytesPerSecond: 1, UserBytesBurst: burst},
	}))
	bucket := p.policy.Limiter.Throttle("u")
	cc := p.client(t)
	body := bytes.Repeat([]byte("b"), 100<<10)
	req := newRequest(t, "POST", o.URL+"/", bytes.NewReader(body))
	req.Header.Set("Proxy-Authorization", basic("u"))
	resp, got := roundTrip(t, cc, req)
	if resp.StatusCode != 200 || len(got) < len(body) {
		t.Fatalf("POST: %d, %d bytes", resp.StatusCode, len(got))
	}
	pr, pw := io.Pipe()
	creq := newRequest(t, "CONNECT", "", pr)
	creq.URL = &url.URL{Host: echo.Addr}
	creq.Host = echo.Addr
	creq.Header.Set("Proxy-Authorization", basic("u"))
	cresp, err := cc.RoundTrip(creq)
	if err != nil || cresp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", cresp, err)
	}
	go func() {
		pw.Write(body)
		pw.Close()
	}()
	echoed, err := io.ReadAll(cresp.Body)
	if err != nil || len(echoed) != len(body) {
		t.Fatalf("tunnel: %d bytes, %v", len(echoed), err)
	}
	// Four bodies' worth went through: the POST's both ways and the
	// tunnel's both ways. Taking what is left beyond three and a half
	// of them must be a debt.
	if d := bucket.Take(burst - 3*len(body) - len(body)/2); d <= 0 {
		t.Fatal("the bucket was not drawn from for each direction")
	}
}

// clientCerts is a CA that signs client certificates.
type clientCerts struct {
	pool *x509.CertPool
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newClientCA(t testing.TB) *clientCerts {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "test client CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &clientCerts{pool: pool, cert: cert, key: key}
}

// issue returns a client certificate the CA signed for subject.
func (ca *clientCerts) issue(t testing.TB, serial int64, subject pkix.Name) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestClientCertificate checks that a verified client certificate names
// the user of every stream of its connection, and that one without a
// common name names nobody: its streams need credentials like any other
// (rustle authenticated them as user "" before).
func TestClientCertificate(t *testing.T) {
	o := echoOrigin(t)
	echo := proxytest.NewEcho(t)
	ca := newClientCA(t)
	var log proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &log)
	p := startProxyTLS(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users:     map[string]string{"alice": "pw", "u": "pw"},
		AccessLog: al,
	}), ca.pool)
	tests := []struct {
		name  string
		certs []tls.Certificate
		auth  string // proxy-authorization; "" = none
		want  int
		user  string // the user the access log names
	}{
		{name: "common name", certs: []tls.Certificate{ca.issue(t, 2, pkix.Name{CommonName: "alice"})}, want: 200, user: "alice"},
		{name: "common name, other credentials ignored", certs: []tls.Certificate{ca.issue(t, 3, pkix.Name{CommonName: "alice"})},
			auth: basic("u"), want: 200, user: "alice"},
		{name: "no common name", certs: []tls.Certificate{ca.issue(t, 4, pkix.Name{Organization: []string{"no one"}})}, want: 407},
		{name: "no common name, credentials", certs: []tls.Certificate{ca.issue(t, 5, pkix.Name{Organization: []string{"no one"}})},
			auth: basic("u"), want: 200, user: "u"},
		{name: "no certificate", want: 407},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cc := p.client(t, tt.certs...)
			path := fmt.Sprintf("/cert%d", i)
			req := newRequest(t, "GET", o.URL+path, nil)
			if tt.auth != "" {
				req.Header.Set("Proxy-Authorization", tt.auth)
			}
			resp, body := roundTrip(t, cc, req)
			if resp.StatusCode != tt.want {
				t.Fatalf("GET: %d %q, want %d", resp.StatusCode, body, tt.want)
			}
			// A tunnel on the same connection is decided the same way.
			creq := newRequest(t, "CONNECT", "", nil)
			creq.URL, creq.Host = &url.URL{Host: echo.Addr}, echo.Addr
			if tt.auth != "" {
				creq.Header.Set("Proxy-Authorization", tt.auth)
			}
			cresp, err := cc.RoundTrip(creq)
			if err != nil {
				t.Fatal(err)
			}
			cresp.Body.Close()
			if cresp.StatusCode != tt.want {
				t.Fatalf("CONNECT: %d, want %d", cresp.StatusCode, tt.want)
			}
			var rec struct {
				User   string `json:"user"`
				Status int    `json:"status"`
			}
			proxytest.WaitFor(t, "the GET's access log record", func() bool {
				for _, line := range strings.Split(log.String(), "\n") {
					if strings.Contains(line, path+`"`) {
						return json.Unmarshal([]byte(line), &rec) == nil
					}
				}
				return false
			})
			if rec.User != tt.user || rec.Status != tt.want {
				t.Errorf("access log: user %q status %d, want %q %d", rec.User, rec.Status, tt.user, tt.want)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string // "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"zero timeouts", func(c *Config) {
			c.HandshakeTimeout, c.IdleTimeout, c.WriteTimeout, c.TunnelIdleTimeout = 0, 0, 0, 0
		}, ""},
		{"no origin client", func(c *Config) { c.Origin = nil }, "h2: Origin must be set"},
		{"streams", func(c *Config) { c.MaxConcurrentStreams = 0 },
			"h2: MaxConcurrentStreams must be between 1 and 2147483647, got 0"},
		{"streams too many", func(c *Config) { c.MaxConcurrentStreams = 1 << 31 },
			"h2: MaxConcurrentStreams must be between 1 and 2147483647, got 2147483648"},
		{"header list", func(c *Config) { c.MaxHeaderListSize = 0 },
			"h2: MaxHeaderListSize must be between 1 and 16777216, got 0"},
		{"header list too large", func(c *Config) { c.MaxHeaderListSize = 16<<20 + 1 },
			"h2: MaxHeaderListSize must be between 1 and 16777216, got 16777217"},
		{"stream window", func(c *Config) { c.InitialStreamWindow = 0 },
			"h2: InitialStreamWindow must be between 65535 and 2147483647, got 0"},
		{"stream window small", func(c *Config) { c.InitialStreamWindow = 65534 },
			"h2: InitialStreamWindow must be between 65535 and 2147483647, got 65534"},
		{"stream window minimum", func(c *Config) { c.InitialStreamWindow = 65535 }, ""},
		{"conn window", func(c *Config) { c.InitialConnWindow = 0 },
			"h2: InitialConnWindow must be between 65535 and 2147483647, got 0"},
		{"conn window large", func(c *Config) { c.InitialConnWindow = 1 << 31 },
			"h2: InitialConnWindow must be between 65535 and 2147483647, got 2147483648"},
		{"frame size", func(c *Config) { c.MaxFrameSize = 0 },
			"h2: MaxFrameSize must be between 16384 and 16777215, got 0"},
		{"frame size small", func(c *Config) { c.MaxFrameSize = 16383 },
			"h2: MaxFrameSize must be between 16384 and 16777215, got 16383"},
		{"frame size large", func(c *Config) { c.MaxFrameSize = 1 << 24 },
			"h2: MaxFrameSize must be between 16384 and 16777215, got 16777216"},
		{"frame size maximum", func(c *Config) { c.MaxFrameSize = 1<<24 - 1 }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(Config{})
			tc.edit(&cfg)
			srv, err := New(cfg)
			switch {
			case tc.want == "" && (err != nil || srv == nil):
				t.Fatalf("New: %v, want a server", err)
			case tc.want != "" && (err == nil || err.Error() != tc.want || srv != nil):
				t.Fatalf("New: %v, %v; want error %q", srv, err, tc.want)
			}
		})
	}
}

// TestZeroTimeouts checks that a timeout of 0 arms no deadline (rather
// than one that has already passed): forwarded requests with large
// bodies either way, and a tunnel with a half-close, all work.
func TestZeroTimeouts(t *testing.T) {
	cfg := testConfig(Config{})
	cfg.HandshakeTimeout, cfg.IdleTimeout, cfg.WriteTimeout, cfg.TunnelIdleTimeout = 0, 0, 0, 0
	cfg.Origin = mustOrigin(origin.Config{Forwarded: origin.ForwardedNone, MaxHeaderBytes: 65536})
	const size = 1 << 20
	o, big := bigOrigin(t, size)
	echo := proxytest.NewEcho(t)
	p := startProxy(t, cfg, nil)
	cc := p.client(t)
	for i := range 2 { // the second on the connection, after it was idle
		if _, body := roundTrip(t, cc, newRequest(t, "GET", o.URL+"/big", nil)); body != string(big) {
			t.Fatalf("GET %d: got %d bytes, want %d", i, len(body), len(big))
		}
	}
	if _, body := roundTrip(t, cc, newRequest(t, "POST", o.URL+"/up", bytes.NewReader(big))); body != fmt.Sprint(size) {
		t.Fatalf("POST: origin read %s bytes, want %d", body, size)
	}
	pr, pw := io.Pipe()
	req := newRequest(t, "CONNECT", "", pr)
	req.URL = &url.URL{Host: echo.Addr}
	req.Host = echo.Addr
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: status %d", resp.StatusCode)
	}
	go func() {
		pw.Write(big)
		pw.Close()
	}()
	got, err := io.ReadAll(resp.Body)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("tunnel: got %d bytes, %v; want %d", len(got), err, len(big))
	}
}
