package h2

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestOriginFraming checks how an origin's HTTP/1.1 response, read with
// internal/http1, reaches an HTTP/2 client: each body framing, the
// connection-specific fields left out, trailers, and the answers that
// cannot be passed on.
func TestOriginFraming(t *testing.T) {
	p := startProxy(t, testConfig(Config{}, origin.Config{MaxHeaderBytes: 4096}), nil)
	cc := p.client(t)
	tests := []struct {
		name       string
		method     string
		handler    proxytest.Handler
		status     int
		body       string
		header     map[string]string // want these values ("" = absent)
		trailer    map[string]string
		bodyPrefix bool // body is a prefix of the 502's reason
	}{
		{name: "length", handler: proxytest.Raw("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\n\r\nhello"),
			status: 200, body: "hello", header: map[string]string{"X-A": "1", "Content-Length": "5"}},
		{name: "chunked", handler: proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 99\r\n\r\n4\r\nWiki\r\n5;x=y\r\npedia\r\n0\r\n\r\n"),
			status: 200, body: "Wikipedia", header: map[string]string{"Content-Length": "", "Transfer-Encoding": ""}},
		{name: "chunked with trailers", handler: proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Sum\r\n\r\n2\r\nab\r\n0\r\nX-Sum: 2\r\n\r\n"),
			status: 200, body: "ab", trailer: map[string]string{"X-Sum": "2"}},
		{name: "close-delimited", handler: proxytest.ThenClose(proxytest.Raw("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the close")),
			status: 200, body: "until the close"},
		{name: "HTTP/1.0", handler: proxytest.ThenClose(proxytest.Raw("HTTP/1.0 200 OK\r\nX-Old: yes\r\n\r\nold")),
			status: 200, body: "old", header: map[string]string{"X-Old": "yes"}},
		{name: "HEAD keeps Content-Length", method: "HEAD", handler: proxytest.Raw("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n"),
			status: 200, header: map[string]string{"Content-Length": "10"}},
		{name: "204", handler: proxytest.Raw("HTTP/1.1 204 No Content\r\nX-B: 2\r\n\r\n"),
			status: 204, header: map[string]string{"X-B": "2"}},
		{name: "interim then final", handler: proxytest.Raw("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"),
			status: 200, body: "ok"},
		{name: "connection-listed fields dropped", handler: proxytest.Raw("HTTP/1.1 200 OK\r\nConnection: X-Hop, keep-alive\r\nX-Hop: 1\r\nKeep-Alive: timeout=5\r\nX-Kept: 1\r\nContent-Length: 2\r\n\r\nok"),
			status: 200, body: "ok", header: map[string]string{"X-Hop": "", "Keep-Alive": "", "Connection": "", "X-Kept": "1"}},
		{name: "other transfer coding", handler: proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxx"),
			status: 502, body: "rustle: upstream used a transfer coding", bodyPrefix: true},
		{name: "malformed status line", handler: proxytest.Raw("HTTP/1.1 2000 OK\r\n\r\n"),
			status: 502, body: "rustle: malformed response from upstream", bodyPrefix: true},
		{name: "head too large", handler: proxytest.Raw("HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", 8<<10) + "\r\nContent-Length: 0\r\n\r\n"),
			status: 502, body: "rustle: upstream response head too large", bodyPrefix: true},
		// One strictness for every front-end (issue 15): what the
		// HTTP/1.1 path refuses in an origin's answer, h2 refuses too.
		{name: "bare LF", handler: proxytest.Raw("HTTP/1.1 200 OK\r\nX-A: 1\nX-Smuggled: 1\r\nContent-Length: 2\r\n\r\nok"),
			status: 502, body: "rustle: malformed response from upstream", bodyPrefix: true},
		{name: "obs-fold", handler: proxytest.Raw("HTTP/1.1 200 OK\r\nX-A: 1\r\n 2\r\nContent-Length: 2\r\n\r\nok"),
			status: 502, body: "rustle: malformed response from upstream", bodyPrefix: true},
		{name: "space before colon", handler: proxytest.Raw("HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\nok"),
			status: 502, body: "rustle: malformed response from upstream", bodyPrefix: true},
		{name: "control byte in the reason", handler: proxytest.Raw("HTTP/1.1 200 O\x01K\r\nContent-Length: 2\r\n\r\nok"),
			status: 502, body: "rustle: malformed response from upstream", bodyPrefix: true},
		{name: "status 600", handler: proxytest.Raw("HTTP/1.1 600 Odd\r\nContent-Length: 2\r\n\r\nok"),
			status: 502, body: "rustle: malformed response from upstream", bodyPrefix: true},
		{name: "HTTP/1.0 with Transfer-Encoding", handler: proxytest.ThenClose(proxytest.Raw("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n")),
			status: 502, body: "rustle: malformed response from upstream", bodyPrefix: true},
		{name: "gzip then chunked", handler: proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"),
			status: 502, body: "rustle: upstream used a transfer coding", bodyPrefix: true},
		{name: "origin's Proxy-Authenticate dropped", handler: proxytest.Raw("HTTP/1.1 407 Proxy Auth\r\nProxy-Authenticate: Basic realm=\"origin\"\r\nContent-Length: 2\r\n\r\nno"),
			status: 407, body: "no", header: map[string]string{"Proxy-Authenticate": ""}},
		{name: "closed before a response", handler: proxytest.ThenClose(proxytest.Raw("")),
			status: 502, body: "rustle: upstream", bodyPrefix: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := proxytest.NewOrigin(t, tt.handler)
			method := tt.method
			if method == "" {
				method = "GET"
			}
			resp, body := roundTrip(t, cc, newRequest(t, method, o.URL("/"), nil))
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d (body %q), want %d", resp.StatusCode, body, tt.status)
			}
			if tt.bodyPrefix && !strings.HasPrefix(body, tt.body) || !tt.bodyPrefix && body != tt.body {
				t.Errorf("body %q, want %q", body, tt.body)
			}
			for k, want := range tt.header {
				if got := resp.Header.Get(k); got != want {
					t.Errorf("header %s = %q, want %q (%v)", k, got, want, resp.Header)
				}
			}
			for k, want := range tt.trailer {
				if got := resp.Trailer.Get(k); got != want {
					t.Errorf("trailer %s = %q, want %q (%v)", k, got, want, resp.Trailer)
				}
			}
		})
	}
}

