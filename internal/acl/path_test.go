package acl_test

import (
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
)

// TestPaths checks the paths criterion: an exact path, a prefix, the
// query ignored, dot segments and encoded unreserved characters resolved
// as an origin resolves them (so "/v1/../admin" is "/admin" and
// "/%61dmin" "/admin"), an encoded slash no separator, a malformed
// encoding and a tunnel matching no entry; and the https protocol of
// intercepted requests.
func TestPaths(t *testing.T) {
	p := mustPolicy(t, acl.Config{Rules: []acl.Rule{
		{Name: "no-admin", Action: acl.Deny, Paths: []string{"/admin", "/admin/*"}},
		{Name: "api", Action: acl.Allow, Hosts: []string{"api.example"}, Protocols: []string{"https"}, Paths: []string{"/v1/*", "/health"}},
	}})
	for _, tc := range []struct {
		path, proto string
		want        string // the deciding rule
	}{
		{"/v1/models", "https", "api"},
		{"/v1/", "https", "api"},
		{"/v1", "https", acl.DefaultRule},
		{"/v1/models?x=/admin", "https", "api"},
		{"/health", "https", "api"},
		{"/health/x", "https", acl.DefaultRule},
		{"/admin", "https", "no-admin"},
		{"/admin/users", "https", "no-admin"},
		{"/v1/../admin", "https", "no-admin"},
		{"/v1/%2E%2E/admin", "https", "no-admin"},
		{"/%61dmin", "https", "no-admin"},
		{"/v1/./models", "https", "api"},
		{"/v1%2Fmodels", "https", acl.DefaultRule}, // an encoded slash is no separator
		{"/v1/%zz", "https", acl.DefaultRule},      // malformed: no entry
		{"/v1/models", "http", acl.DefaultRule},    // the rule is for intercepted requests
		{"", "connect", acl.DefaultRule},
	} {
		t.Run(tc.proto+" "+tc.path, func(t *testing.T) {
			proto, err := acl.ParseProtocol(tc.proto)
			if err != nil {
				t.Fatal(err)
			}
			d := p.Decide(acl.Request{Host: "api.example", Port: 443, Method: "GET", Protocol: proto, Path: tc.path})
			if d.Rule != tc.want {
				t.Errorf("decided by %q, want %q", d.Rule, tc.want)
			}
		})
	}
}

// TestParsePath checks what a paths entry may be.
func TestParsePath(t *testing.T) {
	for _, ok := range []string{"/", "/*", "/v1/*", "/v1/models", "/a%2Fb", "/x-y_z~"} {
		if err := acl.ParsePath(ok); err != nil {
			t.Errorf("ParsePath(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "v1/*", "/v1/*/x", "/a?b", "/a#b", "/a b", "/a/../b", "/./a", "/%61", "/a%2f", "/%zz"} {
		if err := acl.ParsePath(bad); err == nil {
			t.Errorf("ParsePath(%q) accepted", bad)
		}
	}
	_, err := acl.New(acl.Config{Rules: []acl.Rule{{Name: "r", Action: acl.Allow, Paths: []string{"nope"}}}})
	if err == nil || !strings.Contains(err.Error(), "paths") {
		t.Errorf("New with a bad path: %v", err)
	}
}
