package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/proxy"

	"github.com/rustle-proxy/rustle/internal/leaktest"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestIdleInterceptedParksFrontEnds checks, for each front-end a tunnel
// can be intercepted from (a CONNECT on the plain port, SOCKS5 and
// SOCKS4a CONNECT on the socks5 port, a CONNECT and a SOCKS5 CONNECT on
// the mixed port, a CONNECT on the https port, whose tunnel runs inside
// the client's TLS to the proxy, a CONNECT stream of HTTP/2 on the
// https port, whose tunnel runs inside the stream), that an
// intercepted HTTP/1.1
// connection idle between requests keeps no goroutine of the proxy's
// (none serving the connection, none in the HTTP/1.1 front-end: it
// waits on its socket through tunnel.Parker.Notify, on Linux only),
// and so does one whose client chose h2 (a CONNECT on the plain port,
// on the https port, and a CONNECT stream of HTTP/2), with no stream
// open, none in the HTTP/2 front-end:
// after one request, after two back to back in one write (one TLS
// record), after one split across TLS records, and after two in two
// TLS records sent in one write (on the https port: in one record of
// the outer TLS), each answered. Then Server.Shutdown ends the parked
// connection (the client sees its end, after a GOAWAY on h2; Shutdown
// returns before its deadline) and the access log has the tunnel's
// record and those of its six requests.
func TestIdleInterceptedParksFrontEnds(t *testing.T) {
	target, upstreamCA := pathOrigin(t)
	_, port, _ := net.SplitHostPort(target)

	connect := func(t *testing.T, addr string) net.Conn { return proxytest.Connect(t, addr, target) }
	proxyTLS, proxyRoots := proxyCerts(t)
	connectTLS := func(t *testing.T, addr string) net.Conn {
		pc, err := tls.DialWithDialer(&net.Dialer{Timeout: proxytest.DefaultTimeout}, "tcp", addr,
			&tls.Config{RootCAs: proxyRoots, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatalf("TLS to the proxy: %v", err)
		}
		t.Cleanup(func() { pc.Close() })
		return proxytest.ConnectOn(t, pc, target)
	}
	connectH2 := func(t *testing.T, addr string) net.Conn {
		pc, err := tls.DialWithDialer(&net.Dialer{Timeout: proxytest.DefaultTimeout}, "tcp", addr,
			&tls.Config{RootCAs: proxyRoots, ServerName: "localhost", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatalf("TLS to the proxy: %v", err)
		}
		t.Cleanup(func() { pc.Close() })
		cc, err := (&http2.Transport{}).NewClientConn(pc)
		if err != nil {
			t.Fatalf("HTTP/2 to the proxy: %v", err)
		}
		c, _ := proxytest.H2Connect(t, cc, target)
		return c
	}
	socks := func(t *testing.T, addr string) net.Conn {
		d, err := proxy.SOCKS5("tcp", addr, nil, &net.Dialer{Timeout: proxytest.DefaultTimeout})
		if err != nil {
			t.Fatal(err)
		}
		c, err := d.Dial("tcp", target)
		if err != nil {
			t.Fatalf("SOCKS5 CONNECT %s through %s: %v", target, addr, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	socks4a := func(t *testing.T, addr string) net.Conn {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			t.Fatal(err)
		}
		return proxytest.SOCKS4aConnect(t, addr, "localhost", uint16(p))
	}
	for _, tc := range []struct {
		name, protocol string
		dial           func(*testing.T, string) net.Conn
		h2             bool // the client offers h2 only inside the tunnel
	}{
		{"connect", "http", connect, false},
		{"socks5", "socks5", socks, false},
		{"mixed-connect", "mixed", connect, false},
		{"mixed-socks5", "mixed", socks, false},
		{"socks4a", "socks5", socks4a, false},
		{"https-connect", "https", connectTLS, false},
		{"connect-h2", "http", connect, true},
		{"https-connect-h2", "https", connectTLS, true},
		{"h2-stream-connect", "https", connectH2, false},
		{"h2-stream-connect-h2", "https", connectH2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, ca := interceptLocalConfig(t, t.TempDir(), upstreamCA, 100*time.Millisecond)
			cfg.Listen[0].Protocol = tc.protocol
			if tc.protocol == "https" {
				cfg.Listen[0].TLS = proxyTLS
				cfg.Listen[0].ALPN = []string{"http/1.1"}
				if strings.HasPrefix(tc.name, "h2-stream") {
					cfg.Listen[0].ALPN = []string{"h2"}
				}
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("config: %v", err)
			}
			access := &logBuffer{}
			s, addrs := startLogged(t, cfg, nil, access)
			roots := x509.NewCertPool()
			roots.AddCert(ca)

			hc := &proxytest.HoldConn{Conn: tc.dial(t, addrs["plain"])}
			hc.SetDeadline(time.Now().Add(4 * proxytest.DefaultTimeout))
			alpn := "http/1.1"
			if tc.h2 {
				alpn = "h2"
			}
			cc := tls.Client(hc, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{alpn}})
			br := bufio.NewReader(cc)
			req := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n" }
			answer := func(path string) {
				t.Helper()
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("%s: read the response: %v", path, err)
				}
				body, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != 200 || string(body) != path {
					t.Fatalf("%s: %d %q, %v", path, resp.StatusCode, body, err)
				}
			}
			var h2c *proxytest.H2Client
			if tc.h2 {
				if err := cc.Handshake(); err != nil {
					t.Fatalf("TLS inside the tunnel: %v", err)
				}
				if p := cc.ConnectionState().NegotiatedProtocol; p != "h2" {
					t.Fatalf("ALPN inside the tunnel %q, want h2", p)
				}
				var err error
				if h2c, err = proxytest.NewH2Client(cc); err != nil {
					t.Fatal(err)
				}
				// Stream n+1 asks for /n: req and answer speak HTTP/2.
				req = func(path string) string {
					n, _ := strconv.Atoi(path[1:])
					return string(h2c.Get(uint32(2*n-1), target, path))
				}
				answer = func(path string) {
					t.Helper()
					n, _ := strconv.Atoi(path[1:])
					status, body, err := h2c.Answer(uint32(2*n - 1))
					if err != nil || status != "200" || string(body) != path {
						t.Fatalf("%s: %s %q, %v", path, status, body, err)
					}
				}
			}
			write := func(s string) {
				t.Helper()
				if _, err := io.WriteString(cc, s); err != nil {
					t.Fatalf("write: %v", err)
				}
			}
			// parked waits for the connection to be let go of by every
			// goroutine that served it: the front-end's, which read the
			// CONNECT, and the HTTP/1.1 front-end's inside the tunnel.
			parked := func(after string) {
				t.Helper()
				err := leaktest.Check(proxytest.DefaultTimeout,
					"rustle/internal/server.(*Server).serveConn", "rustle/internal/socks5.", "rustle/internal/httpproxy.(*conn)",
					"rustle/internal/h2.(*conn)", "rustle/internal/h2.(*stream)")
				if err != nil {
					t.Fatalf("after %s, a goroutine waits for the idle intercepted connection: %v", after, err)
				}
			}

			write(req("/1"))
			answer("/1")
			parked("one request")
			write(req("/2") + req("/3"))
			answer("/2")
			answer("/3")
			parked("two requests back to back")
			r4 := req("/4")
			write(r4[:5])
			write(r4[5:])
			answer("/4")
			parked("a request in two records")
			hc.Hold()
			write(req("/5"))
			write(req("/6"))
			if err := hc.Flush(); err != nil {
				t.Fatalf("write: %v", err)
			}
			answer("/5")
			answer("/6")
			parked("two requests in two records sent in one write")

			ctx, cancel := context.WithTimeout(context.Background(), proxytest.DefaultTimeout)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v: the parked intercepted connection was not ended", err)
			}
			if h2c != nil {
				if g, err := h2c.ReadToEnd(proxytest.DefaultTimeout); err != nil || g == nil {
					t.Fatalf("after Shutdown: GOAWAY %v, %v; want a GOAWAY, then the connection's end", g, err)
				}
			} else if n, err := br.Read(make([]byte, 1)); err == nil {
				t.Fatalf("the client read %d bytes after Shutdown, want the connection's end", n)
			}
			var tunnels, inner int
			for _, r := range proxytest.JSONRecords[icRecord](t, access, 7) { // the tunnel's record and its 6 requests'
				switch {
				case r.Method == "CONNECT" && r.Intercepted:
					tunnels++
				case r.Method == "GET" && strings.HasPrefix(r.Target, "https://"+target+"/") && r.Status == 200 && r.Intercepted:
					inner++
				}
			}
			if tunnels != 1 || inner != 6 {
				t.Fatalf("access log: %d intercepted tunnels and %d of their requests, want 1 and 6:\n%s", tunnels, inner, access.String())
			}
		})
	}
}

