package httpproxy_test

import (
	"context"
	"encoding/base64"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestRejectedRequests sends malformed and ambiguous requests, request
// smuggling shapes among them: each gets its status and a closed
// connection, and nothing reaches the origin.
func TestRejectedRequests(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setup(t, httpproxy.Config{}, proxytest.Respond(200, "must not be reached"))
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
	o, proxy, _ := setup(t, httpproxy.Config{MaxHeaderBytes: 4096}, proxytest.Respond(200, "ok"))
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
	a, err := auth.New(auth.Config{Users: []auth.User{{Name: "u", Password: "p"}}})
	if err != nil {
		t.Fatal(err)
	}
	basic := func(user, pass string) string {
		return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	o, proxy, _ := setup(t, httpproxy.Config{Auth: a}, proxytest.Respond(200, "ok"))
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
			o, proxy, _ := setup(t, httpproxy.Config{ResponseHeaderTimeout: 300 * time.Millisecond}, tt.handler)
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
		_, proxy, _ := setup(t, httpproxy.Config{}, nil)
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
	_, proxy, _ := setup(t, httpproxy.Config{ReadHeaderTimeout: 200 * time.Millisecond}, nil)
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

// TestServeConnCancel checks that ServeConn returns soon after its
// context is cancelled while it waits for a request head, with a long
// idle timeout that would otherwise keep it waiting.
func TestServeConnCancel(t *testing.T) {
	t.Parallel()
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	t.Run("in the middle of a request", func(t *testing.T) {
		release := make(chan struct{})
		slow := proxytest.NewOrigin(t, func(x *proxytest.Exchange) {
			select {
			case <-release:
			case <-x.Done():
			}
			proxytest.Respond(200, "late")(x)
		})
		ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		p := httpproxy.New(httpproxy.Config{Dialer: dialer.New(dialer.Config{}), IdleTimeout: time.Hour})
		c := proxytest.Dial(t, ln.Addr().String())
		sc, err := ln.AcceptTCP()
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan struct{})
		go func() {
			p.ServeConn(ctx, sc, nil)
			close(done)
		}()
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
			ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			p := httpproxy.New(httpproxy.Config{
				Dialer:            dialer.New(dialer.Config{}),
				IdleTimeout:       time.Hour,
				ReadHeaderTimeout: time.Hour,
			})
			c := proxytest.Dial(t, ln.Addr().String())
			sc, err := ln.AcceptTCP()
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan struct{})
			go func() {
				p.ServeConn(ctx, sc, nil)
				close(done)
			}()
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
				sc.Close()
				<-done
				t.Fatal("ServeConn still serving 5s after its context was cancelled")
			}
			c.ExpectClosed()
		})
	}
}
