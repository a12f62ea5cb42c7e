package httpproxy_test

import (
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// TestRejectedRequests sends malformed and ambiguous requests, request
// smuggling shapes among them: each gets its status and a closed
// connection, and nothing reaches the origin.
func TestRejectedRequests(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setup(t, testCfg{}, proxytest.Respond(200, "must not be reached"))
	u, h := o.URL("/"), "Host: "+o.Addr+"\r\n"
	tests := []struct {
		name   string
		req    string
		status int
	}{
		{"origin-form", "GET / HTTP/1.1\r\n" + h + "\r\n", 400},
		{"asterisk-form", "OPTIONS * HTTP/1.1\r\n" + h + "\r\n", 400},
		{"https scheme", "GET https://" + o.Addr + "/ HTTP/1.1\r\n" + h + "\r\n", 400},
		{"userinfo", "GET http://u:p@" + o.Addr + "/ HTTP/1.1\r\n" + h + "\r\n", 400},
		{"fragment", "GET " + u + "#frag HTTP/1.1\r\n" + h + "\r\n", 400},
		{"bad port", "GET http://127.0.0.1:99999/ HTTP/1.1\r\n" + h + "\r\n", 400},
		{"Content-Length and Transfer-Encoding", "POST " + u + " HTTP/1.1\r\n" + h + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"Transfer-Encoding and Content-Length", "POST " + u + " HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 400},
		{"gzip, chunked", "POST " + u + " HTTP/1.1\r\n" + h + "Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n", 501},
		{"chunked, gzip", "POST " + u + " HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 400},
		{"chunked twice", "POST " + u + " HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"identity", "POST " + u + " HTTP/1.1\r\n" + h + "Transfer-Encoding: identity\r\n\r\n", 400},
		{"xchunked", "POST " + u + " HTTP/1.1\r\n" + h + "Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 400},
		{"Transfer-Encoding in HTTP/1.0", "POST " + u + " HTTP/1.0\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400},
		{"conflicting Content-Length", "POST " + u + " HTTP/1.1\r\n" + h + "Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!", 400},
		{"Content-Length list", "POST " + u + " HTTP/1.1\r\n" + h + "Content-Length: 5, 5\r\n\r\nhello", 400},
		{"signed Content-Length", "POST " + u + " HTTP/1.1\r\n" + h + "Content-Length: +5\r\n\r\nhello", 400},
		{"huge Content-Length", "POST " + u + " HTTP/1.1\r\n" + h + "Content-Length: 99999999999999999999\r\n\r\n", 400},
		{"space before colon", "POST " + u + " HTTP/1.1\r\n" + h + "Content-Length : 5\r\n\r\nhello", 400},
		{"obs-fold", "GET " + u + " HTTP/1.1\r\n" + h + "X-A: 1\r\n  folded\r\n\r\n", 400},
		{"bare LF", "GET " + u + " HTTP/1.1\r\n" + h + "X-A: 1\nX-B: 2\r\n\r\n", 400},
		{"bare CR", "GET " + u + " HTTP/1.1\r\n" + h + "X-A: 1\rX-B: 2\r\n\r\n", 400},
		{"NUL in value", "GET " + u + " HTTP/1.1\r\n" + h + "X-A: a\x00b\r\n\r\n", 400},
		{"duplicate Host", "GET " + u + " HTTP/1.1\r\n" + h + h + "\r\n", 400},
		{"bad method", "GE(T " + u + " HTTP/1.1\r\n" + h + "\r\n", 400},
		{"HTTP/2.0", "GET " + u + " HTTP/2.0\r\n" + h + "\r\n", 505},
		{"malformed version", "GET " + u + " HTTP/1.10\r\n" + h + "\r\n", 400},
		{"malformed chunk size", "POST " + u + " HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n", 400},
		{"chunk size overflow", "POST " + u + " HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n", 400},
		{"chunk without CRLF", "POST " + u + " HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n", 400},
		{"CONNECT without port", "CONNECT 127.0.0.1 HTTP/1.1\r\n" + h + "\r\n", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := proxytest.Dial(t, proxy)
			r, _ := c.RoundTrip(tt.req)
			if r.Status != tt.status {
				t.Errorf("status %d, want %d: %q %q", r.Status, tt.status, r.Head, r.Body)
			}
			checkOneLineReason(t, r)
			c.ExpectClosed()
		})
	}
	if o.Conns() != 0 || o.NumRequests() != 0 {
		t.Errorf("origin got %d connections and %d requests, want none", o.Conns(), o.NumRequests())
	}
}

func TestHeadTooLarge(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setup(t, testCfg{MaxHeaderBytes: 4096}, proxytest.Respond(200, "ok"))
	o.Handle("/big-answer", proxytest.Respond(200, "ok", "X-Big: "+strings.Repeat("b", 5000)))

	c := proxytest.Dial(t, proxy)
	r, _ := c.RoundTrip(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr, "X-Big: "+strings.Repeat("a", 5000)))
	if r.Status != 431 {
		t.Errorf("request head over the limit: %q", r.Head)
	}
	checkOneLineReason(t, r)
	c.ExpectClosed()
	if o.NumRequests() != 0 {
		t.Errorf("origin got %d requests", o.NumRequests())
	}

	// Just under the limit passes.
	c = proxytest.Dial(t, proxy)
	if r, _ := c.RoundTrip(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr, "X-Big: "+strings.Repeat("a", 3000))); r.Status != 200 {
		t.Errorf("request head under the limit: %q", r.Head)
	}

	c = proxytest.Dial(t, proxy)
	r, _ = c.RoundTrip(get(o, "/big-answer"))
	if r.Status != 502 {
		t.Errorf("response head over the limit: %q", r.Head)
	}
	checkOneLineReason(t, r)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	basic := basicAuth
	o, proxy, _ := setupPolicy(t, testCfg{}, proxytest.PolicyConfig{Users: map[string]string{"u": "p"}}, proxytest.Respond(200, "ok"))
	echo := proxytest.NewEcho(t)
	tests := []struct {
		name   string
		header []string
		status int
	}{
		{"missing", nil, 407},
		{"wrong password", []string{basic("u", "x")}, 407},
		{"unknown user", []string{basic("x", "p")}, 407},
		{"not base64", []string{"Proxy-Authorization: Basic !!!"}, 407},
		{"other scheme", []string{"Proxy-Authorization: Bearer abc"}, 407},
		{"right", []string{basic("u", "p")}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := proxytest.Dial(t, proxy)
			n := o.NumRequests()
			r, _ := c.RoundTrip(request("GET", o.URL("/"), 1, "", append([]string{"Host: " + o.Addr}, tt.header...)...))
			if r.Status != tt.status {
				t.Fatalf("answer %q", r.Head)
			}
			if tt.status == 200 {
				if got := o.Requests()[n]; got.Header.Has("Proxy-Authorization") {
					t.Errorf("credentials forwarded: %q", got.Head)
				}
				return
			}
			if got := r.Header.Get("Proxy-Authenticate"); got != `Basic realm="rustle"` {
				t.Errorf("Proxy-Authenticate %q", got)
			}
			if o.NumRequests() != n {
				t.Errorf("refused request reached the origin")
			}
			// A refused request without a body leaves the connection
			// open for the retry with credentials.
			r, _ = c.RoundTrip(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr, basic("u", "p")))
			if r.Status != 200 {
				t.Errorf("retry with credentials: %q", r.Head)
			}
		})
	}
	t.Run("refused with a body closes", func(t *testing.T) {
		c := proxytest.Dial(t, proxy)
		r, _ := c.RoundTrip(request("POST", o.URL("/"), 1, "body", "Host: "+o.Addr))
		if r.Status != 407 || r.Header.Get("Connection") != "close" {
			t.Fatalf("answer %q", r.Head)
		}
		c.ExpectClosed()
	})
	t.Run("CONNECT", func(t *testing.T) {
		c := proxytest.Dial(t, proxy)
		r, _ := c.RoundTrip("CONNECT " + echo.Addr + " HTTP/1.1\r\nHost: " + echo.Addr + "\r\n\r\n")
		if r.Status != 407 || echo.Conns() != 0 {
			t.Fatalf("CONNECT without credentials: %q, %d tunnels", r.Head, echo.Conns())
		}
		tc := proxytest.Connect(t, proxy, echo.Addr, basic("u", "p"))
		checkEcho(t, tc, []byte("through the tunnel"))
	})
}

func TestUpstreamErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		handler proxytest.Handler
		status  int
		reason  string // in the body
	}{
		{"garbage", proxytest.Raw("garbage\r\n\r\n"), 502, "malformed response"},
		{"short status code", proxytest.Raw("HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n"), 502, "malformed response"},
		{"HTTP/2 status line", proxytest.Raw("HTTP/2 200\r\n\r\n"), 502, "malformed response"},
		{"header without colon", proxytest.Raw("HTTP/1.1 200 OK\r\nBad Header\r\nContent-Length: 0\r\n\r\n"), 502, "malformed response"},
		{"closed without answer", proxytest.Hangup(), 502, "closed the connection without a response"},
		{"closed mid-head", proxytest.ThenClose(proxytest.Raw("HTTP/1.1 200 OK\r\nX-A: ")), 502, "upstream"},
		{"101 not asked for", proxytest.Raw("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\n"), 502, "switched protocols"},
		{"never answers", proxytest.Hang(), 504, "did not answer in time"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, proxy, _ := setup(t, testCfg{ResponseHeaderTimeout: 300 * time.Millisecond}, tt.handler)
			c := proxytest.Dial(t, proxy)
			r, _ := c.RoundTrip(get(o, "/"))
			if r.Status != tt.status || !strings.Contains(string(r.Body), tt.reason) {
				t.Errorf("answer %q %q, want %d with %q", r.Head, r.Body, tt.status, tt.reason)
			}
			checkOneLineReason(t, r)
			c.ExpectClosed()
		})
	}
	t.Run("closed port", func(t *testing.T) {
		t.Parallel()
		_, proxy, _ := setup(t, testCfg{}, nil)
		addr := proxytest.ClosedPort(t)
		for _, req := range []string{
			"GET http://" + addr + "/ HTTP/1.1\r\nHost: " + addr + "\r\n\r\n",
			"CONNECT " + addr + " HTTP/1.1\r\nHost: " + addr + "\r\n\r\n",
		} {
			c := proxytest.Dial(t, proxy)
			r, _ := c.RoundTrip(req)
			if want := "rustle: connection to " + addr + " refused\n"; r.Status != 502 || string(r.Body) != want {
				t.Errorf("answer %q %q, want 502 %q", r.Head, r.Body, want)
			}
			checkOneLineReason(t, r)
			c.ExpectClosed()
		}
	})
}

