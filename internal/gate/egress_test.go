package gate_test

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestDialOptionsEgress: a grant's dial options carry its user's source
// (the user's own, the name without its session key's, or the
// listener's) and a session key that is the whole name, so that two
// users' sessions of one key stay apart; without a session key there is
// none.
func TestDialOptionsEgress(t *testing.T) {
	def, err := dialer.NewSource(dialer.SourceConfig{Bind: []string{"2001:db8:1::1"}})
	if err != nil {
		t.Fatal(err)
	}
	alices, _ := dialer.NewSource(dialer.SourceConfig{Bind: []string{"2001:db8:2::1"}})
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Users: map[string]string{
		"alice-session-42": "pw", "bob-session-42": "pw", "carol": "pw"}})
	p.Egress = &gate.Egress{Default: def, Rules: []gate.EgressRule{{Who: acl.NewSelector(acl.Who{Users: []string{"alice"}}, nil, nil), Source: alices}}}
	for _, tc := range []struct {
		user string
		src  *dialer.Source
		key  string
	}{
		{"alice-session-42", alices, "alice-session-42"},
		{"bob-session-42", def, "bob-session-42"},
		{"carol", def, ""},
	} {
		var g gate.Grant
		s := newSession(t, p)
		if k := s.Authorize(connectReq("example.com", basicAuth(tc.user, "pw")), &g); k != gate.OK {
			t.Fatalf("%s: Authorize = %v", tc.user, k)
		}
		o := g.DialOptions()
		if o.Source != tc.src || o.Key != tc.key {
			t.Errorf("%s: source %p key %q, want %p %q", tc.user, o.Source, o.Key, tc.src, tc.key)
		}
		g.Finish(0, 0)
	}
}
