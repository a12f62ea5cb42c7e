package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/net/http2"
)

// serve runs handle on a port-0 loopback listener for the test's lifetime
// and returns the listener's address.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { acceptLoop(ln, handle) })
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

// dial connects to addr and closes the connection at the end of the test.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

func TestHTTP(t *testing.T) {
	o := newOrigin()
	addr := serve(t, o.serveHTTP)
	tests := []struct {
		name      string
		reqs      string
		method    string
		wantCodes []int
		wantLens  []int64
		wantClose bool
	}{
		{
			name:      "keep-alive serves several requests",
			reqs:      "GET /1k HTTP/1.1\r\nHost: x\r\n\r\nGET /10k HTTP/1.1\r\nHost: x\r\n\r\n",
			wantCodes: []int{200, 200}, wantLens: []int64{1024, 10240},
		},
		{
			name:      "absolute form and query",
			reqs:      "GET http://127.0.0.1:1/1m?x=1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\nProxy-Authorization: Basic eDp5\r\n\r\n",
			wantCodes: []int{200}, wantLens: []int64{1 << 20},
		},
		{
			name:      "connection close",
			reqs:      "GET /1k HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
			wantCodes: []int{200}, wantLens: []int64{1024}, wantClose: true,
		},
		{
			name:      "HTTP/1.0 closes by default",
			reqs:      "GET /1k HTTP/1.0\r\n\r\n",
			wantCodes: []int{200}, wantLens: []int64{1024}, wantClose: true,
		},
		{
			name:      "HTTP/1.0 keep-alive",
			reqs:      "GET /1k HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET /1k HTTP/1.0\r\n\r\n",
			wantCodes: []int{200, 200}, wantLens: []int64{1024, 1024}, wantClose: true,
		},
		{
			name:      "request body is skipped",
			reqs:      "POST /1k HTTP/1.1\r\nContent-Length: 5\r\n\r\nhelloGET /1k HTTP/1.1\r\n\r\n",
			wantCodes: []int{200, 200}, wantLens: []int64{1024, 1024},
		},
		{
			name:      "HEAD has no body",
			reqs:      "HEAD /10m HTTP/1.1\r\n\r\n",
			method:    "HEAD",
			wantCodes: []int{200}, wantLens: []int64{10 << 20},
		},
		{
			name:      "unknown path",
			reqs:      "GET /nope HTTP/1.1\r\n\r\n",
			wantCodes: []int{404}, wantLens: []int64{0}, wantClose: true,
		},
		{
			name:      "chunked upload refused",
			reqs:      "POST /1k HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
			wantCodes: []int{501}, wantLens: []int64{0}, wantClose: true,
		},
		{
			name:      "bad version",
			reqs:      "GET /1k HTTP/2.0\r\n\r\n",
			wantCodes: []int{505}, wantLens: []int64{0}, wantClose: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, addr)
			if _, err := io.WriteString(c, tt.reqs); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			method := tt.method
			if method == "" {
				method = "GET"
			}
			for i, code := range tt.wantCodes {
				resp, err := http.ReadResponse(br, &http.Request{Method: method})
				if err != nil {
					t.Fatalf("response %d: %v", i, err)
				}
				body, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatalf("response %d body: %v", i, err)
				}
				if resp.StatusCode != code || resp.ContentLength != tt.wantLens[i] {
					t.Errorf("response %d: status %d, Content-Length %d; want %d, %d", i, resp.StatusCode, resp.ContentLength, code, tt.wantLens[i])
				}
				if method == "GET" && int64(len(body)) != tt.wantLens[i] {
					t.Errorf("response %d: body of %d bytes, want %d", i, len(body), tt.wantLens[i])
				}
			}
			if tt.wantClose {
				if n, err := br.Read(make([]byte, 1)); err != io.EOF {
					t.Errorf("after the last response: read %d, %v; want EOF", n, err)
				}
			}
		})
	}
}

func TestStatsCountSinkAndHold(t *testing.T) {
	o := newOrigin()
	sink := serve(t, o.serveSink)
	hold := serve(t, o.serveHold)

	s := dial(t, sink)
	if _, err := s.Write(make([]byte, 100000)); err != nil {
		t.Fatal(err)
	}
	s.Close()

	h := dial(t, hold)
	if _, err := io.WriteString(h, "ping"); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(h, got); err != nil || string(got) != "ping" {
		t.Fatalf("hold echo = %q, %v; want ping", got, err)
	}
	// The sink counts asynchronously; poll a bounded number of times.
	var st Stats
	for i := 0; i < 200; i++ {
		if st = o.stats(); st.SinkBytes == 100000 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if st.SinkBytes != 100000 || st.SinkConns != 1 || st.HoldConns != 1 {
		t.Errorf("stats = %+v, want 100000 sink bytes, 1 sink conn, 1 hold conn", st)
	}

	httpAddr := serve(t, o.serveHTTP)
	c := dial(t, httpAddr)
	io.WriteString(c, "GET /_stats HTTP/1.1\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `"sink_bytes":100000`) {
		t.Errorf("/_stats = %s, want sink_bytes 100000", body)
	}
}

func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	code := m.Run()
	// Connection goroutines end when their peers close; allow them a
	// bounded moment.
	for i := 0; i < 100 && runtime.NumGoroutine() > before; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); code == 0 && n > before {
		buf := make([]byte, 1<<16)
		println("origin: leaked goroutines:", n-before, string(buf[:runtime.Stack(buf, true)]))
		code = 1
	}
	os.Exit(code)
}

