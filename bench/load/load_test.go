package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/textproto"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestParseSteps(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "1000,5000,9000", want: []int{1000, 5000, 9000}},
		{in: " 1 , 2 ", want: []int{1, 2}},
		{in: "5,5", wantErr: true},
		{in: "9,1", wantErr: true},
		{in: "0", wantErr: true},
		{in: "x", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseSteps(tt.in)
		if (err != nil) != tt.wantErr || (err == nil && !equal(got, tt.want)) {
			t.Errorf("parseSteps(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fakeProxy answers CONNECT with status for the test's lifetime; with 200
// it then echoes what the client sends. It records the request heads.
func fakeProxy(t *testing.T, status string) (string, func() []textproto.MIMEHeader) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var heads []textproto.MIMEHeader
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				tp := textproto.NewReader(bufio.NewReader(c))
				if _, err := tp.ReadLine(); err != nil {
					return
				}
				h, err := tp.ReadMIMEHeader()
				if err != nil {
					return
				}
				mu.Lock()
				heads = append(heads, h)
				mu.Unlock()
				io.WriteString(c, "HTTP/1.1 "+status+"\r\nX-Test: 1\r\n\r\n")
				if strings.HasPrefix(status, "200") {
					io.Copy(c, tp.R)
				}
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String(), func() []textproto.MIMEHeader {
		mu.Lock()
		defer mu.Unlock()
		return append([]textproto.MIMEHeader(nil), heads...)
	}
}

func TestDialAndEcho(t *testing.T) {
	addr, heads := fakeProxy(t, "200 Connection established")
	d := newDialer(addr, "bench:secret", "127.0.0.1:9", 5*time.Second)
	var errs errorLog
	tunnels := openParallel(context.Background(), d, 5, 2, &errs, echo)
	for _, tc := range tunnels {
		tc.Close()
	}
	if len(tunnels) != 5 || errs.n.Load() != 0 {
		t.Fatalf("opened %d tunnels with %d errors (%s), want 5 and 0", len(tunnels), errs.n.Load(), errs.firstText())
	}
	h := heads()[0]
	if got := h.Get("Proxy-Authorization"); got != "Basic YmVuY2g6c2VjcmV0" {
		t.Errorf("Proxy-Authorization = %q", got)
	}
	if got := h.Get("Host"); got != "127.0.0.1:9" {
		t.Errorf("Host = %q", got)
	}
}

func TestDialRefused(t *testing.T) {
	addr, _ := fakeProxy(t, "407 Proxy Authentication Required")
	d := newDialer(addr, "", "127.0.0.1:9", 5*time.Second)
	_, err := d.dial(context.Background())
	if !errors.Is(err, errStatus) {
		t.Errorf("dial error = %v, want errStatus", err)
	}
}

// serveConns runs handle on every connection of a port-0 loopback
// listener for the test's lifetime and returns its address.
func serveConns(t *testing.T, ln net.Listener, handle func(net.Conn)) string {
	t.Helper()
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				handle(c)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// fakeSOCKS5 is a SOCKS5 server: with user set it takes only
// username/password, otherwise only "no authentication". After a CONNECT
// it records the request's address bytes and echoes.
func fakeSOCKS5(t *testing.T, user, pass string) (string, func() [][]byte) {
	t.Helper()
	var mu sync.Mutex
	var reqs [][]byte
	addr := serveConns(t, listen(t), func(c net.Conn) {
		br := bufio.NewReader(c)
		var h [2]byte
		if _, err := io.ReadFull(br, h[:]); err != nil || h[0] != 5 {
			return
		}
		methods := make([]byte, h[1])
		if _, err := io.ReadFull(br, methods); err != nil {
			return
		}
		want := byte(0)
		if user != "" {
			want = 2
		}
		if !strings.Contains(string(methods), string([]byte{want})) {
			c.Write([]byte{5, 0xff})
			return
		}
		c.Write([]byte{5, want})
		if want == 2 {
			var v [2]byte
			io.ReadFull(br, v[:])
			u := make([]byte, v[1])
			io.ReadFull(br, u)
			n, _ := br.ReadByte()
			p := make([]byte, n)
			io.ReadFull(br, p)
			if string(u) != user || string(p) != pass {
				c.Write([]byte{1, 1})
				return
			}
			c.Write([]byte{1, 0})
		}
		var req [4]byte
		if _, err := io.ReadFull(br, req[:]); err != nil {
			return
		}
		var rest []byte
		switch req[3] {
		case 1:
			rest = make([]byte, 4+2)
		case 3:
			n, _ := br.ReadByte()
			rest = append([]byte{n}, make([]byte, int(n)+2)...)
			io.ReadFull(br, rest[1:])
			rest = rest[1:]
		}
		if req[3] == 1 {
			io.ReadFull(br, rest)
		}
		mu.Lock()
		reqs = append(reqs, append([]byte{req[1], req[3]}, rest...))
		mu.Unlock()
		c.Write([]byte{5, 0, 0, 1, 127, 0, 0, 1, 0, 80})
		io.Copy(c, br)
	})
	return addr, func() [][]byte {
		mu.Lock()
		defer mu.Unlock()
		return append([][]byte(nil), reqs...)
	}
}

func TestSOCKS5(t *testing.T) {
	withAuth, authReqs := fakeSOCKS5(t, "bench", "secret")
	noAuth, _ := fakeSOCKS5(t, "", "")
	tests := []struct {
		name, proxy, userPass, target string
		wantErr                       error
	}{
		{"username and password", withAuth, "bench:secret", "127.0.0.1:9", nil},
		{"domain name target", withAuth, "bench:secret", "localhost:9", nil},
		{"wrong password", withAuth, "bench:wrong", "127.0.0.1:9", errSOCKS},
		{"no credentials for a proxy that wants them", withAuth, "", "127.0.0.1:9", errSOCKS},
		{"no authentication", noAuth, "", "127.0.0.1:9", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDialer(tt.proxy, tt.userPass, tt.target, 5*time.Second)
			d.socks = true
			tc, err := d.dial(context.Background())
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("dial error = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			defer tc.Close()
			if err := echo(tc); err != nil {
				t.Errorf("echo through the tunnel: %v", err)
			}
		})
	}
	got := authReqs()
	want := [][]byte{
		{1, 1, 127, 0, 0, 1, 0, 9},
		append(append([]byte{1, 3}, "localhost"...), 0, 9),
	}
	if len(got) != len(want) || string(got[0]) != string(want[0]) || string(got[1]) != string(want[1]) {
		t.Errorf("SOCKS5 requests = %v, want %v", got, want)
	}
}

// fakeHTTPProxy answers every request with status and a 1 KB body,
// closing after the response when the request said "Connection: close".
// It counts connections and keeps the first request head.
func fakeHTTPProxy(t *testing.T, status string) (string, func() (int, string)) {
	t.Helper()
	var mu sync.Mutex
	conns, first := 0, ""
	body := strings.Repeat("x", 1024)
	addr := serveConns(t, listen(t), func(c net.Conn) {
		mu.Lock()
		conns++
		mu.Unlock()
		tp := textproto.NewReader(bufio.NewReader(c))
		for {
			line, err := tp.ReadLine()
			if err != nil {
				return
			}
			h, err := tp.ReadMIMEHeader()
			if err != nil {
				return
			}
			mu.Lock()
			if first == "" {
				first = line + "|" + h.Get("Proxy-Authorization") + "|" + h.Get("Host")
			}
			mu.Unlock()
			closing := h.Get("Connection") == "close"
			resp := "HTTP/1.1 " + status + "\r\nContent-Length: 1024\r\n"
			if closing {
				resp += "Connection: close\r\n"
			}
			if _, err := io.WriteString(c, resp+"\r\n"+body); err != nil || closing {
				return
			}
		}
	})
	return addr, func() (int, string) {
		mu.Lock()
		defer mu.Unlock()
		return conns, first
	}
}

func TestHTTPWorker(t *testing.T) {
	tests := []struct {
		name       string
		status     string
		newConn    bool
		wantStatus bool // status errors expected
	}{
		{"keep-alive", "200 OK", false, false},
		{"a new connection per request", "200 OK", true, false},
		{"refused", "407 Proxy Authentication Required", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, seen := fakeHTTPProxy(t, tt.status)
			d := newDialer(addr, "bench:secret", "127.0.0.1:9", 5*time.Second)
			var c counts
			httpWorker(context.Background(), d, httpRequest(d, "/1k", tt.newConn), tt.newConn, time.Now().Add(loadWindow), 5*time.Second, &c)
			if c.requests == 0 || c.bytes < c.requests*1024 {
				t.Fatalf("%d requests, %d bytes; want some, with 1 KB bodies", c.requests, c.bytes)
			}
			if got := c.errs.Status > 0; got != tt.wantStatus {
				t.Errorf("status errors = %d, want some: %v", c.errs.Status, tt.wantStatus)
			}
			if n := c.errs.Connect + c.errs.Read + c.errs.Write + c.errs.Timeout; n != 0 {
				t.Errorf("%d transport errors, first %v", n, c.firstErr)
			}
			if int64(len(c.latencies)) != c.requests {
				t.Errorf("%d latencies for %d requests", len(c.latencies), c.requests)
			}
			conns, first := seen()
			if want := "GET http://127.0.0.1:9/1k HTTP/1.1|Basic YmVuY2g6c2VjcmV0|127.0.0.1:9"; first != want {
				t.Errorf("first request = %q, want %q", first, want)
			}
			if tt.newConn && int64(conns) < c.requests {
				t.Errorf("%d connections for %d requests, want one each", conns, c.requests)
			}
			if !tt.newConn && conns != 1 {
				t.Errorf("%d connections, want 1 kept alive", conns)
			}
		})
	}
}

func TestReadHead(t *testing.T) {
	tests := []struct {
		name       string
		in         string
		wantStatus int
		wantLen    int64
		wantClosed bool
		wantErr    bool
	}{
		{"keep-alive", "HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n", 200, 12, false, false},
		{"close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", 200, 0, true, false},
		{"HTTP/1.0 closes", "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n", 200, 3, true, false},
		{"HTTP/1.0 keep-alive", "HTTP/1.0 200 OK\r\nProxy-Connection: keep-alive\r\nContent-Length: 3\r\n\r\n", 200, 3, false, false},
		{"no length", "HTTP/1.1 407 Proxy Authentication Required\r\n\r\n", 407, -1, false, false},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", 200, -1, false, true},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 200, -1, false, true},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", 0, -1, false, true},
		{"truncated", "HTTP/1.1 200 OK\r\nContent-Le", 200, -1, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, n, length, closed, err := readHead(bufio.NewReader(strings.NewReader(tt.in)))
			if (err != nil) != tt.wantErr || status != tt.wantStatus || length != tt.wantLen || closed != tt.wantClosed {
				t.Errorf("readHead = status %d, length %d, closed %v, error %v; want %d, %d, %v, error %v",
					status, length, closed, err, tt.wantStatus, tt.wantLen, tt.wantClosed, tt.wantErr)
			}
			if !tt.wantErr && n != int64(len(tt.in)) {
				t.Errorf("readHead counted %d bytes, want %d", n, len(tt.in))
			}
		})
	}
}