func TestReadHeaderTimeout(t *testing.T) {
	t.Parallel()
	_, proxy, _ := setup(t, testCfg{ReadHeaderTimeout: 200 * time.Millisecond}, nil)
	t.Run("partial head", func(t *testing.T) {
		c := proxytest.Dial(t, proxy)
		c.Timeout = 5 * time.Second
		c.Write("GET http://127.0.0.1:1/ HTTP/1.1\r\nHost: x\r\n")
		r := c.ReadResponse("GET")
		if r.Status != 408 {
			t.Errorf("answer %q", r.Head)
		}
		checkOneLineReason(t, r)
		c.ExpectClosed()
	})
	t.Run("nothing sent", func(t *testing.T) {
		c := proxytest.Dial(t, proxy)
		c.Timeout = 5 * time.Second
		c.ExpectClosed()
	})
}

// serveOne serves the first connection accepted on a loopback listener
// with a Proxy for cfg, as the server does: in a session of pol under
// ctx, with a tunnel engine, whose admission release gives back (nil =
// none). It returns the listener's address and a channel closed once
// the session is closed.
func serveOne(t *testing.T, ctx context.Context, pol *gate.Policy, cfg testCfg, release func()) (string, <-chan struct{}) {
	t.Helper()
	p := newProxy(t, cfg)
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := tunnel.New(tunnel.Config{})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.AcceptTCP()
		ln.Close()
		if err != nil {
			return
		}
		sess := pol.NewSession(ctx, c.RemoteAddr().(*net.TCPAddr).AddrPort(), eng, release)
		sess.Attach(c)
		p.ServeConn(c, sess)
		sess.Close()
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		eng.Close()
	})
	return ln.Addr().String(), done
}

