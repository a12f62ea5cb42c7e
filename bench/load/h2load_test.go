package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fakeH2Proxy serves HTTP/2 over TLS as a forward proxy would, answering
// 407 to a stream without the Proxy-Authorization value auth (when auth
// is not ""), a 1 KB body to a GET, and 200 to CONNECT or POST, then
// echoing the stream's bytes. With noH2 it answers no ALPN. It
// counts connections and keeps the first request, as "METHOD host path
// auth".
func fakeH2Proxy(t *testing.T, auth string, noH2 bool) (addr string, pool *x509.CertPool, seen func() (int, string)) {
	t.Helper()
	cert, pool := testCert(t)
	conf := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}}
	if noH2 {
		conf.NextProtos = nil // no ALPN: the client must notice
	}
	var mu sync.Mutex
	conns, first := 0, ""
	body := bytes.Repeat([]byte("b"), 1024)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if first == "" {
			first = strings.Join([]string{r.Method, r.Host, r.URL.Path, r.Header.Get("Proxy-Authorization")}, " ")
		}
		mu.Unlock()
		if auth != "" && r.Header.Get("Proxy-Authorization") != auth {
			w.WriteHeader(http.StatusProxyAuthRequired)
			return
		}
		if r.Method == "GET" && r.URL.Path == "/big" {
			// More than the client's stream window (4 MiB): it must
			// return credit as it reads.
			w.Header().Set("Content-Length", strconv.Itoa(h2BigBody))
			big := bytes.Repeat([]byte("B"), 1<<20)
			for range h2BigBody >> 20 {
				w.Write(big)
			}
			return
		}
		if r.Method == "GET" {
			w.Header().Set("Content-Length", "1024")
			w.Write(body)
			return
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		buf := make([]byte, 16<<10)
		for {
			n, err := r.Body.Read(buf)
			if n > 0 {
				w.Write(buf[:n])
				w.(http.Flusher).Flush()
			}
			if err != nil {
				return
			}
		}
	})
	srv := &http2.Server{}
	addr = serveConns(t, listen(t), func(c net.Conn) {
		mu.Lock()
		conns++
		mu.Unlock()
		tc := tls.Server(c, conf)
		if tc.Handshake() != nil || tc.ConnectionState().NegotiatedProtocol != "h2" {
			return
		}
		srv.ServeConn(tc, &http2.ServeConnOpts{Handler: h})
	})
	return addr, pool, func() (int, string) {
		mu.Lock()
		defer mu.Unlock()
		return conns, first
	}
}

// h2BigBody is the size of the fake proxy's /big response.
const h2BigBody = 9 << 20

// h2Dialer returns a dialer speaking HTTP/2 over TLS to proxy (or to
// target without one), trusting pool, resuming sessions.
func h2Dialer(proxy, auth, target string, pool *x509.CertPool) dialer {
	d := newDialer(proxy, auth, target, 5*time.Second)
	d.h2 = true
	d.tlsConf = &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"h2"}, ClientSessionCache: tls.NewLRUClientSessionCache(4)}
	return d
}

func TestH2Worker(t *testing.T) {
	tests := []struct {
		name       string
		auth       string
		newConn    bool
		wantStatus bool // status errors expected
	}{
		{"one connection", "bench:secret", false, false},
		{"a new connection per request", "bench:secret", true, false},
		{"refused", "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr, pool, seen := fakeH2Proxy(t, "Basic YmVuY2g6c2VjcmV0", false)
			d := h2Dialer(addr, tt.auth, "127.0.0.1:9", pool)
			var c counts
			h2Worker(context.Background(), d, h2Fields(d, "/1k"), tt.newConn, time.Now().Add(loadWindow), 5*time.Second, &c)
			if c.requests == 0 {
				t.Fatal("no request completed")
			}
			if got := c.errs.Status > 0; got != tt.wantStatus {
				t.Errorf("status errors = %d, want some: %v", c.errs.Status, tt.wantStatus)
			}
			if !tt.wantStatus && c.bytes != c.requests*1024 {
				t.Errorf("%d bytes for %d requests, want 1 KB bodies", c.bytes, c.requests)
			}
			if n := c.errs.Connect + c.errs.Read + c.errs.Write + c.errs.Timeout; n != 0 {
				t.Errorf("%d transport errors, first %v", n, c.firstErr)
			}
			conns, first := seen()
			want := "GET 127.0.0.1:9 /1k Basic YmVuY2g6c2VjcmV0"
			if tt.auth == "" {
				want = "GET 127.0.0.1:9 /1k "
			}
			if first != want {
				t.Errorf("first request = %q, want %q", first, want)
			}
			if tt.newConn {
				if int64(conns) < c.requests {
					t.Errorf("%d connections for %d requests, want one each", conns, c.requests)
				}
				if d.resumed.Load() == 0 {
					t.Errorf("%d handshakes, none resumed", d.handshakes.Load())
				}
			} else if conns != 1 {
				t.Errorf("%d connections, want 1 kept", conns)
			}
		})
	}
}

