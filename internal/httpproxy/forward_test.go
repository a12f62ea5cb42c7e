package httpproxy_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

func TestMain(m *testing.M) { os.Exit(proxytest.VerifyNoLeaks(m)) }

// testCfg is what a test sets of a proxy, flat: the front-end's settings
// and its origin client's (origin.Config). testConfig gives the zero ones
// their defaults.
type testCfg struct {
	Forwarded             string
	Via                   bool
	MaxHeaderBytes        int
	ReadHeaderTimeout     time.Duration
	ResponseHeaderTimeout time.Duration
	IdleTimeout           time.Duration
	WriteTimeout          time.Duration
	SocketBufferBytes     int
	// Headers are the header rules; nil = none.
	Headers *origin.HeaderRules
	// zeroTimeouts keeps every timeout 0 (no limit) instead of the
	// defaults.
	zeroTimeouts bool
}

// testConfig returns the Config of c: the origin client made from its
// origin settings, a timeout left 0 set to the configuration's default
// (unless zeroTimeouts), Forwarded "none" and MaxHeaderBytes 64 KiB unless
// set.
func testConfig(t testing.TB, c testCfg) httpproxy.Config {
	t.Helper()
	if c.Forwarded == "" {
		c.Forwarded = origin.ForwardedNone
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 65536
	}
	if !c.zeroTimeouts {
		def := func(d *time.Duration, v time.Duration) {
			if *d == 0 {
				*d = v
			}
		}
		def(&c.ReadHeaderTimeout, 30*time.Second)
		def(&c.ResponseHeaderTimeout, 60*time.Second)
		def(&c.IdleTimeout, 60*time.Second)
		def(&c.WriteTimeout, 60*time.Second)
	}
	oc, err := origin.New(origin.Config{
		Forwarded:             c.Forwarded,
		Via:                   c.Via,
		MaxHeaderBytes:        c.MaxHeaderBytes,
		ResponseHeaderTimeout: c.ResponseHeaderTimeout,
		WriteTimeout:          c.WriteTimeout,
		Headers:               c.Headers,
	})
	if err != nil {
		t.Fatal(err)
	}
	return httpproxy.Config{
		Origin:            oc,
		ReadHeaderTimeout: c.ReadHeaderTimeout,
		IdleTimeout:       c.IdleTimeout,
		SocketBufferBytes: c.SocketBufferBytes,
	}
}