// TestServeConnCancel checks that ServeConn returns soon after its
// session's context is cancelled while it waits for a request head, with
// a long idle timeout that would otherwise keep it waiting.
func TestServeConnCancel(t *testing.T) {
	t.Parallel()
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{})
	t.Run("in the middle of a request", func(t *testing.T) {
		release := make(chan struct{})
		slow := proxytest.NewOrigin(t, func(x *proxytest.Exchange) {
			select {
			case <-release:
			case <-x.Done():
			}
			proxytest.Respond(200, "late")(x)
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		addr, done := serveOne(t, ctx, pol, testCfg{IdleTimeout: time.Hour}, nil)
		c := proxytest.Dial(t, addr)
		c.Write(get(slow, "/"))
		proxytest.WaitFor(t, "the request at the origin", func() bool { return slow.NumRequests() == 1 })
		cancel()
		close(release)
		// The request in progress is answered, and the answer says the
		// connection closes.
		r := c.ReadResponse("GET")
		if r.Status != 200 || string(r.Body) != "late" || r.Header.Get("Connection") != "close" {
			t.Errorf("answer %q %q", r.Head, r.Body)
		}
		c.ExpectClosed()
		<-done
	})
	for _, afterRequest := range []bool{false, true} {
		name := "before the first request"
		if afterRequest {
			name = "idle between requests"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			addr, done := serveOne(t, ctx, pol, testCfg{IdleTimeout: time.Hour, ReadHeaderTimeout: time.Hour}, nil)
			c := proxytest.Dial(t, addr)
			if afterRequest {
				if r, _ := c.RoundTrip(get(o, "/")); r.Status != 200 {
					t.Fatalf("answer %q", r.Head)
				}
			}
			time.Sleep(20 * time.Millisecond) // let it wait for a head
			cancel()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				c.Close()
				<-done
				t.Fatal("ServeConn still serving 5s after its context was cancelled")
			}
			c.ExpectClosed()
		})
	}
}