// pathOrigin starts an HTTPS origin (HTTP/1.1) that answers each request
// with its path, and returns its address as localhost:port and the file
// of its certificate, for intercept.upstream_ca.
func pathOrigin(t *testing.T) (target, upstreamCA string) {
	t.Helper()
	cert, _ := proxytest.SelfSigned(t)
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	origin.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}
	origin.StartTLS()
	t.Cleanup(origin.Close)
	upstreamCA = filepath.Join(t.TempDir(), "origin.pem")
	if err := os.WriteFile(upstreamCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(origin.Listener.Addr().String())
	return net.JoinHostPort("localhost", port), upstreamCA
}

// TestIdleInterceptedOuterKeyUpdate checks that an intercepted
// connection that came by a CONNECT on the https port, parked between
// requests, stays parked when the client's TLS session with the proxy
// (OpenSSL's s_client, the tunnel and its TLS inside) sends records that
// hold no application data: a KeyUpdate, then one that asks for one
// back, which the proxy answers. Each wakes the wait on the socket;
// neither may leave a goroutine of the proxy's waiting for the next
// record (nor the buffer it reads the outer plaintext into). The next
// requests, under the new keys, are answered, each parked after, for
// HTTP/1.1 and h2 inside the tunnel; Shutdown then ends the connection.
func TestIdleInterceptedOuterKeyUpdate(t *testing.T) {
	target, upstreamCA := pathOrigin(t)
	proxyTLS, _ := proxyCerts(t)
	for _, h2 := range []bool{false, true} {
		name, alpn := "http1", "http/1.1"
		if h2 {
			name, alpn = "h2", "h2"
		}
		t.Run(name, func(t *testing.T) {
			cfg, ca := interceptLocalConfig(t, t.TempDir(), upstreamCA, 100*time.Millisecond)
			cfg.Listen[0].Protocol = "https"
			cfg.Listen[0].TLS = proxyTLS
			cfg.Listen[0].ALPN = []string{"http/1.1"}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("config: %v", err)
			}
			s, addrs := startLogged(t, cfg, nil, &logBuffer{})
			roots := x509.NewCertPool()
			roots.AddCert(ca)

			sc := proxytest.StartSClient(t, addrs["plain"], "-alpn", "http/1.1")
			tunnel := proxytest.ConnectOn(t, sc, target)
			tunnel.SetDeadline(time.Now().Add(4 * proxytest.DefaultTimeout))
			cc := tls.Client(tunnel, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{alpn}})
			if err := cc.Handshake(); err != nil {
				t.Fatalf("TLS inside the tunnel: %v", err)
			}
			if p := cc.ConnectionState().NegotiatedProtocol; p != alpn {
				t.Fatalf("ALPN inside the tunnel %q, want %q", p, alpn)
			}
			get, answer := innerExchange(t, cc, h2, target)
			parked := func(after string) { t.Helper(); checkParked(t, after) }

			get("/1")
			answer("/1")
			parked("one request")
			// A KeyUpdate that asks for none back, then one that asks
			// for one: the answer to the second says that the proxy
			// has read both.
			got := sc.Received("KeyUpdate")
			sc.KeyUpdate(t, false)
			sc.KeyUpdate(t, true)
			sc.AwaitReceived(t, "KeyUpdate", got+1)
			parked("two KeyUpdates of the outer TLS session")
			get("/2")
			answer("/2")
			parked("a request after the KeyUpdates")
			sc.KeyUpdate(t, true)
			sc.AwaitReceived(t, "KeyUpdate", got+2)
			parked("a third KeyUpdate")
			get("/3")
			answer("/3")

			ctx, cancel := context.WithTimeout(context.Background(), proxytest.DefaultTimeout)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v: the parked intercepted connection was not ended", err)
			}
		})
	}
}