// fakeWSProxy answers an upgrade with 101 (and accept as its
// Sec-WebSocket-Accept), then echoes every client frame unmasked, as a
// proxy in front of the echo origin would. It counts connections and
// keeps the first request line.
func fakeWSProxy(t *testing.T, accept string) (string, func() (int, string)) {
	t.Helper()
	var mu sync.Mutex
	conns, first := 0, ""
	addr := serveConns(t, listen(t), func(c net.Conn) {
		mu.Lock()
		conns++
		mu.Unlock()
		br := bufio.NewReader(c)
		tp := textproto.NewReader(br)
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		h, err := tp.ReadMIMEHeader()
		if err != nil {
			return
		}
		mu.Lock()
		if first == "" {
			first = line + "|" + h.Get("Proxy-Authorization") + "|" + h.Get("Upgrade") + "|" + h.Get("Sec-WebSocket-Key")
		}
		mu.Unlock()
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: "+accept+"\r\n\r\n")
		for {
			var hdr [2]byte
			if _, err := io.ReadFull(br, hdr[:]); err != nil {
				return
			}
			n := int(hdr[1] & 0x7f)
			switch n {
			case 126:
				var ext [2]byte
				io.ReadFull(br, ext[:])
				n = int(ext[0])<<8 | int(ext[1])
			case 127:
				var ext [8]byte
				io.ReadFull(br, ext[:])
				n = int(ext[4])<<24 | int(ext[5])<<16 | int(ext[6])<<8 | int(ext[7])
			}
			var mask [4]byte
			io.ReadFull(br, mask[:])
			p := make([]byte, n)
			if _, err := io.ReadFull(br, p); err != nil {
				return
			}
			var out []byte
			switch {
			case n <= 125:
				out = []byte{hdr[0], byte(n)}
			case n <= 0xffff:
				out = []byte{hdr[0], 126, byte(n >> 8), byte(n)}
			default:
				out = []byte{hdr[0], 127, 0, 0, 0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}
			}
			if _, err := c.Write(append(out, p...)); err != nil {
				return
			}
		}
	})
	return addr, func() (int, string) {
		mu.Lock()
		defer mu.Unlock()
		return conns, first
	}
}