func TestH2Fields(t *testing.T) {
	proxied := h2Fields(newDialer("127.0.0.1:3128", "bench:secret", "127.0.0.1:9", time.Second), "/1k")
	direct := h2Fields(newDialer("", "", "127.0.0.1:9", time.Second), "/10k")
	for _, tt := range []struct {
		got  []hpack.HeaderField
		want string
	}{
		// Through a proxy: a forwarded request with :scheme http.
		{proxied, ":method=GET :scheme=http :authority=127.0.0.1:9 :path=/1k proxy-authorization=Basic YmVuY2g6c2VjcmV0"},
		{direct, ":method=GET :scheme=https :authority=127.0.0.1:9 :path=/10k"},
	} {
		var parts []string
		for _, f := range tt.got {
			parts = append(parts, f.Name+"="+f.Value)
		}
		if got := strings.Join(parts, " "); got != tt.want {
			t.Errorf("h2Fields = %q, want %q", got, tt.want)
		}
	}
}

func TestH2ClientLargeBody(t *testing.T) {
	addr, pool, _ := fakeH2Proxy(t, "", false)
	d := h2Dialer(addr, "", "127.0.0.1:9", pool)
	cl, err := d.dialH2Client(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.conn.Close()
	cl.conn.SetDeadline(time.Now().Add(10 * time.Second))
	// Two in a row on one connection: the connection window's credit
	// comes back too.
	for i := range 2 {
		status, n, err := cl.get(h2Fields(d, "/big"))
		if err != nil || status != 200 || n != h2BigBody {
			t.Fatalf("request %d: status %d, %d bytes, %v; want 200 with %d", i+1, status, n, err, h2BigBody)
		}
	}
	if cl.nextID != 5 || cl.done() {
		t.Errorf("next stream %d, done %v; want 5 and more to come", cl.nextID, cl.done())
	}
}

func TestH2NotNegotiated(t *testing.T) {
	addr, pool, _ := fakeH2Proxy(t, "", true)
	d := h2Dialer(addr, "", "127.0.0.1:9", pool)
	if _, _, err := d.dialH2(context.Background()); !errors.Is(err, errNoH2) {
		t.Errorf("dialH2 to a server without h2: %v, want errNoH2", err)
	}
	if _, err := d.dialH2Client(context.Background()); !errors.Is(err, errNoH2) {
		t.Errorf("dialH2Client to a server without h2: %v, want errNoH2", err)
	}
}

func TestH2Tunnels(t *testing.T) {
	addr, pool, seen := fakeH2Proxy(t, "Basic YmVuY2g6c2VjcmV0", false)
	for _, tt := range []struct {
		name, proxy, auth, target string
		wantErr                   error
		wantFirst                 string
	}{
		{"CONNECT", addr, "bench:secret", "127.0.0.1:9", nil, "CONNECT 127.0.0.1:9  Basic YmVuY2g6c2VjcmV0"},
		{"refused", addr, "", "127.0.0.1:9", errStatus, ""},
		// Without a proxy: a POST stream to the target's HTTP/2 sink (the
		// fake server echoes it, and asks for the credentials it would
		// ask a proxy for).
		{"no proxy", "", "", addr, errStatus, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := h2Dialer(tt.proxy, tt.auth, tt.target, pool)
			var errs errorLog
			tunnels := openParallel(context.Background(), d, 3, 2, &errs, echo)
			for _, tc := range tunnels {
				tc.Close()
			}
			if tt.wantErr != nil {
				if len(tunnels) != 0 || !strings.Contains(errs.firstText(), "answered 407") {
					t.Errorf("opened %d tunnels, first error %q; want none, refused", len(tunnels), errs.firstText())
				}
				return
			}
			if len(tunnels) != 3 || errs.n.Load() != 0 {
				t.Fatalf("opened %d tunnels with %d errors (%s), want 3 and 0", len(tunnels), errs.n.Load(), errs.firstText())
			}
			if _, first := seen(); first != tt.wantFirst {
				t.Errorf("first request = %q, want %q", first, tt.wantFirst)
			}
		})
	}
}

func TestH2SinkStream(t *testing.T) {
	addr, pool, seen := fakeH2Proxy(t, "", false)
	d := h2Dialer("", "", addr, pool)
	tc, err := d.dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if err := echo(tc); err != nil {
		t.Fatal(err)
	}
	if _, first := seen(); first != "POST "+addr+" "+H2SinkPath+" " {
		t.Errorf("first request = %q, want a POST to %s", first, H2SinkPath)
	}
}

func TestH2StreamDeadline(t *testing.T) {
	addr, pool, _ := fakeH2Proxy(t, "", false)
	d := h2Dialer(addr, "", "127.0.0.1:9", pool)
	tc, err := d.dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	// Nothing is sent, so nothing comes back: the read waits for the
	// deadline.
	tc.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := tc.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if _, err := tc.Write([]byte("x")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("write after the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	// A disarmed deadline does not end the stream.
	tc2, err := d.dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tc2.Close()
	tc2.SetDeadline(time.Now().Add(20 * time.Millisecond))
	tc2.SetDeadline(time.Time{})
	time.Sleep(50 * time.Millisecond)
	if err := echo(tc2); err != nil {
		t.Errorf("echo after a disarmed deadline: %v", err)
	}
}