// TestIdleInterceptedKeyUpdateSoon checks that an intercepted
// connection whose client sends a TLS record with no application data
// in it (a KeyUpdate) right after reading an answer, while the
// connection still waits for its next request on its goroutine (before
// it parks, httpproxy's parkAfter), parks all the same: no goroutine of
// the proxy's is left waiting for the next record (nor the buffer it
// would read it into) until the idle timeout. The KeyUpdates are
// OpenSSL's s_client's: on the plain port it is the client inside the
// tunnel (-proxy: its KeyUpdates are those of the intercepted TLS
// session); on the https port it is the client's TLS session with the
// proxy (the outer one), with the tunnel's TLS inside it; on the https
// port with an HTTP/2 CONNECT stream for the tunnel (h2-stream), it is
// the client inside the tunnel again, its TCP connection bridged into
// the stream (proxytest.Bridge), so that the intercepted connection's
// wait is on the stream's DATA, not on a socket. Each with HTTP/1.1 and
// h2 inside the tunnel (where s_client is the client inside it, the
// test writes the h2 frames to its input: none starts with one of its
// command letters, see proxytest.SClient). Each case sends a KeyUpdate that asks for none back, then one
// that asks for one, whose answer says that the proxy has read both;
// the next request is answered, and logged; then two more, once the
// connection is parked, leave it parked too.
func TestIdleInterceptedKeyUpdateSoon(t *testing.T) {
	target, upstreamCA := pathOrigin(t)
	proxyTLS, proxyRoots := proxyCerts(t)
	for _, tc := range []struct {
		name, protocol, alpn string
	}{
		{"connect-inner", "http", "http/1.1"},
		{"connect-inner-h2", "http", "h2"},
		{"https-connect-outer", "https", "http/1.1"},
		{"https-connect-outer-h2", "https", "h2"},
		{"h2-stream-inner", "https", "http/1.1"},
		{"h2-stream-inner-h2", "https", "h2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := strings.HasPrefix(tc.name, "h2-stream")
			cfg, ca := interceptLocalConfig(t, t.TempDir(), upstreamCA, 100*time.Millisecond)
			cfg.Listen[0].Protocol = tc.protocol
			if tc.protocol == "https" {
				cfg.Listen[0].TLS = proxyTLS
				cfg.Listen[0].ALPN = []string{"http/1.1"}
				if stream {
					cfg.Listen[0].ALPN = []string{"h2"}
				}
			}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("config: %v", err)
			}
			access := &logBuffer{}
			s, addrs := startLogged(t, cfg, nil, access)

			// sc sends the KeyUpdates; rw carries the requests.
			var sc *proxytest.SClient
			var rw io.ReadWriter
			switch {
			case stream:
				pc, err := tls.DialWithDialer(&net.Dialer{Timeout: proxytest.DefaultTimeout}, "tcp", addrs["plain"],
					&tls.Config{RootCAs: proxyRoots, ServerName: "localhost", NextProtos: []string{"h2"}})
				if err != nil {
					t.Fatalf("TLS to the proxy: %v", err)
				}
				t.Cleanup(func() { pc.Close() })
				h2cc, err := (&http2.Transport{}).NewClientConn(pc)
				if err != nil {
					t.Fatalf("HTTP/2 to the proxy: %v", err)
				}
				tunnel, _ := proxytest.H2Connect(t, h2cc, target)
				sc = proxytest.StartSClient(t, proxytest.Bridge(t, tunnel), "-servername", "localhost", "-alpn", tc.alpn)
				sc.SetDeadline(time.Now().Add(4 * proxytest.DefaultTimeout))
				rw = sc
			case tc.protocol == "https":
				sc = proxytest.StartSClient(t, addrs["plain"], "-alpn", "http/1.1")
				tunnel := proxytest.ConnectOn(t, sc, target)
				tunnel.SetDeadline(time.Now().Add(4 * proxytest.DefaultTimeout))
				roots := x509.NewCertPool()
				roots.AddCert(ca)
				cc := tls.Client(tunnel, &tls.Config{RootCAs: roots, ServerName: "localhost", NextProtos: []string{tc.alpn}})
				if err := cc.Handshake(); err != nil {
					t.Fatalf("TLS inside the tunnel: %v", err)
				}
				if p := cc.ConnectionState().NegotiatedProtocol; p != tc.alpn {
					t.Fatalf("ALPN inside the tunnel %q, want %q", p, tc.alpn)
				}
				rw = cc
			default:
				sc = proxytest.StartSClient(t, target, "-proxy", addrs["plain"], "-servername", "localhost", "-alpn", tc.alpn)
				sc.SetDeadline(time.Now().Add(4 * proxytest.DefaultTimeout))
				rw = sc
			}
			get, answer := innerExchange(t, rw, tc.alpn == "h2", target)
			parked := func(after string) { t.Helper(); checkParked(t, after) }

			keyUpdates := func(after string) {
				t.Helper()
				got := sc.Received("KeyUpdate")
				sc.KeyUpdate(t, false)
				sc.KeyUpdate(t, true)
				sc.AwaitReceived(t, "KeyUpdate", got+1)
				parked(after)
			}
			for i, path := range []string{"/1", "/2"} {
				get(path)
				answer(path)
				keyUpdates("KeyUpdates sent right after answer " + strconv.Itoa(i+1))
			}
			keyUpdates("KeyUpdates sent to the parked connection")
			get("/3")
			answer("/3")

			ctx, cancel := context.WithTimeout(context.Background(), proxytest.DefaultTimeout)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v: the parked intercepted connection was not ended", err)
			}
			inner := 0
			for _, r := range proxytest.JSONRecords[icRecord](t, access, 4) { // the tunnel's record and its 3 requests'
				if r.Method == "GET" && strings.HasPrefix(r.Target, "https://"+target+"/") && r.Status == 200 && r.Intercepted {
					inner++
				}
			}
			if inner != 3 {
				t.Fatalf("access log: %d intercepted requests, want 3:\n%s", inner, access.String())
			}
		})
	}
}