func TestWebSocketEcho(t *testing.T) {
	o := newOrigin()
	addr := serve(t, o.serveWS)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+addr+"/echo", nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	tests := []struct {
		name string
		typ  websocket.MessageType
		size int
	}{
		{"text 64 B", websocket.MessageText, 64},
		{"binary 64 B", websocket.MessageBinary, 64},
		{"binary 200 B (16-bit length)", websocket.MessageBinary, 200},
		{"binary 64 KB (64-bit length)", websocket.MessageBinary, 64 << 10},
		{"empty", websocket.MessageBinary, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := bytes.Repeat([]byte("x"), tt.size)
			for i := range msg {
				msg[i] = byte('a' + i%26)
			}
			if err := c.Write(ctx, tt.typ, msg); err != nil {
				t.Fatal(err)
			}
			typ, got, err := c.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if typ != tt.typ || !bytes.Equal(got, msg) {
				t.Errorf("echo = %v with %d bytes, want %v with %d equal bytes", typ, len(got), tt.typ, len(msg))
			}
		})
	}
	if err := c.Close(websocket.StatusNormalClosure, "done"); err != nil {
		t.Errorf("close handshake: %v", err)
	}
	if st := o.stats(); st.WSConns != 1 || st.WSMessages != int64(len(tests)) {
		t.Errorf("stats = %+v, want 1 WebSocket connection and %d messages", st, len(tests))
	}
}

func TestWebSocketRawFrames(t *testing.T) {
	o := newOrigin()
	addr := serve(t, o.serveWS)
	tests := []struct {
		name    string
		request string
		want    string // prefix of the answer
		wantEOF bool   // the origin closes after it
	}{
		{"no key", "GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n", "HTTP/1.1 400 ", false},
		{"not an upgrade", "GET /echo HTTP/1.1\r\nHost: x\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n", "HTTP/1.1 400 ", false},
		{"absolute form, zero mask key, ping", "GET http://x/echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n" +
			"\x82\x83\x00\x00\x00\x00abc" + "\x89\x81\x01\x02\x03\x04" + string([]byte{'p' ^ 1}),
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n" +
				"\x82\x03abc" + "\x8a\x01p", false},
		{"oversized frame", "GET / HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Key: k\r\n\r\n\x82\xff\x00\x00\x00\x00\x01\x00\x00\x01",
			"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: cai0HFWL7DEHZkyHxdyv1Pn3R6M=\r\n\r\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, addr)
			if _, err := io.WriteString(c, tt.request); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(tt.want))
			if _, err := io.ReadFull(c, got); err != nil {
				t.Fatalf("read answer: %v (got %q)", err, got)
			}
			if string(got) != tt.want {
				t.Errorf("answer = %q, want %q", got, tt.want)
			}
			if tt.wantEOF {
				if n, err := c.Read(make([]byte, 1)); err != io.EOF {
					t.Errorf("after the answer: read %d, %v; want EOF", n, err)
				}
			}
		})
	}
}

func TestTLSServices(t *testing.T) {
	cert, pool := testCert(t)
	o := newOrigin()
	conf := &tls.Config{Certificates: []tls.Certificate{cert}}
	addr := serve(t, withTLS(conf, o.serveHTTP))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get("https://" + addr + "/10k")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || len(body) != 10<<10 {
		t.Errorf("GET https /10k = %d with %d bytes (%v), want 200 with 10240", resp.StatusCode, len(body), err)
	}

	ws := serve(t, withTLS(conf, o.serveWS))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "wss://"+ws+"/", &websocket.DialOptions{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	if err := c.Write(ctx, websocket.MessageBinary, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, got, err := c.Read(ctx); err != nil || string(got) != "hello" {
		t.Errorf("wss echo = %q, %v; want hello", got, err)
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// testCert returns a self-signed certificate for 127.0.0.1 and a pool that
// trusts it.
func testCert(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}

func TestH2Service(t *testing.T) {
	cert, pool := testCert(t)
	o := newOrigin()
	addr := serve(t, o.serveH2(cert))
	tr := &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for _, tt := range []struct {
		path   string
		status int
		size   int
	}{
		{"/1k", 200, 1 << 10},
		{"/10k", 200, 10 << 10},
		{"/1m", 200, 1 << 20},
		{"/nope", 404, -1},
	} {
		resp, err := client.Get("https://" + addr + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.ProtoMajor != 2 || resp.StatusCode != tt.status || (tt.size >= 0 && len(body) != tt.size) {
			t.Errorf("GET %s over HTTP/%d = %d with %d bytes (%v), want HTTP/2 %d with %d", tt.path, resp.ProtoMajor, resp.StatusCode, len(body), err, tt.status, tt.size)
		}
	}

	// A POST to the sink is counted as it streams.
	before := o.sinkBytes.Load()
	pr, pw := io.Pipe()
	req, err := http.NewRequest("POST", "https://"+addr+h2SinkPath, pr)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST %s = %d, want 200 before the body", h2SinkPath, resp.StatusCode)
	}
	chunk := bytes.Repeat([]byte("s"), 100<<10)
	for range 3 {
		if _, err := pw.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	pw.Close()
	io.Copy(io.Discard, resp.Body)
	for i := 0; i < 200 && o.sinkBytes.Load()-before < 3*int64(len(chunk)); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if got := o.sinkBytes.Load() - before; got != 3*int64(len(chunk)) {
		t.Errorf("sink counted %d bytes, want %d", got, 3*len(chunk))
	}
}
