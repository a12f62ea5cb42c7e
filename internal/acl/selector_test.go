package acl_test

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
)

// TestSelector checks the one user matcher every table shares: users
// compared exactly (case and session key included), "*" for every
// authenticated user, members of configured groups, groups an identity
// provider gives, a group both configured and provided, and an empty
// selector selecting anyone, the unauthenticated too.
func TestSelector(t *testing.T) {
	groups := map[string][]string{"devs": {"zoe"}, "ops": {"olga"}}
	provided := []string{"devs", "ci"}
	tests := []struct {
		name   string
		who    acl.Who
		user   string
		groups []string
		want   bool
	}{
		{"empty selects anyone", acl.Who{}, "alice", nil, true},
		{"empty selects the unauthenticated", acl.Who{}, "", nil, true},
		{"listed user", acl.Who{Users: []string{"alice"}}, "alice", nil, true},
		{"other user", acl.Who{Users: []string{"alice"}}, "bob", nil, false},
		{"no user", acl.Who{Users: []string{"alice"}}, "", nil, false},
		{"case counts", acl.Who{Users: []string{"alice"}}, "Alice", nil, false},
		{"a session key is part of the name", acl.Who{Users: []string{"alice"}}, "alice-session-4", nil, false},
		{"every user", acl.Who{Users: []string{"*"}}, "anyone", nil, true},
		{"every user, not the unauthenticated", acl.Who{Users: []string{"*"}}, "", nil, false},
		{"configured member", acl.Who{Groups: []string{"ops"}}, "olga", nil, true},
		{"configured group, not a member", acl.Who{Groups: []string{"ops"}}, "alice", nil, false},
		{"provider group", acl.Who{Groups: []string{"ci"}}, "bot", []string{"x", "ci"}, true},
		{"provider group not named", acl.Who{Groups: []string{"ci"}}, "bot", []string{"ops"}, false},
		{"configured only: a provider's claim does not count", acl.Who{Groups: []string{"ops"}}, "bot", []string{"ops"}, false},
		{"both: configured member", acl.Who{Groups: []string{"devs"}}, "zoe", nil, true},
		{"both: provided member", acl.Who{Groups: []string{"devs"}}, "carl", []string{"devs"}, true},
		{"groups without a user", acl.Who{Groups: []string{"ci"}}, "", []string{"ci"}, false},
		{"users or groups", acl.Who{Users: []string{"alice"}, Groups: []string{"ops"}}, "olga", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := acl.NewSelector(tt.who, groups, provided)
			if got := s.Match(tt.user, tt.groups); got != tt.want {
				t.Errorf("Match(%q, %q) = %v, want %v", tt.user, tt.groups, got, tt.want)
			}
			if s.Empty() != (len(tt.who.Users) == 0 && len(tt.who.Groups) == 0) {
				t.Errorf("Empty() = %v", s.Empty())
			}
		})
	}
	var zero acl.Selector
	if !zero.Match("", nil) || !zero.Empty() {
		t.Errorf("the zero Selector does not select anyone")
	}
	s := acl.NewSelector(acl.Who{Users: []string{"alice"}, Groups: []string{"ci"}}, groups, provided)
	g := []string{"a", "b", "ci"}
	if n := testing.AllocsPerRun(100, func() { s.Match("bot", g) }); n != 0 {
		t.Errorf("Match allocates %v times", n)
	}
}

// TestRuleEveryUser checks that a rule's users = ["*"] matches every
// authenticated user, as a quota's always did, and no request without
// one: before the Selector it matched only a user named "*".
func TestRuleEveryUser(t *testing.T) {
	p := mustPolicy(t, acl.Config{Rules: []acl.Rule{{Name: "users", Action: acl.Allow, Users: []string{"*"}}}})
	for user, want := range map[string]bool{"alice": true, "*": true, "": false} {
		if allow, _ := p.Check(acl.Request{User: user, Host: "example.com", Port: 443}); allow != want {
			t.Errorf("user %q: allow = %v, want %v", user, allow, want)
		}
	}
}