// innerExchange returns get, which sends a GET of path on rw, the
// client's connection inside an intercepted tunnel (HTTP/1.1, or h2
// where h2 is set: stream 2n-1 asks for /n), and answer, which reads
// its answer and fails t unless it is 200 with path for its body.
func innerExchange(t *testing.T, rw io.ReadWriter, h2 bool, target string) (get, answer func(path string)) {
	t.Helper()
	if h2 {
		h2c, err := proxytest.NewH2Client(rw.(net.Conn))
		if err != nil {
			t.Fatal(err)
		}
		get = func(path string) {
			t.Helper()
			n, _ := strconv.Atoi(path[1:])
			if _, err := rw.Write(h2c.Get(uint32(2*n-1), target, path)); err != nil {
				t.Fatalf("%s: write: %v", path, err)
			}
		}
		answer = func(path string) {
			t.Helper()
			n, _ := strconv.Atoi(path[1:])
			status, body, err := h2c.Answer(uint32(2*n - 1))
			if err != nil || status != "200" || string(body) != path {
				t.Fatalf("%s: %s %q, %v", path, status, body, err)
			}
		}
		return get, answer
	}
	get = func(path string) {
		t.Helper()
		if _, err := io.WriteString(rw, "GET "+path+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n"); err != nil {
			t.Fatalf("%s: write: %v", path, err)
		}
	}
	br := bufio.NewReader(rw)
	answer = func(path string) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: read the response: %v", path, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || string(body) != path {
			t.Fatalf("%s: %d %q, %v", path, resp.StatusCode, body, err)
		}
	}
	return get, answer
}

// checkParked fails t, saying after what, unless no goroutine of the
// proxy's is left waiting for an idle intercepted connection.
func checkParked(t *testing.T, after string) {
	t.Helper()
	err := leaktest.Check(proxytest.DefaultTimeout,
		"rustle/internal/server.(*Server).serveConn", "rustle/internal/httpproxy.(*conn)", "rustle/internal/h2.(*conn)",
		"rustle/internal/h2.(*stream)")
	if err != nil {
		t.Fatalf("after %s, a goroutine waits for the idle intercepted connection: %v", after, err)
	}
}