// newProxy returns a Proxy for testConfig(cfg).
func newProxy(t testing.TB, cfg testCfg) *httpproxy.Proxy {
	t.Helper()
	p, err := httpproxy.New(testConfig(t, cfg))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// serve returns the ServeFunc of a Proxy for cfg (its zero fields set by
// testConfig): the HTTP/1.1 front-end on each connection proxytest
// accepts.
func serve(t testing.TB, cfg testCfg) proxytest.ServeFunc {
	p := newProxy(t, cfg)
	return func(c *net.TCPConn, s *gate.Session) { p.ServeConn(c, s) }
}

// startProxy starts a proxy for cfg under the policy pc describes and
// returns its address.
func startProxy(t testing.TB, cfg testCfg, pc proxytest.PolicyConfig) string {
	t.Helper()
	return proxytest.StartProxy(t, proxytest.NewPolicy(t, pc), serve(t, cfg))
}

// setup starts an origin answering with h and a proxy for cfg in front
// of it, under a policy with an upstream pool and nothing else. It
// returns the origin, the proxy's address and the pool.
func setup(t *testing.T, cfg testCfg, h proxytest.Handler) (*proxytest.Origin, string, *dialer.Pool) {
	t.Helper()
	return setupPolicy(t, cfg, proxytest.PolicyConfig{}, h)
}

// setupPolicy is setup under the policy pc describes, with an upstream
// pool unless pc has one.
func setupPolicy(t *testing.T, cfg testCfg, pc proxytest.PolicyConfig, h proxytest.Handler) (*proxytest.Origin, string, *dialer.Pool) {
	t.Helper()
	o := proxytest.NewOrigin(t, h)
	if pc.Pool == nil {
		pc.Pool = proxytest.NewPool(t, dialer.PoolConfig{})
	}
	return o, startProxy(t, cfg, pc), pc.Pool
}

// request builds an HTTP/1.minor request for target with the header
// lines given and body (a Content-Length is added when body is not
// empty).
func request(method, target string, minor int, body string, header ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s HTTP/1.%d\r\n", method, target, minor)
	for _, h := range header {
		b.WriteString(h + "\r\n")
	}
	if body != "" {
		fmt.Fprintf(&b, "Content-Length: %d\r\n", len(body))
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

// get is a plain HTTP/1.1 GET of the origin's path.
func get(o *proxytest.Origin, path string) string {
	return request("GET", o.URL(path), 1, "", "Host: "+o.Addr)
}

// describe answers with the request line's method and target and the
// body it received.
func describe(x *proxytest.Exchange) {
	body, err := x.ReadBody()
	if err != nil {
		x.CloseConn()
		return
	}
	proxytest.Respond(200, x.Req.Method+" "+x.Req.Target+" "+string(body), "X-Origin: yes")(x)
}

func bufioReader(s string) *bufio.Reader { return bufio.NewReader(strings.NewReader(s)) }

// checkOneLineReason fails unless r's body is rustle's one-line reason.
func checkOneLineReason(t *testing.T, r *proxytest.Response) {
	t.Helper()
	b := string(r.Body)
	if !strings.HasPrefix(b, "rustle: ") || !strings.HasSuffix(b, "\n") || strings.Count(b, "\n") != 1 {
		t.Errorf("body %q is not a one-line reason", b)
	}
	if r.Header.Get("Connection") != "close" {
		t.Errorf("error answer without Connection: close: %q", r.Head)
	}
}

func TestMethods(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setup(t, testCfg{}, describe)
	methods := []struct{ method, body string }{
		{"GET", ""},
		{"HEAD", ""},
		{"POST", "post body"},
		{"PUT", "put body"},
		{"DELETE", ""},
		{"OPTIONS", ""},
		{"PATCH", "patch body"},
		{"FROBNICATE", "x"},
	}
	for _, minor := range []int{0, 1} {
		for _, m := range methods {
			t.Run(fmt.Sprintf("%s/HTTP1.%d", m.method, minor), func(t *testing.T) {
				c := proxytest.Dial(t, proxy)
				path := "/m/" + m.method + "?minor=" + strconv.Itoa(minor)
				before := o.NumRequests()
				resp, _ := c.RoundTrip(request(m.method, o.URL(path), minor, m.body, "Host: "+o.Addr))
				if resp.Status != 200 || resp.Proto != "HTTP/1.1" {
					t.Fatalf("status line %q %d", resp.Proto, resp.Status)
				}
				want := m.method + " " + path + " " + m.body
				if m.method == "HEAD" {
					if len(resp.Body) != 0 || resp.Header.Get("Content-Length") != strconv.Itoa(len(want)) {
						t.Errorf("HEAD answer: %q body %q", resp.Head, resp.Body)
					}
				} else if string(resp.Body) != want {
					t.Errorf("body %q, want %q", resp.Body, want)
				}
				if resp.Header.Get("X-Origin") != "yes" {
					t.Errorf("origin's header lost: %q", resp.Head)
				}
				reqs := o.Requests()
				if len(reqs) != before+1 {
					t.Fatalf("origin got %d requests, want %d", len(reqs), before+1)
				}
				r := reqs[len(reqs)-1]
				if r.Method != m.method || r.Target != path || r.Proto != "HTTP/1.1" ||
					r.Header.Get("Host") != o.Addr || string(r.Body) != m.body {
					t.Errorf("origin got %q body %q", r.Head, r.Body)
				}
				if minor == 0 {
					if resp.Header.Get("Connection") != "close" {
						t.Errorf("HTTP/1.0 answer without Connection: close: %q", resp.Head)
					}
					c.ExpectClosed()
					return
				}
				if resp.Header.Has("Connection") {
					t.Errorf("keep-alive HTTP/1.1 answer with Connection: %q", resp.Head)
				}
				again, _ := c.RoundTrip(get(o, "/again"))
				if again.Status != 200 || string(again.Body) != "GET /again " {
					t.Errorf("second request on the connection: %d %q", again.Status, again.Body)
				}
			})
		}
	}
}

func TestClientConnection(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setup(t, testCfg{}, describe)
	tests := []struct {
		name     string
		minor    int
		header   []string
		wantConn string // the answer's Connection value
		keep     bool
	}{
		{"1.1 default", 1, nil, "", true},
		{"1.1 close", 1, []string{"Connection: close"}, "close", false},
		{"1.1 Proxy-Connection close", 1, []string{"Proxy-Connection: close"}, "close", false},
		{"1.0 default", 0, nil, "close", false},
		{"1.0 keep-alive", 0, []string{"Connection: keep-alive"}, "keep-alive", true},
		{"1.0 Proxy-Connection keep-alive", 0, []string{"Proxy-Connection: Keep-Alive"}, "keep-alive", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := proxytest.Dial(t, proxy)
			for i := range 2 {
				resp, _ := c.RoundTrip(request("GET", o.URL("/c"), tt.minor, "", append([]string{"Host: " + o.Addr}, tt.header...)...))
				if resp.Status != 200 || resp.Header.Get("Connection") != tt.wantConn {
					t.Fatalf("request %d: %q", i, resp.Head)
				}
				if !tt.keep {
					c.ExpectClosed()
					return
				}
			}
		})
	}
}

func TestPipelining(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setup(t, testCfg{}, describe)
	tests := []struct {
		name    string
		reqs    []string
		methods []string
		want    []string // bodies
	}{
		{
			name:    "three GETs",
			reqs:    []string{get(o, "/a"), get(o, "/b"), get(o, "/c")},
			methods: []string{"GET", "GET", "GET"},
			want:    []string{"GET /a ", "GET /b ", "GET /c "},
		},
		{
			name: "POST HEAD chunked-POST GET",
			reqs: []string{
				request("POST", o.URL("/p"), 1, "hello", "Host: "+o.Addr),
				request("HEAD", o.URL("/h"), 1, "", "Host: "+o.Addr),
				request("POST", o.URL("/q"), 1, "", "Host: "+o.Addr, "Transfer-Encoding: chunked") + proxytest.Chunk([]string{"ab", "cd"}),
				get(o, "/g"),
			},
			methods: []string{"POST", "HEAD", "POST", "GET"},
			want:    []string{"POST /p hello", "", "POST /q abcd", "GET /g "},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := proxytest.Dial(t, proxy)
			c.Write(strings.Join(tt.reqs, "")) // one write
			for i, m := range tt.methods {
				r := c.ReadResponse(m)
				if r.Status != 200 || string(r.Body) != tt.want[i] {
					t.Errorf("response %d: %d %q, want %q", i, r.Status, r.Body, tt.want[i])
				}
			}
		})
	}
}

// payload returns n pseudo-random bytes.
func payload(n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// chunkBytes encodes data as chunks of size n, with the trailer lines.
func chunkBytes(data []byte, n int, trailer ...string) []byte {
	var parts []string
	for len(data) > 0 {
		k := min(n, len(data))
		parts = append(parts, string(data[:k]))
		data = data[k:]
	}
	return []byte(proxytest.Chunk(parts, trailer...))
}

func TestRequestBodies(t *testing.T) {
	t.Parallel()
	small := []byte("a small request body")
	big := payload(5 << 20)
	tests := []struct {
		name    string
		header  string           // framing header line
		wire    []byte           // the body as sent
		data    []byte           // its payload
		trailer proxytest.Header // the trailer fields sent, which the proxy drops
		split   bool             // write the head, wait, then the body
	}{
		{"length small", "Content-Length: " + strconv.Itoa(len(small)), small, small, nil, false},
		{"length small split", "Content-Length: " + strconv.Itoa(len(small)), small, small, nil, true},
		{"length 5MB", "Content-Length: " + strconv.Itoa(len(big)), big, big, nil, false},
		{"length 5MB split", "Content-Length: " + strconv.Itoa(len(big)), big, big, nil, true},
		{
			"chunked small with extension and trailers", "Transfer-Encoding: chunked",
			[]byte("5;name=value\r\nhello\r\n6\r\n world\r\n0\r\nX-Sum: 42\r\nX-Other: o\r\n\r\n"),
			[]byte("hello world"), proxytest.Header{{Name: "X-Sum", Value: "42"}, {Name: "X-Other", Value: "o"}}, false,
		},
		{
			"chunked small split", "Transfer-Encoding: chunked",
			[]byte("5\r\nhello\r\n0\r\n\r\n"), []byte("hello"), nil, true,
		},
		{
			"chunked 5MB with trailer", "Transfer-Encoding: chunked",
			chunkBytes(big, 100_000, "X-Digest: d"), big, proxytest.Header{{Name: "X-Digest", Value: "d"}}, false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, proxy, _ := setup(t, testCfg{}, proxytest.Echo())
			c := proxytest.Dial(t, proxy)
			head := request("POST", o.URL("/echo"), 1, "", "Host: "+o.Addr, tt.header)
			// Write concurrently with reading: the echo streams back.
			werr := make(chan error, 1)
			go func() {
				c.Conn.SetWriteDeadline(time.Now().Add(proxytest.DefaultTimeout))
				if tt.split {
					if _, err := io.WriteString(c.Conn, head); err != nil {
						werr <- err
						return
					}
					time.Sleep(20 * time.Millisecond)
					_, err := c.Conn.Write(tt.wire)
					werr <- err
					return
				}
				_, err := c.Conn.Write(append([]byte(head), tt.wire...))
				werr <- err
			}()
			resp := c.ReadResponse("POST")
			if err := <-werr; err != nil {
				t.Fatalf("write: %v", err)
			}
			if resp.Status != 200 || sha256.Sum256(resp.Body) != sha256.Sum256(tt.data) {
				t.Errorf("echo: status %d, %d bytes, want %d", resp.Status, len(resp.Body), len(tt.data))
			}
			// Request trailers are dropped (docs/operations.md).
			if len(resp.Trailer) != 0 {
				t.Errorf("echoed trailer %v, want none", resp.Trailer)
			}
			reqs := o.Requests()
			if len(reqs) != 1 {
				t.Fatalf("origin got %d requests", len(reqs))
			}
			want := tt.wire
			if len(tt.trailer) > 0 {
				// The wire less its trailer section, less its final CRLF.
				i := bytes.LastIndex(want, []byte("\r\n0\r\n")) + len("\r\n0\r\n")
				want = append(bytes.Clone(want[:i]), "\r\n"...)
			}
			if !bytes.Equal(reqs[0].RawBody, want) {
				t.Errorf("origin got a body of %d bytes not equal to the %d expected", len(reqs[0].RawBody), len(want))
			}
			if len(reqs[0].Trailer) != 0 {
				t.Errorf("origin's trailer %v, want none", reqs[0].Trailer)
			}
			// The connection is at a message boundary again.
			again, _ := c.RoundTrip(request("POST", o.URL("/echo"), 1, "again", "Host: "+o.Addr))
			if string(again.Body) != "again" {
				t.Errorf("next request: %d %q", again.Status, again.Body)
			}
		})
	}
}

func TestExpectContinue(t *testing.T) {
	t.Parallel()
	t.Run("100 then body", func(t *testing.T) {
		t.Parallel()
		o, proxy, _ := setup(t, testCfg{}, proxytest.Continue(proxytest.Echo()))
		c := proxytest.Dial(t, proxy)
		c.Write(request("PUT", o.URL("/up"), 1, "", "Host: "+o.Addr, "Expect: 100-continue", "Content-Length: 11"))
		interim := c.ReadResponse("PUT")
		if interim.Status != 100 || string(interim.Head) != "HTTP/1.1 100 Continue\r\n\r\n" {
			t.Fatalf("interim answer %q", interim.Head)
		}
		c.Write("hello world")
		final := c.ReadResponse("PUT")
		if final.Status != 200 || string(final.Body) != "hello world" {
			t.Fatalf("final answer %d %q", final.Status, final.Body)
		}
		if got := o.Requests()[0].Header.Get("Expect"); got != "100-continue" {
			t.Errorf("origin got Expect %q", got)
		}
		again, _ := c.RoundTrip(request("PUT", o.URL("/up"), 1, "x", "Host: "+o.Addr))
		if again.Status != 200 || string(again.Body) != "x" {
			t.Errorf("next request: %d %q", again.Status, again.Body)
		}
	})
	// The origin answers without reading the body, which the client
	// never sends: the proxy must end the exchange, not wait for it.
	for _, tt := range []struct{ name, answer string }{
		{"417", "HTTP/1.1 417 Expectation Failed\r\nContent-Length: 0\r\n\r\n"},
		{"final 200 without 100", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, proxy, _ := setup(t, testCfg{}, proxytest.ThenClose(proxytest.Raw(tt.answer)))
			c := proxytest.Dial(t, proxy)
			c.Timeout = 5 * time.Second
			c.Write(request("POST", o.URL("/up"), 1, "", "Host: "+o.Addr, "Expect: 100-continue", "Content-Length: 1000"))
			r := c.ReadResponse("POST")
			want, _ := proxytest.ReadResponse(bufioReader(tt.answer), "POST")
			if r.Status != want.Status || !bytes.Equal(r.Body, want.Body) {
				t.Fatalf("answer %q %q", r.Head, r.Body)
			}
			c.ExpectClosed()
		})
	}
}

