package acl

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// TestMatcher checks that a matcher uses the criteria of the access rules
// and returns the first entry that matches.
func TestMatcher(t *testing.T) {
	m, err := NewMatcher([]Rule{
		{Name: "corp", Hosts: []string{".corp.example"}},
		{Name: "alice", Users: []string{"alice"}, Ports: []string{"443"}},
		{Name: "team", Groups: []string{"team"}},
		{Name: "net", Hosts: []string{"10.0.0.0/8"}, Protocols: []string{"socks5"}},
		{Name: "lan", Clients: []string{"192.0.2.0/24"}, Methods: []string{"GET"}},
	}, map[string][]string{"team": {"bob"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		r    Request
		want int
	}{
		{"suffix", Request{Host: "WWW.corp.example.", Port: 80}, 0},
		{"apex", Request{Host: "corp.example", Port: 80}, 0},
		{"user and port", Request{User: "alice", Host: "a.test", Port: 443}, 1},
		{"user wrong port", Request{User: "alice", Host: "a.test", Port: 80}, -1},
		{"group", Request{User: "bob", Host: "a.test", Port: 80}, 2},
		{"cidr literal", Request{Host: "10.1.2.3", Port: 80, Protocol: SOCKS5}, 3},
		{"cidr addr", Request{Addr: netip.MustParseAddr("10.1.2.3"), Port: 80, Protocol: SOCKS5}, 3},
		{"cidr wrong protocol", Request{Host: "10.1.2.3", Port: 80, Protocol: HTTP}, -1},
		{"cidr name unresolved", Request{Host: "ten.test", Port: 80, Protocol: SOCKS5}, -1},
		{"client and method", Request{Client: netip.MustParseAddr("192.0.2.9"), Host: "a.test", Method: "GET"}, 4},
		{"nothing", Request{Host: "a.test", Port: 80}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := m.Match(tt.r); got != tt.want {
				t.Errorf("Match = %d, want %d", got, tt.want)
			}
		})
	}
	r := Request{User: "bob", Host: "www.corp.example", Port: 443, Method: "CONNECT", Protocol: Connect}
	if n := testing.AllocsPerRun(100, func() { m.Match(r) }); n != 0 {
		t.Errorf("Match allocates %v times", n)
	}
}

// TestMatcherAppendMatches checks that AppendMatches lists every entry
// that matches, in order, where Match gives the first only, and
// allocates nothing once dst has room.
func TestMatcherAppendMatches(t *testing.T) {
	m, err := NewMatcher([]Rule{
		{Name: "corp", Hosts: []string{".corp.example"}},
		{Name: "alice", Users: []string{"alice"}},
		{Name: "all"},
		{Name: "socks", Protocols: []string{"socks5"}},
	}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		r    Request
		want []int
	}{
		{"three", Request{User: "alice", Host: "www.corp.example", Port: 80, Protocol: HTTP}, []int{0, 1, 2}},
		{"two", Request{User: "alice", Host: "a.test", Port: 80, Protocol: HTTP}, []int{1, 2}},
		{"catch-all", Request{Host: "a.test", Port: 80, Protocol: HTTP}, []int{2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := m.AppendMatches(nil, tt.r); !slices.Equal(got, tt.want) {
				t.Errorf("AppendMatches = %v, want %v", got, tt.want)
			}
		})
	}
	dst := make([]int, 0, 4)
	r := tests[0].r
	if n := testing.AllocsPerRun(100, func() { dst = m.AppendMatches(dst[:0], r) }); n != 0 {
		t.Errorf("AppendMatches allocates %v times", n)
	}
}

// TestMatcherErrors checks that a matcher refuses what a rule would, and
// the keys of a verdict.
func TestMatcherErrors(t *testing.T) {
	tests := []struct {
		name string
		rule Rule
		want string
	}{
		{"bad host", Rule{Name: "r", Hosts: []string{"a b"}}, "matcher r: hosts"},
		{"unknown group", Rule{Groups: []string{"nope"}}, "matcher [0]: groups"},
		{"action", Rule{Action: Allow}, "not criteria"},
		{"allow_private", Rule{AllowPrivate: []string{"10.0.0.0/8"}}, "not criteria"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewMatcher([]Rule{tt.rule}, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("NewMatcher error = %v, want one with %q", err, tt.want)
			}
		})
	}
}
