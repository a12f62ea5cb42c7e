package h2

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestPathRules checks that an access rule's paths see an HTTP/2
// request's :path: the rule refuses what it names, dot segments resolved,
// and lets the rest through.
func TestPathRules(t *testing.T) {
	o := echoOrigin(t)
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Default: acl.Allow,
		Rules:   []acl.Rule{{Name: "no-admin", Action: acl.Deny, Paths: []string{"/admin/*"}}},
	}))
	cc := p.client(t)
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/admin/x?y", 403},
		{"/a/../admin/x", 403},
		{"/administrator", 200},
	} {
		if resp, body := roundTrip(t, cc, newRequest(t, "GET", o.URL+tc.path, nil)); resp.StatusCode != tc.want {
			t.Errorf("GET %s: %d %q, want %d", tc.path, resp.StatusCode, body, tc.want)
		}
	}
}