func TestBodilessResponses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		method  string
		handler proxytest.Handler
		header  string // a header the answer must carry
	}{
		{"HEAD", "HEAD", proxytest.Respond(200, strings.Repeat("x", 1234)), "Content-Length: 1234"},
		{"HEAD chunked", "HEAD", proxytest.Chunked([]string{"abc"}), "Transfer-Encoding: chunked"},
		{"204", "GET", proxytest.Respond(204, ""), ""},
		{"304", "GET", proxytest.Respond(304, "", "ETag: \"v1\"", "Content-Length: 50"), "Content-Length: 50"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, proxy, _ := setup(t, testCfg{}, tt.handler)
			o.Handle("/after", proxytest.Respond(200, "after"))
			c := proxytest.Dial(t, proxy)
			r, _ := c.RoundTrip(request(tt.method, o.URL("/x"), 1, "", "Host: "+o.Addr))
			if len(r.RawBody) != 0 || (tt.header != "" && !bytes.Contains(r.Head, []byte("\r\n"+tt.header+"\r\n"))) {
				t.Fatalf("answer %q", r.Head)
			}
			// Were any body bytes forwarded or awaited, this answer
			// would be garbled or late, and the upstream not reused.
			after, _ := c.RoundTrip(get(o, "/after"))
			if after.Status != 200 || string(after.Body) != "after" {
				t.Fatalf("next answer %q %q", after.Head, after.Body)
			}
			if o.Conns() != 1 {
				t.Errorf("origin accepted %d connections, want 1 (reused)", o.Conns())
			}
		})
	}
}

