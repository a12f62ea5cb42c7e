package httpproxy_test

import (
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestMaxForwards checks Max-Forwards on TRACE and OPTIONS (RFC 9110
// §7.6.2): at 0 rustle answers itself (a TRACE with an echo of the
// request as received, less the client's credentials and cookies; an
// OPTIONS with the methods it serves) and the origin sees nothing; above
// 0 the origin gets one less, in a single field; a malformed one is 400;
// other methods, and requests without the field, are forwarded as they
// came.
func TestMaxForwards(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setupPolicy(t, testCfg{}, proxytest.PolicyConfig{Users: map[string]string{"alice": "pw"}},
		proxytest.Respond(200, "origin"))
	authz := "Proxy-Authorization: Basic YWxpY2U6cHc="
	tests := []struct {
		name        string
		method      string
		header      []string
		status      int
		forwarded   bool   // the origin got it
		originMF    string // the Max-Forwards lines the origin got, joined with "|"
		contentType string
		allow       string
		body        string // what the answer's body is when rustle answers
	}{
		{name: "TRACE at 0", method: "TRACE",
			header: []string{authz, "Max-Forwards: 0", "Authorization: Basic b3JpZ2luOnB3", "Cookie: sid=s3cret", "X-A: 1"},
			status: 200, contentType: origin.TraceContentType,
			body: "TRACE URL HTTP/1.1\r\nHost: HOST\r\nMax-Forwards: 0\r\nX-A: 1\r\n\r\n"},
		{name: "OPTIONS at 0", method: "OPTIONS", header: []string{authz, "Max-Forwards: 00"}, status: 200, allow: origin.ProxyAllow},
		{name: "TRACE at 5", method: "TRACE", header: []string{authz, "Max-Forwards: 5"}, status: 200, forwarded: true, originMF: "4"},
		{name: "OPTIONS at 1", method: "OPTIONS", header: []string{authz, "Max-Forwards: 1"}, status: 200, forwarded: true, originMF: "0"},
		{name: "two fields", method: "TRACE", header: []string{authz, "Max-Forwards: 3", "X-B: 2", "max-forwards: 9"}, status: 200, forwarded: true, originMF: "2"},
		{name: "TRACE without", method: "TRACE", header: []string{authz}, status: 200, forwarded: true},
		{name: "GET at 0", method: "GET", header: []string{authz, "Max-Forwards: 0"}, status: 200, forwarded: true, originMF: "0"},
		{name: "malformed", method: "TRACE", header: []string{authz, "Max-Forwards: -1"}, status: 400},
		{name: "no credentials", method: "TRACE", header: []string{"Max-Forwards: 0"}, status: 407},
	}
	// One connection: rustle's own answers keep it open.
	outer := t
	c := proxytest.Dial(t, proxy)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(o.Requests())
			url := o.URL("/t?" + strings.ReplaceAll(tt.name, " ", "-"))
			r, _ := c.RoundTrip(request(tt.method, url, 1, "", append([]string{"Host: " + o.Addr}, tt.header...)...))
			if r.Status == 400 {
				c = proxytest.Dial(outer, proxy) // a 400 closes the connection
			}
			if r.Status != tt.status {
				t.Fatalf("status %d, want %d: %q", r.Status, tt.status, r.Head)
			}
			reqs := o.Requests()[before:]
			if got := len(reqs) == 1; got != tt.forwarded {
				t.Fatalf("the origin got %d requests, want it forwarded: %v", len(reqs), tt.forwarded)
			}
			if tt.forwarded {
				if got := strings.Join(reqs[0].Header.Values("Max-Forwards"), "|"); got != tt.originMF {
					t.Errorf("the origin got Max-Forwards %q, want %q", got, tt.originMF)
				}
				if string(r.Body) != "origin" {
					t.Errorf("body %q", r.Body)
				}
				return
			}
			if tt.status != 200 {
				return
			}
			if got := r.Header.Get("Content-Type"); got != tt.contentType {
				t.Errorf("Content-Type %q, want %q", got, tt.contentType)
			}
			if got := r.Header.Get("Allow"); got != tt.allow {
				t.Errorf("Allow %q, want %q", got, tt.allow)
			}
			want := strings.NewReplacer("URL", url, "HOST", o.Addr).Replace(tt.body)
			if string(r.Body) != want {
				t.Errorf("body %q, want %q", r.Body, want)
			}
			for _, secret := range []string{"YWxpY2U6cHc=", "b3JpZ2luOnB3", "s3cret"} {
				if strings.Contains(string(r.Body), secret) {
					t.Errorf("the echo holds %q", secret)
				}
			}
		})
	}
}
