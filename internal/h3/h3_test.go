package h3

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestForward sends GETs with quic-go's HTTP/3 client through the proxy to
// an HTTP/1.1 origin, on one connection: each request is authorized on its
// own (407 per request), and a granted one reaches the origin without the
// proxy's credentials or hop-by-hop fields.
func TestForward(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "hello", "Connection: keep-alive, X-Hop", "X-Hop: 1", "X-End: 2"))
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{testUser: testPass},
	}))
	cc := p.client(t)
	tests := []struct {
		name   string
		authz  string
		status int
		body   string
	}{
		{"no credentials", "", 407, "rustle: proxy authentication required\n"},
		{"right credentials", basic(testUser, testPass), 200, "hello"},
		{"wrong password", basic(testUser, "nope"), 407, "rustle: proxy authentication required\n"},
		{"right again", basic(testUser, testPass), 200, "hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := get(t, cc, o.URL("/a?b=1"), tt.authz)
			if resp.StatusCode != tt.status || string(body) != tt.body {
				t.Fatalf("got %d %q, want %d %q", resp.StatusCode, body, tt.status, tt.body)
			}
			if tt.status == 407 && resp.Header.Get("Proxy-Authenticate") == "" {
				t.Error("407 without Proxy-Authenticate")
			}
			if tt.status == 200 {
				if resp.Header.Get("X-Hop") != "" || resp.Header.Get("X-End") != "2" {
					t.Errorf("response fields: X-Hop %q (listed in Connection), X-End %q", resp.Header.Get("X-Hop"), resp.Header.Get("X-End"))
				}
			}
		})
	}
	reqs := o.Requests()
	if len(reqs) != 2 {
		t.Fatalf("origin got %d requests, want 2", len(reqs))
	}
	for _, r := range reqs {
		if r.Target != "/a?b=1" || r.Method != "GET" {
			t.Errorf("origin got %s %s", r.Method, r.Target)
		}
		if v := r.Header.Get("Proxy-Authorization"); v != "" {
			t.Errorf("origin got Proxy-Authorization %q", v)
		}
	}
}

// connectStream opens a CONNECT stream to target through cc and returns
// the response and the stream.
func connectStream(t *testing.T, cc interface {
	RoundTrip(*http.Request) (*http.Response, error)
}, target, authz string) (*http.Response, io.WriteCloser) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest(http.MethodConnect, "", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.URL, req.Host = &url.URL{Host: target}, target
	if authz != "" {
		req.Header.Set("Proxy-Authorization", authz)
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	t.Cleanup(func() { pw.Close(); resp.Body.Close() })
	return resp, pw
}

// TestConnect opens CONNECT tunnels with quic-go's HTTP/3 client to an
// echo server: bytes go both ways, the stream's FIN ends the tunnel, and
// the access log has one "h3" record per request with its status.
func TestConnect(t *testing.T) {
	var out proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &out)
	echo := proxytest.NewEcho(t)
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users: map[string]string{testUser: testPass}, AccessLog: al, Listener: "h3",
	}))
	cc := p.client(t)

	resp, _ := connectStream(t, cc, echo.Addr, basic(testUser, "wrong"))
	if resp.StatusCode != 407 {
		t.Fatalf("CONNECT with a wrong password: %d, want 407", resp.StatusCode)
	}
	resp, pw := connectStream(t, cc, echo.Addr, basic(testUser, testPass))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d, want 200", resp.StatusCode)
	}
	io.WriteString(pw, "ping!")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "ping!" {
		t.Fatalf("tunnel echo: %q %v", buf, err)
	}
	pw.Close() // FIN: the echo server sees EOF and closes, which ends the tunnel
	if rest, err := io.ReadAll(resp.Body); err != nil || len(rest) != 0 {
		t.Fatalf("after FIN: %q %v", rest, err)
	}
	proxytest.WaitFor(t, "the tunnel's access log record", func() bool {
		return strings.Count(out.String(), "\n") >= 2
	})
	log := out.String()
	for _, want := range []string{`"protocol":"h3"`, `"method":"CONNECT"`, `"status":407`, `"status":200`,
		`"bytes_up":5`, `"bytes_down":5`, `"user":"alice"`} {
		if !strings.Contains(log, want) {
			t.Errorf("access log lacks %s:\n%s", want, log)
		}
	}
}

// TestConnectDenied checks that the access rules decide CONNECT over HTTP/3
// as any other: a rule denying the port answers 403 and dials nothing.
func TestConnectDenied(t *testing.T) {
	echo := proxytest.NewEcho(t)
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Default: acl.Allow,
		Rules:   []acl.Rule{{Name: "no-connect", Action: acl.Deny, Protocols: []string{"connect"}}},
	}))
	resp, _ := connectStream(t, p.client(t), echo.Addr, "")
	if resp.StatusCode != 403 {
		t.Fatalf("denied CONNECT: %d, want 403", resp.StatusCode)
	}
	if n := echo.Conns(); n != 0 {
		t.Errorf("the echo server got %d connections, want 0", n)
	}
}