func TestCloseDelimitedResponse(t *testing.T) {
	t.Parallel()
	big := string(payload(1 << 20))
	tests := []struct {
		name    string
		handler proxytest.Handler
		body    string
	}{
		{"HTTP/1.0", proxytest.CloseDelimited("until the end\n", "Content-Type: text/plain"), "until the end\n"},
		{"HTTP/1.0 1MB", proxytest.CloseDelimited(big), big},
		{"HTTP/1.1 unframed", proxytest.ThenClose(proxytest.Raw("HTTP/1.1 200 OK\r\nX-A: b\r\n\r\nunframed")), "unframed"},
	}
	for _, tt := range tests {
		for _, minor := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/client1.%d", tt.name, minor), func(t *testing.T) {
				t.Parallel()
				o, proxy, _ := setup(t, testCfg{}, tt.handler)
				c := proxytest.Dial(t, proxy)
				r, _ := c.RoundTrip(request("GET", o.URL("/"), minor, "", "Host: "+o.Addr))
				if r.Status != 200 || r.Proto != "HTTP/1.1" || r.Header.Get("Connection") != "close" || !r.Closed {
					t.Errorf("answer %q", r.Head)
				}
				if string(r.Body) != tt.body {
					t.Errorf("body of %d bytes, want %d", len(r.Body), len(tt.body))
				}
			})
		}
	}
}

