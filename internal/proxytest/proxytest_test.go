package proxytest

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/origin"
)

func TestMain(m *testing.M) { os.Exit(VerifyNoLeaks(m)) }

func TestOriginRecordsRequests(t *testing.T) {
	o := NewOrigin(t, Respond(200, "ok"))
	c := Dial(t, o.Addr)
	const head = "POST /p?q=1 HTTP/1.1\r\nhOsT: h\r\nx-MiXeD:  v  \r\nTransfer-Encoding: chunked\r\n\r\n"
	const body = "3;ext\r\nabc\r\n2\r\nde\r\n0\r\nX-T: 1\r\n\r\n"
	r, _ := c.RoundTrip(head + body)
	if r.Status != 200 || string(r.Body) != "ok" || r.Header.Get("content-length") != "2" {
		t.Fatalf("answer %q %q", r.Head, r.Body)
	}
	c.RoundTrip("GET /second HTTP/1.1\r\nHost: h\r\n\r\n")
	reqs := o.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d requests recorded", len(reqs))
	}
	got := reqs[0]
	want := Request{
		Head: []byte(head), Method: "POST", Target: "/p?q=1", Proto: "HTTP/1.1",
		Header:  Header{{"hOsT", "h"}, {"x-MiXeD", "v"}, {"Transfer-Encoding", "chunked"}},
		RawBody: []byte(body), Body: []byte("abcde"), Trailer: Header{{"X-T", "1"}},
		BodyDone: true, Conn: 1, Seq: 1,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("recorded request (-want +got):\n%s", diff)
	}
	if got.Path() != "/p" || reqs[1].Conn != 1 || reqs[1].Seq != 2 || o.Conns() != 1 {
		t.Errorf("path %q, second request on conn %d seq %d, %d conns", got.Path(), reqs[1].Conn, reqs[1].Seq, o.Conns())
	}
}

func TestOriginHandlers(t *testing.T) {
	tests := []struct {
		name     string
		handler  Handler
		req      string
		wantHead []string // heads of the responses, interim first
		wantBody string   // raw body of the final response
		closed   bool     // the origin closes the connection after it
	}{
		{"Respond", Respond(201, "made", "X-A: 1"), "GET / HTTP/1.1\r\n\r\n",
			[]string{"HTTP/1.1 201 Created\r\nX-A: 1\r\nContent-Length: 4\r\n\r\n"}, "made", false},
		{"Respond HEAD", Respond(200, "abc"), "HEAD / HTTP/1.1\r\n\r\n",
			[]string{"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n"}, "", false},
		{"Respond 304", Respond(304, "", "ETag: e"), "GET / HTTP/1.1\r\n\r\n",
			[]string{"HTTP/1.1 304 Not Modified\r\nETag: e\r\n\r\n"}, "", false},
		{"Respond close", Respond(200, "x", "Connection: close"), "GET / HTTP/1.1\r\n\r\n",
			[]string{"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 1\r\n\r\n"}, "x", true},
		{"Chunked", Chunked([]string{"ab", "c"}, "X-T: 1"), "GET / HTTP/1.1\r\n\r\n",
			[]string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"}, "2\r\nab\r\n1\r\nc\r\n0\r\nX-T: 1\r\n\r\n", false},
		{"CloseDelimited", CloseDelimited("all", "X-A: 1"), "GET / HTTP/1.1\r\n\r\n",
			[]string{"HTTP/1.0 200 OK\r\nX-A: 1\r\n\r\n"}, "all", true},
		{"Continue", Continue(Echo()), "PUT / HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi",
			[]string{"HTTP/1.1 100 Continue\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n"}, "hi", false},
		{"Echo chunked", Echo(), "PUT / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\nX-T: t\r\n\r\n",
			[]string{"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"}, "2\r\nhi\r\n0\r\nX-T: t\r\n\r\n", false},
		{"ThenClose Raw", ThenClose(Raw("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nr")), "GET / HTTP/1.1\r\n\r\n",
			[]string{"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n"}, "r", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOrigin(t, tt.handler)
			c := Dial(t, o.Addr)
			final, interim := c.RoundTrip(tt.req)
			var heads []string
			for _, r := range append(interim, final) {
				heads = append(heads, string(r.Head))
			}
			if diff := cmp.Diff(tt.wantHead, heads); diff != "" {
				t.Errorf("heads (-want +got):\n%s", diff)
			}
			if string(final.RawBody) != tt.wantBody {
				t.Errorf("body %q, want %q", final.RawBody, tt.wantBody)
			}
			if tt.closed {
				c.ExpectClosed()
			} else if again, _ := c.RoundTrip(tt.req); again.Status != final.Status {
				t.Errorf("second request: %q", again.Head)
			}
		})
	}
}