// TestMaxConns checks that a listener serves at most MaxConns QUIC
// connections at once: the one past it is closed with H3_EXCESSIVE_LOAD,
// and once one closes a new one is served.
func TestMaxConns(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	cfg := testConfig()
	cfg.MaxConns = 2
	p := startProxy(t, cfg, proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	first := p.client(t)
	for _, cc := range []*http3.ClientConn{first, p.client(t)} {
		if resp, _ := get(t, cc, o.URL("/"), ""); resp.StatusCode != 200 {
			t.Fatalf("GET: %d", resp.StatusCode)
		}
	}
	qc := p.dial(t)
	select {
	case <-qc.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection past MaxConns is still open")
	}
	var appErr *quic.ApplicationError
	if err := context.Cause(qc.Context()); !errors.As(err, &appErr) || appErr.ErrorCode != quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad) {
		t.Fatalf("closed with %v, want H3_EXCESSIVE_LOAD", err)
	}
	first.CloseWithError(0, "")
	proxytest.WaitFor(t, "the closed connection to be given back", func() bool { return p.srv.Conns() < cfg.MaxConns })
	if resp, _ := get(t, p.client(t), o.URL("/"), ""); resp.StatusCode != 200 {
		t.Fatalf("GET after a connection closed: %d", resp.StatusCode)
	}
}

// TestForwardBody posts request bodies through the proxy to an origin
// that echoes them: of a known length (Content-Length) and of an unknown
// one (chunked upstream), and checks the bytes each way in the access log.
func TestForwardBody(t *testing.T) {
	var out proxytest.LogBuffer
	al := proxytest.JSONAccessLog(t, &out)
	o := proxytest.NewOrigin(t, proxytest.Echo())
	cfg := testConfig()
	cfg.Origin = testOrigin(origin.Config{Via: true, Forwarded: origin.ForwardedXFF})
	p := startProxy(t, cfg, proxytest.NewPolicy(t, proxytest.PolicyConfig{AccessLog: al}))
	cc := p.client(t)
	payload := strings.Repeat("rustle h3 body ", 5000) // 75,000 bytes: several DATA frames
	tests := []struct {
		name    string
		length  int64
		framing string
	}{
		{"content-length", int64(len(payload)), "Content-Length"},
		{"unknown length", -1, "Transfer-Encoding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, err := http.NewRequest(http.MethodPost, o.URL("/echo"), io.NopCloser(strings.NewReader(payload)))
			if err != nil {
				t.Fatal(err)
			}
			req.ContentLength = tt.length
			resp, err := cc.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || string(body) != payload {
				t.Fatalf("POST: %d, %d bytes back, %v", resp.StatusCode, len(body), err)
			}
			reqs := o.Requests()
			got := reqs[len(reqs)-1]
			if got.Header.Get(tt.framing) == "" || got.Header.Get("Via") != "3 rustle" || got.Header.Get("X-Forwarded-For") != "127.0.0.1" {
				t.Errorf("origin got %q", got.Head)
			}
		})
	}
	want := `"bytes_up":` + strconv.Itoa(len(payload)) + `,"bytes_down":` + strconv.Itoa(len(payload))
	proxytest.WaitFor(t, "both access log records", func() bool { return strings.Count(out.String(), want) == 2 })
}

// TestCoolingDown checks that wrong credentials on one QUIC connection
// start the client's cool-down: the failure that starts it is answered 429
// with Retry-After, and the connection then closes, as HTTP/2's GOAWAY
// ENHANCE_YOUR_CALM ends one.
func TestCoolingDown(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Users:  map[string]string{testUser: testPass},
		Limits: &limits.Config{AuthFailures: 3, AuthCooldown: 1500 * time.Millisecond},
	}))
	qc := p.dial(t)
	cc := (&http3.Transport{}).NewClientConn(qc)
	for i, want := range []int{407, 407, 429} {
		resp, _ := get(t, cc, o.URL("/"), basic(testUser, "wrong"))
		if resp.StatusCode != want {
			t.Fatalf("failure %d: %d, want %d", i+1, resp.StatusCode, want)
		}
		if want == 429 && resp.Header.Get("Retry-After") != "2" {
			t.Errorf("Retry-After %q, want 2", resp.Header.Get("Retry-After"))
		}
	}
	select {
	case <-qc.Context().Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the connection is still open after the cool-down started")
	}
}