func TestInterimResponses(t *testing.T) {
	t.Parallel()
	const hints = "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
	o, proxy, _ := setup(t, testCfg{},
		proxytest.Before(hints+"HTTP/1.1 100 Continue\r\n\r\n", proxytest.Respond(200, "final")))
	for _, minor := range []int{0, 1} {
		t.Run(fmt.Sprintf("client1.%d", minor), func(t *testing.T) {
			c := proxytest.Dial(t, proxy)
			final, interim := c.RoundTrip(request("GET", o.URL("/"), minor, "", "Host: "+o.Addr))
			if final.Status != 200 || string(final.Body) != "final" {
				t.Fatalf("final answer %q %q", final.Head, final.Body)
			}
			var got []string
			for _, r := range interim {
				got = append(got, string(r.Head))
			}
			var want []string
			if minor == 1 {
				want = []string{hints, "HTTP/1.1 100 Continue\r\n\r\n"}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("interim answers (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChunkedResponse(t *testing.T) {
	t.Parallel()
	const body = "5;ext=v\r\nhello\r\n7\r\n, world\r\n0\r\nX-Trailer: t\r\n\r\n"
	big := payload(5 << 20)
	bigWire := chunkBytes(big, 70_000, "X-End: 1")
	tests := []struct {
		name    string
		handler proxytest.Handler
		wire    []byte
		data    []byte
	}{
		{"small", proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n" + body), []byte(body), []byte("hello, world")},
		{"5MB", proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n" + string(bigWire)), bigWire, big},
	}
	for _, tt := range tests {
		for _, minor := range []int{0, 1} {
			t.Run(fmt.Sprintf("%s/client1.%d", tt.name, minor), func(t *testing.T) {
				t.Parallel()
				o, proxy, _ := setup(t, testCfg{}, tt.handler)
				c := proxytest.Dial(t, proxy)
				r, _ := c.RoundTrip(request("GET", o.URL("/"), minor, "", "Host: "+o.Addr))
				if r.Status != 200 || r.Header.Get("X-A") != "1" {
					t.Fatalf("answer %q", r.Head)
				}
				if minor == 1 {
					// Passed on verbatim, framing, extensions and trailers included.
					if r.Header.Get("Transfer-Encoding") != "chunked" || !bytes.Equal(r.RawBody, tt.wire) {
						t.Errorf("HTTP/1.1 client got %q and a body of %d bytes, not the %d sent", r.Head, len(r.RawBody), len(tt.wire))
					}
					again, _ := c.RoundTrip(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr))
					if again.Status != 200 {
						t.Errorf("next request: %q", again.Head)
					}
					return
				}
				// Decoded for an HTTP/1.0 client and delimited by close.
				if r.Header.Has("Transfer-Encoding") || r.Header.Get("Connection") != "close" || !r.Closed ||
					sha256.Sum256(r.Body) != sha256.Sum256(tt.data) {
					t.Errorf("HTTP/1.0 client got %q and %d bytes, want %d", r.Head, len(r.Body), len(tt.data))
				}
			})
		}
	}
}

func TestResponseFraming(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, answer string
		wantHead     string // "" for a 502
		wantBody     string // raw
		closed       bool
	}{
		{
			"Transfer-Encoding overrides Content-Length",
			"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", "2\r\nok\r\n0\r\n\r\n", false,
		},
		{
			"identical Content-Length twice",
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok",
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", "ok", false,
		},
		// A coding other than chunked is refused (502), as on HTTP/2 and
		// HTTP/3 (http1.ErrTransferCoding); and the upstream is dropped,
		// so that what an origin sends after a response whose final
		// coding is chunked never reaches the client (response
		// splitting, issue 15).
		{"coding other than chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nzipped", "", "", true},
		{
			"gzip then chunked",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nSMUGGLED",
			"", "", false,
		},
		{
			"identity then chunked",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nSMUGGLED",
			"", "", false,
		},
		{"HTTP/1.0 with chunked is refused", "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nSMUGGLED", "", "", true},
		{"conflicting Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!", "", "", true},
		{"malformed Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 2x\r\n\r\nok", "", "", true},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\nContent-Length: 2\r\n\r\nok", "", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			answer := proxytest.Raw(tt.answer)
			if tt.closed {
				answer = proxytest.ThenClose(answer)
			}
			o, proxy, _ := setup(t, testCfg{}, answer)
			c := proxytest.Dial(t, proxy)
			r, _ := c.RoundTrip(get(o, "/"))
			if tt.wantHead == "" {
				if r.Status != 502 {
					t.Errorf("answer %q, want 502", r.Head)
				}
				checkOneLineReason(t, r)
				c.ExpectClosed()
				return
			}
			if string(r.Head) != tt.wantHead || string(r.RawBody) != tt.wantBody {
				t.Errorf("answer %q %q, want %q %q", r.Head, r.RawBody, tt.wantHead, tt.wantBody)
			}
			if !tt.closed {
				if again, _ := c.RoundTrip(get(o, "/")); again.Status != 200 || strings.Contains(string(again.RawBody), "SMUGGLED") {
					t.Errorf("next request: %q %q", again.Head, again.RawBody)
				}
			}
		})
	}
}

// TestPipelinedAfterLargeBody sends a request with a 5 MB body and a
// second request in the same write: the body is streamed and the second
// request, read behind it, answered in order.
func TestPipelinedAfterLargeBody(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setup(t, testCfg{}, func(x *proxytest.Exchange) {
		body, err := x.ReadBody()
		if err != nil {
			x.CloseConn()
			return
		}
		proxytest.Respond(200, fmt.Sprintf("%s %x", x.Req.Target, sha256.Sum256(body)))(x)
	})
	big := payload(5 << 20)
	for _, framing := range []string{"length", "chunked"} {
		t.Run(framing, func(t *testing.T) {
			var first []byte
			if framing == "length" {
				first = append([]byte(request("POST", o.URL("/big"), 1, "", "Host: "+o.Addr, "Content-Length: "+strconv.Itoa(len(big)))), big...)
			} else {
				first = append([]byte(request("POST", o.URL("/big"), 1, "", "Host: "+o.Addr, "Transfer-Encoding: chunked")), chunkBytes(big, 1<<20)...)
			}
			c := proxytest.Dial(t, proxy)
			werr := make(chan error, 1)
			go func() {
				c.Conn.SetWriteDeadline(time.Now().Add(proxytest.DefaultTimeout))
				_, err := c.Conn.Write(append(first, get(o, "/next")...))
				werr <- err
			}()
			r1 := c.ReadResponse("POST")
			r2 := c.ReadResponse("GET")
			if err := <-werr; err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprintf("/big %x", sha256.Sum256(big)); string(r1.Body) != want {
				t.Errorf("first answer %q, want %q", r1.Body, want)
			}
			if want := fmt.Sprintf("/next %x", sha256.Sum256(nil)); string(r2.Body) != want {
				t.Errorf("second answer %q, want %q", r2.Body, want)
			}
		})
	}
}

func TestLargeLengthResponse(t *testing.T) {
	t.Parallel()
	big := string(payload(5 << 20))
	o, proxy, _ := setup(t, testCfg{}, proxytest.Respond(200, big))
	c := proxytest.Dial(t, proxy)
	for i := range 2 {
		r, _ := c.RoundTrip(get(o, "/big"))
		if r.Status != 200 || sha256.Sum256(r.Body) != sha256.Sum256([]byte(big)) {
			t.Fatalf("answer %d: %d, %d bytes", i, r.Status, len(r.Body))
		}
	}
}

func TestUpstreamKeepAlive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		handler   proxytest.Handler
		wantConns int
	}{
		{"keep-alive", proxytest.Respond(200, "ok"), 1},
		{"origin says close", proxytest.Respond(200, "ok", "Connection: close"), 2},
		{"HTTP/1.0 origin", proxytest.Raw("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok"), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, proxy, pool := setup(t, testCfg{}, tt.handler)
			for i := range 2 {
				c := proxytest.Dial(t, proxy)
				r, _ := c.RoundTrip(get(o, "/"))
				if r.Status != 200 || string(r.Body) != "ok" {
					t.Fatalf("request %d: %q %q", i, r.Head, r.Body)
				}
				c.Close()
				if i == 0 && tt.wantConns == 1 {
					proxytest.WaitFor(t, "the upstream back in the pool", func() bool { return pool.Len() == 1 })
				}
			}
			if got := o.Conns(); got != tt.wantConns {
				t.Errorf("origin accepted %d connections, want %d", got, tt.wantConns)
			}
		})
	}
}