func TestOriginRoutesAndFailures(t *testing.T) {
	o := NewOrigin(t, nil)
	o.Handle("/hangup", Hangup())
	o.Handle("/hang", Hang())
	o.Handle("/seq", Sequence(Respond(200, "one"), Respond(200, "two")))

	c := Dial(t, o.Addr)
	if r, _ := c.RoundTrip("GET /none HTTP/1.1\r\n\r\n"); r.Status != 404 {
		t.Errorf("unrouted path: %q", r.Head)
	}
	for _, want := range []string{"one", "two", "two"} {
		if r, _ := c.RoundTrip("GET /seq?x HTTP/1.1\r\n\r\n"); string(r.Body) != want {
			t.Errorf("Sequence answered %q, want %q", r.Body, want)
		}
	}
	c.Write("GET /hangup HTTP/1.1\r\n\r\n")
	c.ExpectClosed()

	c = Dial(t, o.Addr)
	c.Timeout = 50 * time.Millisecond
	c.Write("GET /hang HTTP/1.1\r\n\r\n")
	if _, err := c.TryReadResponse("GET"); err == nil {
		t.Errorf("Hang answered")
	}
	if o.Conns() != 2 || o.NumRequests() != 6 {
		t.Errorf("%d conns, %d requests", o.Conns(), o.NumRequests())
	}
}