func basicAuth(user, pass string) string {
	return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// TestAccessPolicy checks that requests the policy refuses (HTTP, CONNECT,
// WebSocket) get 403 without reaching the origin, that the rule is not
// named in the answer, and that allowed requests pass.
func TestAccessPolicy(t *testing.T) {
	t.Parallel()
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	echo := proxytest.NewEcho(t)
	_, oport, _ := net.SplitHostPort(o.Addr)
	_, eport, _ := net.SplitHostPort(echo.Addr)
	proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{
		Rules: []acl.Rule{
			{Name: "secret-no-ws", Action: acl.Deny, Protocols: []string{"websocket"}},
			{Name: "secret-no-post", Action: acl.Deny, Methods: []string{"POST"}},
			{Name: "secret-no-admin", Action: acl.Deny, Paths: []string{"/admin/*"}},
			{Name: "web", Action: acl.Allow, Protocols: []string{"http"}, Ports: []string{oport}},
			{Name: "tunnels", Action: acl.Allow, Protocols: []string{"connect"}, Ports: []string{eport}},
		},
		Pool: proxytest.NewPool(t, dialer.PoolConfig{}),
	})

	c := proxytest.Dial(t, proxy)
	for _, tt := range []struct {
		req    string
		status int
	}{
		{request("GET", o.URL("/"), 1, "", "Host: "+o.Addr), 200},
		{request("POST", o.URL("/"), 1, "", "Host: "+o.Addr), 403},
		{request("GET", o.URL("/"), 1, "", "Host: "+o.Addr, "Connection: Upgrade", "Upgrade: websocket",
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"), 403},
		{request("GET", "http://"+echo.Addr+"/", 1, "", "Host: "+echo.Addr), 403}, // not the origin's port
		{request("GET", o.URL("/admin/x"), 1, "", "Host: "+o.Addr), 403},
		{request("GET", o.URL("/x/../admin/x?q"), 1, "", "Host: "+o.Addr), 403},
		{request("GET", o.URL("/administrator"), 1, "", "Host: "+o.Addr), 200},
		{request("GET", o.URL("/again"), 1, "", "Host: "+o.Addr), 200}, // still keep-alive
	} {
		n := o.NumRequests()
		r, _ := c.RoundTrip(tt.req)
		if r.Status != tt.status {
			t.Fatalf("%q: answer %q, want %d", tt.req, r.Head, tt.status)
		}
		if tt.status == 403 {
			if strings.Contains(string(r.Body), "secret") || !strings.Contains(string(r.Body), "denied") {
				t.Errorf("403 body %q: want a reason without the rule's name", r.Body)
			}
			if o.NumRequests() != n {
				t.Errorf("a refused request reached the origin")
			}
		}
	}

	r, _ := proxytest.Dial(t, proxy).RoundTrip("CONNECT " + o.Addr + " HTTP/1.1\r\nHost: " + o.Addr + "\r\n\r\n")
	if r.Status != 403 {
		t.Errorf("CONNECT to a port the policy does not allow: %q", r.Head)
	}
	checkEcho(t, proxytest.Connect(t, proxy, echo.Addr), []byte("allowed tunnel"))
}

// TestPrivateGuard checks the private-destination guard through the
// proxy: a loopback origin is refused with 403 unless the guard or the
// request's rule allows it, and a pooled connection to it is not reused
// for a request whose rule does not.
func TestPrivateGuard(t *testing.T) {
	t.Parallel()
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	echo := proxytest.NewEcho(t)

	t.Run("refused", func(t *testing.T) {
		proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{Guard: true})
		c := proxytest.Dial(t, proxy)
		r, _ := c.RoundTrip(get(o, "/"))
		if r.Status != 403 || !strings.Contains(string(r.Body), "private or local address") {
			t.Fatalf("answer %q %q", r.Head, r.Body)
		}
		checkOneLineReason(t, r)
		r, _ = proxytest.Dial(t, proxy).RoundTrip("CONNECT " + echo.Addr + " HTTP/1.1\r\nHost: " + echo.Addr + "\r\n\r\n")
		if r.Status != 403 || echo.Conns() != 0 {
			t.Fatalf("CONNECT to loopback: %q", r.Head)
		}
		if o.NumRequests() != 0 {
			t.Errorf("the origin saw %d requests", o.NumRequests())
		}
	})
	t.Run("allowed by the guard", func(t *testing.T) {
		proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{
			Guard: true, Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		})
		if r, _ := proxytest.Dial(t, proxy).RoundTrip(get(o, "/")); r.Status != 200 {
			t.Fatalf("answer %q", r.Head)
		}
	})
	t.Run("allowed by a rule, not reused for another", func(t *testing.T) {
		pool := proxytest.NewPool(t, dialer.PoolConfig{})
		proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{
			Guard: true,
			Users: map[string]string{"alice": "a", "bob": "b"},
			Rules: []acl.Rule{
				{Name: "alice-local", Action: acl.Allow, Users: []string{"alice"}, AllowPrivate: []string{"127.0.0.1/32"}},
				{Name: "others", Action: acl.Allow},
			},
			Pool: pool,
		})
		n := o.NumRequests()
		ca := proxytest.Dial(t, proxy)
		if r, _ := ca.RoundTrip(request("GET", o.URL("/a"), 1, "", "Host: "+o.Addr, basicAuth("alice", "a"))); r.Status != 200 {
			t.Fatalf("alice: %q", r.Head)
		}
		ca.Close() // its upstream goes to the pool
		proxytest.WaitFor(t, "the upstream connection to be pooled", func() bool { return pool.Len() == 1 })
		r, _ := proxytest.Dial(t, proxy).RoundTrip(request("GET", o.URL("/b"), 1, "", "Host: "+o.Addr, basicAuth("bob", "b")))
		if r.Status != 403 {
			t.Fatalf("bob through alice's pooled connection: %q", r.Head)
		}
		// On one client connection, the upstream alice's request left is
		// kept for the next request: bob may not use it either, and
		// alice still may.
		cb := proxytest.Dial(t, proxy)
		if r, _ := cb.RoundTrip(request("GET", o.URL("/a"), 1, "", "Host: "+o.Addr, basicAuth("alice", "a"))); r.Status != 200 {
			t.Fatalf("alice: %q", r.Head)
		}
		conns := o.Conns()
		if r, _ := cb.RoundTrip(request("GET", o.URL("/b"), 1, "", "Host: "+o.Addr, basicAuth("bob", "b"))); r.Status != 403 {
			t.Fatalf("bob through alice's kept connection: %q", r.Head)
		}
		if r, _ := proxytest.Dial(t, proxy).RoundTrip(request("GET", o.URL("/a"), 1, "", "Host: "+o.Addr, basicAuth("alice", "a"))); r.Status != 200 || o.Conns() != conns {
			t.Fatalf("alice again: %q after %d origin connections, want the pooled one of %d", r.Head, o.Conns(), conns)
		}
		if got := o.NumRequests() - n; got != 3 {
			t.Errorf("the origin saw %d requests, want alice's 3 only", got)
		}
		tc := proxytest.Connect(t, proxy, echo.Addr, basicAuth("alice", "a"))
		checkEcho(t, tc, []byte("alice's tunnel"))
	})
}