// TestPooledConnectionClosedByOrigin checks requests that meet an
// upstream the origin closed while it was idle: an idempotent one is sent
// again on a fresh connection, one that cannot be is checked before it is
// sent and goes out on a fresh connection only.
func TestPooledConnectionClosedByOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method, body string
		retry        bool
	}{
		{"GET", "", true},
		{"HEAD", "", true},
		{"PUT", "idempotent", true},
		{"DELETE", "", true},
		{"POST", "not idempotent", false},
		{"PATCH", "not idempotent", false},
	}
	for _, tt := range tests {
		// The dead connection is met in the pool by another client, or
		// kept by the same client for its next request.
		for _, kept := range []bool{false, true} {
			name := tt.method + "/pooled"
			if kept {
				name = tt.method + "/kept"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				testClosedByOrigin(t, tt.method, tt.body, tt.retry, kept)
			})
		}
	}
}

func testClosedByOrigin(t *testing.T, method, body string, retry, kept bool) {
	// Every answer claims keep-alive, then the origin hangs up.
	o, proxy, pool := setup(t, testCfg{}, proxytest.ThenClose(proxytest.Respond(200, "ok")))
	c := proxytest.Dial(t, proxy)
	first, _ := c.RoundTrip(get(o, "/"))
	if first.Status != 200 {
		t.Fatalf("first answer %q", first.Head)
	}
	if kept {
		proxytest.WaitFor(t, "the origin to close", func() bool { return o.ClosedConns() == 1 })
	} else {
		c.Close()
		proxytest.WaitFor(t, "a dead connection in the pool", func() bool {
			return pool.Len() == 1 && o.ClosedConns() == 1
		})
		c = proxytest.Dial(t, proxy)
	}
	tt := struct {
		body  string
		retry bool
	}{body, retry}
	r, _ := c.RoundTrip(request(method, o.URL("/"), 1, tt.body, "Host: "+o.Addr))
	if tt.retry {
		if r.Status != 200 || o.Conns() != 2 {
			t.Errorf("answer %q after %d origin connections, want 200 after a retry", r.Head, o.Conns())
		}
		if reqs := o.Requests(); string(reqs[len(reqs)-1].Body) != tt.body {
			t.Errorf("retried body %q", reqs[len(reqs)-1].Body)
		}
		return
	}
	// A request that cannot be sent twice is not sent on a connection
	// the origin has closed: it goes out once, on a fresh one (issue 15:
	// uploads met 502 after the origin's keep-alive timeout).
	if r.Status != 200 || o.Conns() != 2 || o.NumRequests() != 2 {
		t.Errorf("answer %q %q after %d origin connections and %d requests, want 200 on a fresh connection, sent once",
			r.Head, r.Body, o.Conns(), o.NumRequests())
	}
	if reqs := o.Requests(); string(reqs[len(reqs)-1].Body) != tt.body {
		t.Errorf("body %q", reqs[len(reqs)-1].Body)
	}
}