func TestReadResponse(t *testing.T) {
	tests := []struct {
		name, method, in string
		body             string
		closed, bad      bool
	}{
		{"length", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabcNEXT", "abc", false, false},
		{"chunked", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n1\r\na\r\n0\r\n\r\nNEXT", "a", false, false},
		{"close", "GET", "HTTP/1.0 200 OK\r\n\r\nall of it", "all of it", true, false},
		{"HEAD", "HEAD", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nNEXT", "", false, false},
		{"204", "GET", "HTTP/1.1 204 No Content\r\n\r\nNEXT", "", false, false},
		{"100", "GET", "HTTP/1.1 100 Continue\r\n\r\nNEXT", "", false, false},
		{"CONNECT 200", "CONNECT", "HTTP/1.1 200 Connection established\r\n\r\nNEXT", "", false, false},
		{"garbage", "GET", "garbage\r\n\r\n", "", false, true},
		{"stray empty line", "GET", "\r\nHTTP/1.1 200 OK\r\n\r\n", "", false, true},
		{"short body", "GET", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc", "", false, true},
		{"bad chunk", "GET", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tt.in))
			r, err := ReadResponse(br, tt.method)
			if tt.bad {
				if err == nil {
					t.Fatalf("no error for %q", tt.in)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Body) != tt.body || r.Closed != tt.closed {
				t.Errorf("body %q closed %v", r.Body, r.Closed)
			}
			if rest, _ := io.ReadAll(br); !tt.closed && string(rest) != "NEXT" {
				t.Errorf("left %q after the response", rest)
			}
		})
	}
}

func TestEchoServers(t *testing.T) {
	plain := NewEcho(t)
	c := Dial(t, plain.Addr)
	c.Write("ping")
	c.Conn.CloseWrite()
	if got := c.ReadAll(); string(got) != "ping" {
		t.Errorf("plain echo returned %q", got)
	}

	e := NewTLSEcho(t)
	for _, addr := range []string{e.Addr, e.Addr6} {
		if addr == "" {
			continue
		}
		raw := Dial(t, addr)
		tc := tls.Client(raw.Conn, e.ClientConfig())
		tc.SetDeadline(time.Now().Add(DefaultTimeout))
		if _, err := tc.Write([]byte("secret")); err != nil {
			t.Fatalf("TLS write to %s: %v", addr, err)
		}
		tc.CloseWrite()
		if got, err := io.ReadAll(tc); err != nil || string(got) != "secret" {
			t.Errorf("TLS echo on %s returned %q, %v", addr, got, err)
		}
	}
	if e.Conns() != 1+btoi(e.Addr6 != "") {
		t.Errorf("%d TLS connections", e.Conns())
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestStartProxy(t *testing.T) {
	o := NewOrigin(t, Respond(200, "via proxy"))
	s := NewStaticOrigin(t, "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nstatic")
	oc, err := origin.New(origin.Config{Forwarded: origin.ForwardedNone, MaxHeaderBytes: 64 << 10,
		ResponseHeaderTimeout: 60 * time.Second, WriteTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hp, err := httpproxy.New(httpproxy.Config{Origin: oc, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	proxy := StartProxy(t, NewPolicy(t, PolicyConfig{}), func(c *net.TCPConn, s *gate.Session) { hp.ServeConn(c, s) })
	c := Dial(t, proxy)
	r, _ := c.RoundTrip("GET " + o.URL("/") + " HTTP/1.1\r\nHost: " + o.Addr + "\r\n\r\n")
	if r.Status != 200 || string(r.Body) != "via proxy" {
		t.Fatalf("answer %q %q", r.Head, r.Body)
	}
	r, _ = c.RoundTrip("GET http://" + s.Addr + "/ HTTP/1.1\r\nHost: " + s.Addr + "\r\n\r\n")
	if string(r.Body) != "static" {
		t.Fatalf("static origin answer %q %q", r.Head, r.Body)
	}
	// A tunnel still open at cleanup is closed then.
	e := NewEcho(t)
	tc := ConnectPipelined(t, proxy, e.Addr)
	tc.SetDeadline(time.Now().Add(DefaultTimeout))
	tc.Write([]byte("x"))
	var b [1]byte
	if _, err := io.ReadFull(tc, b[:]); err != nil || b[0] != 'x' {
		t.Fatalf("tunnel: %q %v", b, err)
	}
}

func TestCheckGoroutines(t *testing.T) {
	started, release, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		leakMarker(started, release)
		close(done)
	}()
	<-started
	err := CheckGoroutines(30*time.Millisecond, "proxytest.leakMarker")
	if err == nil || !strings.Contains(err.Error(), "leakMarker") {
		t.Errorf("a blocked goroutine was not reported: %v", err)
	}
	close(release)
	<-done
	if err := CheckGoroutines(time.Second, "proxytest.leakMarker"); err != nil {
		t.Error(err)
	}
}

//go:noinline
func leakMarker(started, release chan struct{}) {
	close(started)
	<-release
}

func TestChunk(t *testing.T) {
	got := Chunk([]string{"hello", "", strings.Repeat("x", 17)}, "A: 1", "B: 2")
	want := "5\r\nhello\r\n11\r\n" + strings.Repeat("x", 17) + "\r\n0\r\nA: 1\r\nB: 2\r\n\r\n"
	if got != want {
		t.Errorf("Chunk = %q, want %q", got, want)
	}
	if !bytes.Equal(appendChunk(nil, nil), []byte("0\r\n\r\n")) {
		t.Errorf("appendChunk of nothing = %q", appendChunk(nil, nil))
	}
}