// TestLimiter checks the answers the Limiter drives: 429 with Retry-After
// once failed authentications start a cool-down, 429 past the per-user
// limit, and the admission and user count of a tunnel handed to the
// engine carried until it ends.
func TestLimiter(t *testing.T) {
	t.Parallel()
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	echo := proxytest.NewEcho(t)
	pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users:  map[string]string{"u": "p"},
		Limits: &limits.Config{AuthFailures: 2, AuthCooldown: 90 * time.Second, MaxConnsPerUser: 1},
	})
	proxy := proxytest.StartProxy(t, pol, serve(t, testCfg{}))
	// userFree reports whether no connection is counted for u.
	userFree := func() bool {
		if !pol.Limiter.UserConn("u") {
			return false
		}
		pol.Limiter.UserDone("u")
		return true
	}

	// The failures name v: the cool-down they start is v's, and leaves u
	// free to connect from the same address.
	c := proxytest.Dial(t, proxy)
	if r, _ := c.RoundTrip(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr, basicAuth("v", "x"))); r.Status != 407 {
		t.Fatalf("first wrong password: %q", r.Head)
	}
	// A request without credentials is not a failure: were it one, this
	// would start the cool-down.
	if r, _ := c.RoundTrip(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr)); r.Status != 407 {
		t.Fatalf("no credentials: %q", r.Head)
	}
	r, _ := c.RoundTrip(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr, basicAuth("v", "y")))
	if r.Status != 429 || r.Header.Get("Retry-After") != "90" {
		t.Fatalf("second wrong password: %q", r.Head)
	}
	c.ExpectClosed()

	c1 := proxytest.Dial(t, proxy)
	if r, _ := c1.RoundTrip(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr, basicAuth("u", "p"))); r.Status != 200 {
		t.Fatalf("first connection of u: %q", r.Head)
	}
	c2 := proxytest.Dial(t, proxy)
	if r, _ := c2.RoundTrip(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr, basicAuth("u", "p"))); r.Status != 429 {
		t.Fatalf("second connection of u: %q", r.Head)
	}
	c1.Close()
	proxytest.WaitFor(t, "the first connection's count to end", userFree)

	// A tunnel in the engine outlives ServeConn and its session: it
	// carries the connection's admission and user count until it ends.
	var released atomic.Int32
	addr, served := serveOne(t, context.Background(), pol, testCfg{}, func() { released.Add(1) })
	tc := proxytest.Connect(t, addr, echo.Addr, basicAuth("u", "p"))
	<-served
	if n := released.Load(); n != 0 || userFree() {
		t.Errorf("with the tunnel open: admission released %d times, user free %v; want held", n, userFree())
	}
	checkEcho(t, tc, []byte("tunnel"))
	tc.Close()
	proxytest.WaitFor(t, "the tunnel's counts to end", func() bool { return released.Load() == 1 && userFree() })
}