// TestPooledRetryOnce checks that a request that failed on a dead pooled
// connection is sent again once, not again after the fresh connection
// fails too.
func TestPooledRetryOnce(t *testing.T) {
	t.Parallel()
	o, proxy, pool := setup(t, testCfg{},
		proxytest.Sequence(proxytest.ThenClose(proxytest.Respond(200, "ok")), proxytest.Hangup()))
	c := proxytest.Dial(t, proxy)
	if r, _ := c.RoundTrip(get(o, "/")); r.Status != 200 {
		t.Fatalf("first answer %q", r.Head)
	}
	c.Close() // its upstream goes to the pool
	proxytest.WaitFor(t, "a dead connection in the pool", func() bool {
		return pool.Len() == 1 && o.ClosedConns() == 1
	})
	r, _ := proxytest.Dial(t, proxy).RoundTrip(get(o, "/"))
	if r.Status != 502 || o.Conns() != 2 || o.NumRequests() != 2 {
		t.Errorf("answer %q after %d origin connections and %d requests, want 502 after 2 and 2",
			r.Head, o.Conns(), o.NumRequests())
	}
	checkOneLineReason(t, r)
}

// TestEarlyAnswer checks an origin that answers and closes while a large
// request body is still streaming: the client gets the answer and then
// the end of the connection, and nothing hangs.
func TestEarlyAnswer(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setup(t, testCfg{}, proxytest.ThenClose(proxytest.Raw(
		"HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")))
	c := proxytest.Dial(t, proxy)
	c.Timeout = 5 * time.Second
	req := append([]byte(request("POST", o.URL("/"), 1, "", "Host: "+o.Addr, "Content-Length: 5242880")), payload(5<<20)...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c.Conn.SetWriteDeadline(time.Now().Add(5 * time.Second))
		c.Conn.Write(req) // fails once the proxy closes
	}()
	defer func() { <-done }()
	r := c.ReadResponse("POST")
	if r.Status != 413 || r.Header.Get("Connection") != "close" {
		t.Errorf("answer %q", r.Head)
	}
	c.ExpectClosed()
}

func TestHopByHopHeaders(t *testing.T) {
	t.Parallel()
	const answer = "HTTP/1.1 200 OK\r\n" +
		"X-A: 1\r\n" +
		"Connection: X-Drop, keep-alive\r\n" +
		"X-Drop: d\r\n" +
		"Keep-Alive: timeout=5\r\n" +
		"x-CaSe:  spaced  value \r\n" +
		"Proxy-Authenticate: Basic realm=\"o\"\r\n" +
		"Upgrade: h2c\r\n" +
		"Content-Length: 2\r\n" +
		"Set-Cookie: a=1\r\n" +
		"Set-Cookie: b=2\r\n" +
		"\r\nok"
	o, proxy, _ := setup(t, testCfg{}, proxytest.Raw(answer))
	c := proxytest.Dial(t, proxy)
	r, _ := c.RoundTrip("GET " + o.URL("/p?q=1") + " HTTP/1.1\r\n" +
		"X-First: 1\r\n" +
		"hOsT: example.invalid\r\n" +
		"Connection: keep-alive, X-Custom-Hop\r\n" +
		"X-Custom-Hop: drop me\r\n" +
		"Keep-Alive: timeout=5\r\n" +
		"Proxy-Connection: keep-alive\r\n" +
		"Proxy-Authorization: Basic Zm9vOmJhcg==\r\n" +
		"TE: trailers\r\n" +
		"Trailer: X-T\r\n" +
		"Upgrade: websocket\r\n" +
		"x-MiXeD-CaSe: Value  With  Spaces \r\n" +
		"Accept: a\r\n" +
		"Accept: b\r\n" +
		"X-Last: z\r\n" +
		"\r\n")
	wantReq := "GET /p?q=1 HTTP/1.1\r\n" +
		"X-First: 1\r\n" +
		"hOsT: " + o.Addr + "\r\n" +
		"x-MiXeD-CaSe: Value  With  Spaces \r\n" +
		"Accept: a\r\n" +
		"Accept: b\r\n" +
		"X-Last: z\r\n" +
		"\r\n"
	if got := string(o.Requests()[0].Head); got != wantReq {
		t.Errorf("origin got\n%q\nwant\n%q", got, wantReq)
	}
	wantResp := "HTTP/1.1 200 OK\r\n" +
		"X-A: 1\r\n" +
		"x-CaSe:  spaced  value \r\n" +
		"Content-Length: 2\r\n" +
		"Set-Cookie: a=1\r\n" +
		"Set-Cookie: b=2\r\n" +
		"\r\n"
	if string(r.Head) != wantResp || string(r.Body) != "ok" {
		t.Errorf("client got\n%q\nwant\n%q", r.Head, wantResp)
	}
}