func TestWSWorker(t *testing.T) {
	tests := []struct {
		name        string
		accept      string
		size        int
		newConn     bool
		wantUpgrade bool
	}{
		{"64-byte messages", wsAccept(wsKey), 64, false, true},
		{"64 KB messages", wsAccept(wsKey), 64 << 10, false, true},
		{"200-byte messages (16-bit length)", wsAccept(wsKey), 200, false, true},
		{"one connection per exchange", wsAccept(wsKey), 64, true, true},
		{"wrong Sec-WebSocket-Accept", "bm9wZQ==", 64, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, seen := fakeWSProxy(t, tt.accept)
			d := newDialer(addr, "bench:secret", "127.0.0.1:9", 5*time.Second)
			var c wsCounts
			w := wsWorker{d: d, upgrade: wsUpgradeRequest(d), frame: wsClientFrame(tt.size), size: tt.size,
				end: time.Now().Add(300 * time.Millisecond), timeout: 5 * time.Second, c: &c}
			w.run(context.Background(), tt.newConn)
			conns, first := seen()
			if want := "GET http://127.0.0.1:9/echo HTTP/1.1|Basic YmVuY2g6c2VjcmV0|websocket|" + wsKey; first != want {
				t.Errorf("first upgrade = %q, want %q", first, want)
			}
			if !tt.wantUpgrade {
				if c.upgradeErrs == 0 || c.requests != 0 {
					t.Errorf("%d upgrade errors, %d messages; want errors and none", c.upgradeErrs, c.requests)
				}
				return
			}
			if c.requests == 0 || c.bytes != c.requests*int64(tt.size) {
				t.Fatalf("%d messages, %d bytes; want some of %d bytes", c.requests, c.bytes, tt.size)
			}
			if n := c.errs.Connect + c.errs.Read + c.errs.Write + c.errs.Timeout + c.upgradeErrs; n != 0 {
				t.Errorf("%d errors, first %v", n, c.firstErr)
			}
			if tt.newConn && (int64(conns) < c.requests || c.upgrades < c.requests) {
				t.Errorf("%d connections, %d upgrades for %d messages, want one each", conns, c.upgrades, c.requests)
			}
			if !tt.newConn && conns != 1 {
				t.Errorf("%d connections, want 1", conns)
			}
		})
	}
}