// TestPacedUser checks that a paced user's bodies and tunnels arrive
// whole, and no sooner than the byte rate allows.
func TestPacedUser(t *testing.T) {
	t.Parallel()
	const size = 96 << 10
	body := strings.Repeat("x", size)
	o := proxytest.NewOrigin(t, proxytest.Respond(200, body))
	echo := proxytest.NewEcho(t)
	proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{
		Users:  map[string]string{"u": "p"},
		Limits: &limits.Config{UserBytesPerSecond: 256 << 10, UserBytesBurst: 16 << 10},
	})

	start := time.Now()
	r, _ := proxytest.Dial(t, proxy).RoundTrip(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr, basicAuth("u", "p")))
	if r.Status != 200 || string(r.Body) != body {
		t.Fatalf("answer %q with %d bytes", r.Head, len(r.Body))
	}
	// 96 KiB at 256 KiB/s with 16 KiB of burst takes at least 0.31s.
	if el := time.Since(start); el < 280*time.Millisecond {
		t.Errorf("a paced 96 KiB response took %v, less than the rate allows", el)
	}
	tc := proxytest.Connect(t, proxy, echo.Addr, basicAuth("u", "p"))
	checkEcho(t, tc, []byte(body[:32<<10]))
}

// BenchmarkForward1KPolicy is BenchmarkForward1K with an access policy
// and the private-destination guard.
func BenchmarkForward1KPolicy(b *testing.B) {
	body := strings.Repeat("b", 1024)
	resp := "HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n" + body
	o := proxytest.NewStaticOrigin(b, resp)
	proxy := startProxy(b, testCfg{}, proxytest.PolicyConfig{
		Rules: []acl.Rule{
			{Name: "no-smtp", Action: acl.Deny, Ports: []string{"25"}},
			{Name: "no-metadata", Action: acl.Deny, Hosts: []string{"169.254.0.0/16", "*.internal"}},
			{Name: "rest", Action: acl.Allow},
		},
		Guard: true,
		Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")},
		Pool:  proxytest.NewPool(b, dialer.PoolConfig{}),
	})
	c := proxytest.Dial(b, proxy)
	req := []byte("GET http://" + o.Addr + "/1k HTTP/1.1\r\nHost: " + o.Addr + "\r\n\r\n")
	buf := make([]byte, len(resp))
	exchange := func() error {
		if _, err := c.Conn.Write(req); err != nil {
			return err
		}
		_, err := io.ReadFull(c.Conn, buf)
		return err
	}
	c.Conn.SetDeadline(time.Now().Add(5 * time.Minute))
	if err := exchange(); err != nil || string(buf) != resp {
		b.Fatalf("first exchange: %v, got %q", err, buf)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := exchange(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAuthRepeated checks a connection's requests that repeat, change
// and restore their Proxy-Authorization value: each is judged on its own
// value (an accepted value is no pass for another), every refused value
// counts as a failure, and the cool-down they start holds on a new
// connection, even with the accepted value. (That an
// accepted value is not hashed again on every request is the session's
// memo, which gate's tests see.)
func TestAuthRepeated(t *testing.T) {
	t.Parallel()
	good := basicAuth("u", "p")
	o, proxy, _ := setupPolicy(t, testCfg{}, proxytest.PolicyConfig{
		Users:  map[string]string{"u": "p"},
		Limits: &limits.Config{AuthFailures: 3, AuthCooldown: time.Minute},
	}, proxytest.Respond(200, "ok"))
	c := proxytest.Dial(t, proxy)
	steps := []struct {
		name   string
		header string
		status int
	}{
		{"good 1", good, 200},
		{"good 2", good, 200},
		{"good 3", good, 200},
		{"wrong after good", basicAuth("u", "wrong"), 407},
		{"wrong again", basicAuth("u", "wrong"), 407},
		{"good again", good, 200},
		{"good once more", good, 200},
		{"third failure cools down", basicAuth("u", "other"), 429},
	}
	for _, st := range steps {
		r, _ := c.RoundTrip(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr, st.header))
		if r.Status != st.status {
			t.Fatalf("%s: %q, want %d", st.name, r.Head, st.status)
		}
	}
	c.ExpectClosed()
	// The cool-down holds on every connection, the right password too.
	if r, _ := proxytest.Dial(t, proxy).RoundTrip(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr, good)); r.Status != 429 {
		t.Fatalf("new connection while cooling down: %q, want 429", r.Head)
	}
}
