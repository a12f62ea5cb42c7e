package intercept_test

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/proxy"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/leaktest"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestIdleInterceptedParks checks that an intercepted HTTP/1.1
// connection idle between requests keeps no goroutine of the proxy's
// (none is in the HTTP/1.1 front-end: it waits on its socket through
// tunnel.Parker.Notify), whichever front-end the tunnel came from (an
// HTTP CONNECT, served with ServeConnReadThen; a SOCKS5 CONNECT, with
// ServeConnThen), and that it serves on when the client sends: one
// request, then two back to back in one write, then one split across
// TLS records, each answered; closed by the client, the tunnel and
// every request inside are in the access log.
func TestIdleInterceptedParks(t *testing.T) {
	o := newOrigin(t, []string{"http/1.1"})
	for _, tc := range []struct {
		name   string
		socks  bool
		status int // the tunnel's status in the access log
	}{
		{"connect", false, 200},
		{"socks5", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) { testIdleInterceptedParks(t, o, tc.socks, tc.status) })
	}
}

func testIdleInterceptedParks(t *testing.T, o *tlsOrigin, socks bool, status int) {
	e := newEnv(t, envConfig{
		rules: []intercept.Rule{{Name: "api", Match: acl.Rule{Hosts: []string{"localhost"}}}},
		roots: o.roots,
		noH2:  true,
		socks: socks,
	})
	var c net.Conn
	if socks {
		d, err := proxy.SOCKS5("tcp", e.proxy, nil, &net.Dialer{Timeout: proxytest.DefaultTimeout})
		if err != nil {
			t.Fatal(err)
		}
		if c, err = d.Dial("tcp", o.host); err != nil {
			t.Fatalf("SOCKS5 CONNECT %s: %v", o.host, err)
		}
		t.Cleanup(func() { c.Close() })
	} else {
		c = proxytest.Connect(t, e.proxy, o.host)
	}
	c.SetDeadline(time.Now().Add(2 * proxytest.DefaultTimeout))
	tc := tls.Client(c, &tls.Config{RootCAs: e.ca, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
	br := bufio.NewReader(tc)
	req := func(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: " + o.host + "\r\n\r\n" }
	answer := func(path string) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("read the answer to %s: %v", path, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || !strings.Contains(string(b), "path="+path+" ") {
			t.Fatalf("GET %s: %d %q %v", path, resp.StatusCode, b, err)
		}
	}
	// parked waits for the front-end to let go of the idle connection:
	// for at most half the front-end's idle timeout (10s), after which
	// it would close the connection, its goroutine gone too.
	parked := func(after string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			st := leaktest.Stacks("rustle/internal/httpproxy.(*conn)", "rustle/internal/socks5.")
			if len(st) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %s, a goroutine of the front-ends waits for the idle connection:\n%s", after, st[0])
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	write := func(s string) {
		t.Helper()
		if _, err := io.WriteString(tc, s); err != nil {
			t.Fatalf("write %q: %v", s, err)
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
	tc.Close()

	recs := e.records(t, 5)
	var inner, tunnels int
	for _, r := range recs {
		switch {
		case r.Method == "CONNECT":
			tunnels++
			if !r.Intercepted || r.Status != status || r.Reason != "" {
				t.Errorf("tunnel record %+v", r)
			}
		case r.Intercepted && r.Status == 200:
			inner++
		default:
			t.Errorf("record %+v", r)
		}
	}
	if tunnels != 1 || inner != 4 {
		t.Errorf("%d tunnels, %d requests, want 1 and 4:\n%s", tunnels, inner, e.log.String())
	}
	parked("the client closed")
}

// TestParkedKeepsUpstream checks that an intercepted HTTP/1.1
// connection parked between requests with its origin connection kept
// (the conn holds it apart from the work it lends back) serves its next
// request on that origin connection, to an origin that speaks
// HTTP/1.1 and to one that speaks HTTP/2 (whose bridge waits for the
// request holding no buffer): the origin sees one connection for
// three requests, each made once the client connection had parked.
func TestParkedKeepsUpstream(t *testing.T) {
	for _, proto := range []string{"http/1.1", "h2"} {
		t.Run(proto, func(t *testing.T) {
			o := newOrigin(t, []string{proto})
			e := newEnv(t, envConfig{
				rules: []intercept.Rule{{Name: "api", Match: acl.Rule{Hosts: []string{"localhost"}}}},
				roots: o.roots,
				noH2:  true,
				pool:  true, // without a pool, no upstream is kept
			})
			c := proxytest.Connect(t, e.proxy, o.host)
			c.SetDeadline(time.Now().Add(2 * proxytest.DefaultTimeout))
			tc := tls.Client(c, &tls.Config{RootCAs: e.ca, ServerName: "localhost", NextProtos: []string{"http/1.1"}})
			br := bufio.NewReader(tc)
			want := "HTTP/1.1"
			if proto == "h2" {
				want = "HTTP/2.0"
			}
			for _, path := range []string{"/1", "/2", "/3"} {
				if _, err := io.WriteString(tc, "GET "+path+" HTTP/1.1\r\nHost: "+o.host+"\r\n\r\n"); err != nil {
					t.Fatalf("write %s: %v", path, err)
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatalf("read the answer to %s: %v", path, err)
				}
				b, err := io.ReadAll(resp.Body)
				if err != nil || resp.StatusCode != 200 || !strings.Contains(string(b), "proto="+want+" method=GET path="+path+" ") {
					t.Fatalf("GET %s: %d %q %v", path, resp.StatusCode, b, err)
				}
				// Parked: no goroutine of the front-end waits for the
				// client (see testIdleInterceptedParks).
				proxytest.WaitFor(t, "the idle connection parked", func() bool {
					return len(leaktest.Stacks("rustle/internal/httpproxy.(*conn)")) == 0
				})
			}
			if n := o.conns.Load(); n != 1 {
				t.Errorf("the origin accepted %d connections for the three requests, want 1", n)
			}
		})
	}
}