// TestForwardPooled checks that forwarded requests share the upstream
// keep-alive pool: an origin that keeps its connection serves every
// request on one, and one that closes it after each answer (without
// saying so) gets each request again on a fresh connection, which the
// client never sees.
func TestForwardPooled(t *testing.T) {
	tests := []struct {
		name  string
		h     proxytest.Handler
		conns int
	}{
		{"kept alive", proxytest.Respond(200, "ok"), 1},
		{"closed after each answer", proxytest.ThenClose(proxytest.Respond(200, "ok")), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := proxytest.NewOrigin(t, tt.h)
			pool := proxytest.NewPool(t, dialer.PoolConfig{MaxIdlePerHost: 4, MaxIdle: 16, IdleTimeout: time.Minute})
			p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: pool}))
			cc := p.client(t)
			for i := range 4 {
				if resp, body := get(t, cc, o.URL("/"), ""); resp.StatusCode != 200 || string(body) != "ok" {
					t.Fatalf("GET %d: %d %q", i, resp.StatusCode, body)
				}
			}
			if n := o.Conns(); n != tt.conns {
				t.Errorf("origin connections: %d, want %d", n, tt.conns)
			}
		})
	}
}

// TestUpstreamFailures checks the answers to requests whose upstream
// cannot be had, as every front-end gives them (origin.Failure): a
// refused connection is 502, a destination the guard refuses 403, for a
// tunnel and a forwarded request alike, each logged with its reason.
func TestUpstreamFailures(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := closed.Addr().String()
	closed.Close() // nothing listens there now
	tests := []struct {
		name    string
		guard   bool
		connect bool
		status  int
		reason  string
	}{
		{"CONNECT refused", false, true, 502, "unreachable"},
		{"GET refused", false, false, 502, "unreachable"},
		{"CONNECT to a private address", true, true, 403, "forbidden"},
		{"GET to a private address", true, false, 403, "forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out proxytest.LogBuffer
			al := proxytest.JSONAccessLog(t, &out)
			p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{Guard: tt.guard, AccessLog: al}))
			var status int
			if tt.connect {
				resp, _ := connectStream(t, p.client(t), addr, "")
				status = resp.StatusCode
			} else {
				resp, _ := get(t, p.client(t), "http://"+addr+"/", "")
				status = resp.StatusCode
			}
			if status != tt.status {
				t.Fatalf("status %d, want %d", status, tt.status)
			}
			proxytest.WaitFor(t, "the record", func() bool { return strings.Contains(out.String(), `"reason":"`+tt.reason+`"`) })
		})
	}
}

// TestForwardConnectionAuth checks that a 401 offering NTLM or Negotiate,
// which authenticate the connection an HTTP/3 client's requests are not
// bound to, is not relayed: the stream is reset with H3_VERSION_FALLBACK
// (RFC 9114 §8.1), so that the client retries over HTTP/1.1, the access
// log says http-1.1-required with status 0, and the origin connection
// goes back to the pool (the next request finds it). Any other 401 is
// relayed.
func TestForwardConnectionAuth(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Sequence(
		proxytest.Respond(401, "log in with NTLM\n", "WWW-Authenticate: Negotiate", "WWW-Authenticate: NTLM"),
		proxytest.Respond(401, "log in\n", `WWW-Authenticate: Basic realm="intranet"`),
	))
	var access proxytest.LogBuffer
	pool := proxytest.NewPool(t, dialer.PoolConfig{MaxIdlePerHost: 4, MaxIdle: 16, IdleTimeout: time.Minute})
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: pool,
		AccessLog: proxytest.JSONAccessLog(t, &access)}))
	cc := p.client(t)
	req, err := http.NewRequest(http.MethodGet, o.URL("/ntlm"), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cc.RoundTrip(req)
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET /ntlm: %d %q, want the stream reset with H3_VERSION_FALLBACK", resp.StatusCode, body)
	}
	var he *http3.Error
	if !errors.As(err, &he) || !he.Remote || he.ErrorCode != http3.ErrCodeVersionFallback {
		t.Fatalf("GET /ntlm: %v (%T), want the stream reset with H3_VERSION_FALLBACK", err, err)
	}
	rec := proxytest.WaitJSONRecord(t, &access, func(m map[string]any) bool { return m["target"] == o.URL("/ntlm") })
	if rec["status"] != float64(0) || rec["reason"] != "http-1.1-required" {
		t.Errorf("access log record: %v, want status 0, reason http-1.1-required", rec)
	}
	if resp, body := get(t, cc, o.URL("/basic"), ""); resp.StatusCode != 401 || string(body) != "log in\n" {
		t.Errorf("GET /basic: %d %q, want the origin's 401", resp.StatusCode, body)
	}
	if n := o.Conns(); n != 1 {
		t.Errorf("origin connections: %d, want 1 (the one that asked for NTLM went back to the pool)", n)
	}
}
