package h3

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestMaxForwards checks Max-Forwards on TRACE and OPTIONS requests (RFC
// 9110 §7.6.2), as on HTTP/1.1: at 0 rustle answers itself (the echo of
// a TRACE less credentials and cookies, the methods it serves for
// OPTIONS) and the origin sees nothing; above 0 the origin gets one less
// in a single field; a malformed one is 400; a GET is forwarded as it
// came.
func TestMaxForwards(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "origin"))
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	cc := p.client(t)
	tests := []struct {
		name, method string
		header       [][2]string
		status       int
		forwarded    bool
		originMF     string
		contentType  string
		allow        string
		lines        []string // the echo's field lines, in any order
	}{
		{name: "TRACE at 0", method: "TRACE",
			header: [][2]string{{"Max-Forwards", "0"}, {"Proxy-Authorization", "Basic YWxpY2U6cHc="}, {"Authorization", "Basic b3JpZ2luOnB3"}, {"Cookie", "sid=s3cret"}, {"X-A", "1"}},
			status: 200, contentType: origin.TraceContentType, lines: []string{"max-forwards: 0", "x-a: 1"}},
		{name: "OPTIONS at 0", method: "OPTIONS", header: [][2]string{{"Max-Forwards", "0"}}, status: 200, allow: origin.ProxyAllow},
		{name: "TRACE at 5", method: "TRACE", header: [][2]string{{"Max-Forwards", "5"}}, status: 200, forwarded: true, originMF: "4"},
		{name: "OPTIONS at 1", method: "OPTIONS", header: [][2]string{{"Max-Forwards", "1"}}, status: 200, forwarded: true, originMF: "0"},
		{name: "GET at 0", method: "GET", header: [][2]string{{"Max-Forwards", "0"}}, status: 200, forwarded: true, originMF: "0"},
		{name: "malformed", method: "TRACE", header: [][2]string{{"Max-Forwards", "1x"}}, status: 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(o.Requests())
			u := o.URL("/t/" + strings.ReplaceAll(tt.name, " ", "-"))
			req, err := http.NewRequest(tt.method, u, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, h := range tt.header {
				req.Header.Add(h[0], h[1])
			}
			resp, err := cc.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			body := string(b)
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
			if tt.lines == nil {
				if body != "" {
					t.Errorf("body %q", body)
				}
				return
			}
			first, rest, _ := strings.Cut(body, "\r\n")
			lines := strings.Split(strings.TrimSuffix(rest, "\r\n\r\n"), "\r\n")
			if first != "TRACE "+u+" HTTP/3" || !strings.HasSuffix(body, "\r\n\r\n") {
				t.Fatalf("echo %q", body)
			}
			for _, l := range tt.lines {
				if !slices.Contains(lines, l) {
					t.Errorf("echo %q lacks %q", body, l)
				}
			}
			for _, secret := range []string{"YWxpY2U6cHc=", "b3JpZ2luOnB3", "s3cret"} {
				if strings.Contains(body, secret) {
					t.Errorf("the echo holds %q", secret)
				}
			}
		})
	}
}