// TestConnectionAuthRetryOverHTTP11 checks that a 401 offering NTLM or
// Negotiate, which authenticate the connection an HTTP/2 client's
// streams are not bound to, is not relayed to a client of the https
// listener forwarding plain http:// requests either: the stream is reset
// with HTTP_1_1_REQUIRED, so that the client retries over HTTP/1.1, the
// origin connection going back to the pool (the next request finds it);
// with a request body too, which ends without a hang. Any other 401 is
// relayed.
func TestConnectionAuthRetryOverHTTP11(t *testing.T) {
	ntlm := proxytest.Respond(401, "log in with NTLM\n", "WWW-Authenticate: Negotiate, NTLM")
	o := proxytest.NewOrigin(t, proxytest.Sequence(ntlm,
		proxytest.Respond(401, "log in\n", `WWW-Authenticate: Basic realm="intranet"`), ntlm))
	pool := proxytest.NewPool(t, dialer.PoolConfig{})
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: pool}))
	cc := p.client(t)
	wantReset := func(req *http.Request) {
		t.Helper()
		resp, err := cc.RoundTrip(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			t.Fatalf("%s %s: %d %q, want the stream reset with HTTP_1_1_REQUIRED", req.Method, req.URL, resp.StatusCode, body)
		}
		var se http2.StreamError
		if !errors.As(err, &se) || se.Code != http2.ErrCodeHTTP11Required {
			t.Fatalf("%s %s: %v, want the stream reset with HTTP_1_1_REQUIRED", req.Method, req.URL, err)
		}
	}
	wantReset(newRequest(t, "GET", o.URL("/ntlm"), nil))
	if resp, body := roundTrip(t, cc, newRequest(t, "GET", o.URL("/basic"), nil)); resp.StatusCode != 401 || body != "log in\n" {
		t.Errorf("GET /basic: %d %q, want the origin's 401", resp.StatusCode, body)
	}
	if n := o.Conns(); n != 1 {
		t.Errorf("origin connections: %d, want 1 (the one that asked for NTLM went back to the pool)", n)
	}
	wantReset(newRequest(t, "POST", o.URL("/ntlm"), strings.NewReader("a body")))
}
