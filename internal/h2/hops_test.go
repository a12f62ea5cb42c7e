package h2

import (
	"slices"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestMaxForwards checks Max-Forwards on TRACE and OPTIONS streams (RFC
// 9110 §7.6.2), as on HTTP/1.1: at 0 rustle answers itself (the echo of
// a TRACE less credentials and cookies, the methods it serves for
// OPTIONS) and the origin sees nothing; above 0 the origin gets one less
// in a single field; a malformed one is 400; a GET is forwarded as it
// came.
func TestMaxForwards(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "origin"))
	p := startProxy(t, testConfig(Config{}), nil)
	cc := p.client(t)
	tests := []struct {
		name, method string
		header       [][2]string
		status       int
		forwarded    bool
		originMF     string
		contentType  string
		allow        string
		body         string
	}{
		{name: "TRACE at 0", method: "TRACE",
			header: [][2]string{{"Max-Forwards", "0"}, {"Proxy-Authorization", "Basic YWxpY2U6cHc="}, {"Authorization", "Basic b3JpZ2luOnB3"}, {"Cookie", "sid=s3cret"}, {"X-A", "1"}},
			status: 200, contentType: origin.TraceContentType, body: "TRACE URL HTTP/2\r\naccept-encoding: gzip\r\nmax-forwards: 0\r\nuser-agent: Go-http-client/2.0\r\nx-a: 1\r\n\r\n"},
		{name: "OPTIONS at 0", method: "OPTIONS", header: [][2]string{{"Max-Forwards", "0"}}, status: 200, allow: origin.ProxyAllow},
		{name: "TRACE at 5", method: "TRACE", header: [][2]string{{"Max-Forwards", "5"}}, status: 200, forwarded: true, originMF: "4"},
		{name: "OPTIONS at 1", method: "OPTIONS", header: [][2]string{{"Max-Forwards", "1"}}, status: 200, forwarded: true, originMF: "0"},
		{name: "GET at 0", method: "GET", header: [][2]string{{"Max-Forwards", "0"}}, status: 200, forwarded: true, originMF: "0"},
		{name: "malformed", method: "OPTIONS", header: [][2]string{{"Max-Forwards", "x"}}, status: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(o.Requests())
			url := o.URL("/t/" + strings.ReplaceAll(tt.name, " ", "-"))
			req := newRequest(t, tt.method, url, nil)
			for _, h := range tt.header {
				req.Header.Add(h[0], h[1])
			}
			resp, body := roundTrip(t, cc, req)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d: %q", resp.StatusCode, tt.status, body)
			}
			reqs := o.Requests()[before:]
			if got := len(reqs) == 1; got != tt.forwarded {
				t.Fatalf("the origin got %d requests, want it forwarded: %v", len(reqs), tt.forwarded)
			}
			if tt.forwarded {
				if got := strings.Join(reqs[0].Header.Values("Max-Forwards"), "|"); got != tt.originMF {
					t.Errorf("the origin got Max-Forwards %q, want %q", got, tt.originMF)
				}
				return
			}
			if tt.status != 200 {
				return
			}
			if got := resp.Header.Get("Content-Type"); got != tt.contentType {
				t.Errorf("Content-Type %q, want %q", got, tt.contentType)
			}
			if got := resp.Header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow %q, want %q", got, tt.allow)
			}
			// The fields in any order (Go's client sends them so).
			if want := strings.ReplaceAll(tt.body, "URL", url); sortedLines(body) != sortedLines(want) || !strings.HasPrefix(body, strings.SplitAfter(want, "\r\n")[0]) {
				t.Errorf("body %q, want %q", body, want)
			}
		})
	}
}

// sortedLines returns the lines of an echo sorted, for a comparison that
// ignores their order.
func sortedLines(s string) string {
	lines := strings.Split(s, "\r\n")
	slices.Sort(lines)
	return strings.Join(lines, "\r\n")
}