func TestHostHeader(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setup(t, testCfg{}, proxytest.Respond(200, "ok"))
	tests := []struct {
		name, req, want string
	}{
		{
			"HTTP/1.0 without Host",
			"GET " + o.URL("/a") + " HTTP/1.0\r\nX-A: 1\r\n\r\n",
			"GET /a HTTP/1.1\r\nX-A: 1\r\nHost: " + o.Addr + "\r\n\r\n",
		},
		{
			"empty path and query",
			"GET http://" + o.Addr + "?x=1 HTTP/1.1\r\nHost: " + o.Addr + "\r\n\r\n",
			"GET /?x=1 HTTP/1.1\r\nHost: " + o.Addr + "\r\n\r\n",
		},
		{
			"no path",
			"GET http://" + o.Addr + " HTTP/1.1\r\nHost: x\r\n\r\n",
			"GET / HTTP/1.1\r\nHost: " + o.Addr + "\r\n\r\n",
		},
		{
			"identical Content-Length twice",
			"POST " + o.URL("/") + " HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nab",
			"POST / HTTP/1.1\r\nHost: " + o.Addr + "\r\nContent-Length: 2\r\n\r\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := o.NumRequests()
			c := proxytest.Dial(t, proxy)
			if r, _ := c.RoundTrip(tt.req); r.Status != 200 {
				t.Fatalf("answer %q", r.Head)
			}
			if got := string(o.Requests()[n].Head); got != tt.want {
				t.Errorf("origin got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestForwardedHeaders(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		forwarded string
		via       bool
		in, want  []string // request header lines after Host
	}{
		{"none", "", false,
			[]string{"Forwarded: for=192.0.2.1", "X-Forwarded-For: 192.0.2.2"},
			[]string{"Forwarded: for=192.0.2.1", "X-Forwarded-For: 192.0.2.2"}},
		{"rfc7239", origin.ForwardedRFC, false,
			[]string{"X-A: 1"},
			[]string{"X-A: 1", "Forwarded: for=127.0.0.1"}},
		{"rfc7239 appended", origin.ForwardedRFC, false,
			[]string{"Forwarded: for=192.0.2.60;proto=http;by=203.0.113.43", "X-Forwarded-For: 192.0.2.2", "X-A: 1"},
			[]string{"X-Forwarded-For: 192.0.2.2", "X-A: 1", "Forwarded: for=192.0.2.60;proto=http;by=203.0.113.43, for=127.0.0.1"}},
		{"x-forwarded-for", origin.ForwardedXFF, false,
			[]string{"X-A: 1"},
			[]string{"X-A: 1", "X-Forwarded-For: 127.0.0.1"}},
		{"x-forwarded-for appended", origin.ForwardedXFF, false,
			[]string{"x-forwarded-for: 203.0.113.7, 198.51.100.1", "Forwarded: for=192.0.2.1", "X-A: 1"},
			[]string{"Forwarded: for=192.0.2.1", "X-A: 1", "X-Forwarded-For: 203.0.113.7, 198.51.100.1, 127.0.0.1"}},
		{"x-forwarded-for two lines", origin.ForwardedXFF, false,
			[]string{"X-Forwarded-For: 203.0.113.7", "X-A: 1", "X-Forwarded-For: 198.51.100.1"},
			[]string{"X-A: 1", "X-Forwarded-For: 203.0.113.7, 198.51.100.1, 127.0.0.1"}},
		{"rfc7239 two lines", origin.ForwardedRFC, false,
			[]string{"Forwarded: for=192.0.2.1", "Forwarded: for=192.0.2.2"},
			[]string{"Forwarded: for=192.0.2.1, for=192.0.2.2, for=127.0.0.1"}},
		{"via", "", true,
			[]string{"Via: 1.0 fred"},
			[]string{"Via: 1.0 fred", "Via: 1.1 rustle"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, proxy, _ := setup(t, testCfg{Forwarded: tt.forwarded, Via: tt.via}, proxytest.Respond(200, "ok", "X-B: 2"))
			c := proxytest.Dial(t, proxy)
			r, _ := c.RoundTrip(request("GET", o.URL("/"), 1, "", append([]string{"Host: " + o.Addr}, tt.in...)...))
			want := request("GET", "/", 1, "", append([]string{"Host: " + o.Addr}, tt.want...)...)
			if got := string(o.Requests()[0].Head); got != want {
				t.Errorf("origin got\n%q\nwant\n%q", got, want)
			}
			wantResp := "HTTP/1.1 200 OK\r\nX-B: 2\r\nContent-Length: 2\r\n"
			if tt.via {
				wantResp += "Via: 1.1 rustle\r\n"
			}
			if string(r.Head) != wantResp+"\r\n" {
				t.Errorf("client got %q, want %q", r.Head, wantResp+"\r\n")
			}
		})
	}
}

func TestIdleClientTimeout(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setup(t, testCfg{IdleTimeout: 200 * time.Millisecond}, proxytest.Respond(200, "ok"))
	c := proxytest.Dial(t, proxy)
	c.Timeout = 5 * time.Second
	if r, _ := c.RoundTrip(get(o, "/")); r.Status != 200 {
		t.Fatalf("answer %q", r.Head)
	}
	c.ExpectClosed()
}

func BenchmarkForward1K(b *testing.B) {
	body := strings.Repeat("b", 1024)
	resp := "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1024\r\n\r\n" + body
	o := proxytest.NewStaticOrigin(b, resp)
	pool := proxytest.NewPool(b, dialer.PoolConfig{})
	proxy := startProxy(b, testCfg{}, proxytest.PolicyConfig{Pool: pool})
	c := proxytest.Dial(b, proxy)
	req := []byte("GET http://" + o.Addr + "/1k HTTP/1.1\r\nHost: " + o.Addr + "\r\nUser-Agent: bench\r\n\r\n")
	buf := make([]byte, len(resp))
	// The first exchange dials the upstream; check the answer once.
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
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if err := exchange(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if string(buf) != resp {
		b.Fatalf("last answer %q", buf)
	}
}
