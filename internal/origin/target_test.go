package origin_test

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
)

// TestAppendRequestTarget checks the request target sent upstream:
// origin form, or absolute form to an http parent, with the parent's
// Proxy-Authorization line.
func TestAppendRequestTarget(t *testing.T) {
	p, err := route.NewParent(proxytest.ParentDefaults(route.ParentConfig{Name: "up", URL: "http://u:pw@127.0.0.1:3128"}))
	if err != nil {
		t.Fatal(err)
	}
	anon, err := route.NewParent(proxytest.ParentDefaults(route.ParentConfig{Name: "anon", URL: "http://127.0.0.1:3128"}))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		parent          *route.Parent
		authority, path string
		want, wantAuth  string
	}{
		{nil, "example.com", "/a?b", "/a?b", ""},
		{nil, "example.com", "?q", "/?q", ""},
		{p, "example.com:8080", "/a?b", "http://example.com:8080/a?b", "Proxy-Authorization: Basic dTpwdw==\r\n"},
		{p, "example.com", "?q", "http://example.com/?q", "Proxy-Authorization: Basic dTpwdw==\r\n"},
		{p, "example.com", "*", "http://example.com", "Proxy-Authorization: Basic dTpwdw==\r\n"},
		{anon, "[::1]:80", "/", "http://[::1]:80/", ""},
		{anon, "0x7f.1:8080", "/", "http://127.0.0.1:8080/", ""},
		{anon, "2130706433", "/", "http://127.0.0.1/", ""},
		{anon, "1.2.3.4.", "/", "http://1.2.3.4/", ""},
		{nil, "127.1", "/", "/", ""},
	}
	for _, tt := range tests {
		t.Run(tt.parent.Name()+" "+tt.path, func(t *testing.T) {
			if got := string(origin.AppendRequestTarget(nil, tt.parent, tt.authority, tt.path)); got != tt.want {
				t.Errorf("string target = %q, want %q", got, tt.want)
			}
			if got := string(origin.AppendRequestTarget(nil, tt.parent, []byte(tt.authority), []byte(tt.path))); got != tt.want {
				t.Errorf("[]byte target = %q, want %q", got, tt.want)
			}
			if got := string(origin.AppendParentAuthorization(nil, tt.parent)); got != tt.wantAuth {
				t.Errorf("authorization = %q, want %q", got, tt.wantAuth)
			}
		})
	}
}