func TestWSClientFrame(t *testing.T) {
	for _, tt := range []struct {
		size int
		head string
	}{
		{0, "\x82\x80\x00\x00\x00\x00"},
		{125, "\x82\xfd\x00\x00\x00\x00"},
		{126, "\x82\xfe\x00\x7e\x00\x00\x00\x00"},
		{65536, "\x82\xff\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00"},
	} {
		f := wsClientFrame(tt.size)
		if !strings.HasPrefix(string(f), tt.head) || len(f) != len(tt.head)+tt.size {
			t.Errorf("wsClientFrame(%d) starts % x with %d bytes, want % x and %d", tt.size, f[:min(len(f), 14)], len(f), tt.head, len(tt.head)+tt.size)
		}
	}
}

func TestTLSResumption(t *testing.T) {
	cert, pool := testCert(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveConns(t, ln, func(c net.Conn) { io.Copy(c, c) })
	for _, resume := range []bool{true, false} {
		t.Run(fmt.Sprintf("resume=%v", resume), func(t *testing.T) {
			d := newDialer("", "", addr, 5*time.Second)
			d.tlsConf = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
			if resume {
				d.tlsConf.ClientSessionCache = tls.NewLRUClientSessionCache(4)
			}
			for range 3 {
				c, err := d.dialConn(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				// A read takes in the session ticket TLS 1.3 sends after
				// the handshake.
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
					t.Fatal(err)
				}
				c.Close()
			}
			want := int64(0)
			if resume {
				want = 2
			}
			if h, r := d.handshakes.Load(), d.resumed.Load(); h != 3 || r != want {
				t.Errorf("%d handshakes, %d resumed; want 3 and %d", h, r, want)
			}
		})
	}
}

// TestTLSSeen checks that the dialer tallies the key exchange of every
// handshake and names the server certificate's key, for a server with
// Go's default key exchanges and for one with X25519 only.
func TestTLSSeen(t *testing.T) {
	cert, pool := testCert(t)
	for _, tt := range []struct {
		name   string
		curves []tls.CurveID
		want   map[string]int64
	}{
		{"default", nil, map[string]int64{"X25519MLKEM768": 3}},
		{"X25519 only", []tls.CurveID{tls.X25519}, map[string]int64{"X25519": 3}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, CurvePreferences: tt.curves})
			if err != nil {
				t.Fatal(err)
			}
			addr := serveConns(t, ln, func(c net.Conn) { io.Copy(c, c) })
			d := newDialer("", "", addr, 5*time.Second)
			d.tlsConf = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", ClientSessionCache: tls.NewLRUClientSessionCache(4)}
			for range 3 {
				c, err := d.dialConn(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				if _, err := c.Write([]byte("x")); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
					t.Fatal(err)
				}
				c.Close()
			}
			curves, certKey := d.seen.result()
			if !maps.Equal(curves, tt.want) {
				t.Errorf("key exchanges %v, want %v", curves, tt.want)
			}
			if certKey != "ECDSA P-256" {
				t.Errorf("certificate key %q, want ECDSA P-256", certKey)
			}
		})
	}
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
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}, IsCA: true, BasicConstraintsValid: true,
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

// loadWindow is how long the worker tests let a worker send: long enough
// for a TLS or QUIC handshake and a first exchange on a machine that other
// test packages keep busy (300 ms was not, on a loaded CI run).
const loadWindow = 2 * time.Second

func TestMain(m *testing.M) {
	before := runtime.NumGoroutine()
	code := m.Run()
	// Connection goroutines of the fake servers end when their peers
	// close, and the h2 and h3 servers' idle stream workers 2 s after
	// their last stream (internal/workpool): allow them a bounded moment.
	for i := 0; i < 500 && runtime.NumGoroutine() > before; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); code == 0 && n > before {
		buf := make([]byte, 1<<16)
		println("load: leaked goroutines:", n-before, string(buf[:runtime.Stack(buf, true)]))
		code = 1
	}
	os.Exit(code)
}
