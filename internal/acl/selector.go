package acl

import (
	"fmt"
	"slices"
)

// Every is the users entry that selects every authenticated user.
const Every = "*"

// Who is a users-and-groups criterion as configured: the users and
// groups keys of every table that applies to some users (an access rule,
// a route, an egress rule, a quota, a byte-rate schedule). An empty Who
// (no users, no groups) selects anyone, unauthenticated requests too.
type Who struct {
	// Users are user names, compared exactly (case and a session key
	// included: "alice-session-42" is not "alice"); Every ("*") is every
	// authenticated user.
	Users []string
	// Groups are names of groups: of the groups map a Selector is
	// compiled with (their members are selected as if listed in Users)
	// or of its provider groups (a user whose identity provider put it
	// in the group is selected).
	Groups []string
}

// check calls fail with the criterion ("users", "groups") and the
// problem of each entry of w that is wrong: a users entry ParseUser
// refuses, or a group neither in groups nor in providerGroups.
func (w Who) check(groups map[string][]string, providerGroups []string, fail func(key string, err error)) {
	for _, u := range w.Users {
		if err := ParseUser(u); err != nil {
			fail("users", err)
		}
	}
	for _, g := range w.Groups {
		if _, ok := groups[g]; !ok && !slices.Contains(providerGroups, g) {
			fail("groups", fmt.Errorf("group %q is not defined", g))
		}
	}
}

// Selector is a compiled [Who]: the one way rustle selects users, for
// the access rules and routes (as one of their criteria), the egress
// rules, the quotas' scopes and the byte-rate schedules. Its zero value
// (like an empty Who) selects anyone. It is immutable and safe for
// concurrent use; [Selector.Match] allocates nothing.
type Selector struct {
	set      bool                // Who named users or groups
	every    bool                // Users holds Every
	names    map[string]struct{} // Users and the members of named groups; nil = none
	provided map[string]struct{} // named provider groups; nil = none
}

// NewSelector compiles w. groups maps a group name to its members' user
// names ([acl.groups]); providerGroups names the groups identity
// providers put users in, which w may name besides groups' keys (a name
// in both selects the members of either); nil = none. A group in
// neither has no members: callers check w first (New does for a rule's,
// the configuration's validation for every table's).
func NewSelector(w Who, groups map[string][]string, providerGroups []string) Selector {
	s := Selector{set: len(w.Users) > 0 || len(w.Groups) > 0}
	add := func(u string) {
		if s.names == nil {
			s.names = make(map[string]struct{})
		}
		s.names[u] = struct{}{}
	}
	for _, u := range w.Users {
		if u == Every {
			s.every = true
			continue
		}
		add(u)
	}
	for _, g := range w.Groups {
		for _, u := range groups[g] {
			add(u)
		}
		if slices.Contains(providerGroups, g) {
			if s.provided == nil {
				s.provided = make(map[string]struct{})
			}
			s.provided[g] = struct{}{}
		}
	}
	return s
}

// Match reports whether s selects user, whom an identity provider put in
// groups (nil = none): s is empty; or user is not "" and s names every
// user, names user (directly or as a member of a named group), or names
// one of groups as a provider group. A caller that also selects by the
// name without its session key asks again with that name.
func (s *Selector) Match(user string, groups []string) bool {
	if !s.set {
		return true
	}
	if user == "" {
		return false
	}
	if s.every {
		return true
	}
	if _, ok := s.names[user]; ok {
		return true
	}
	if s.provided != nil {
		for _, g := range groups {
			if _, ok := s.provided[g]; ok {
				return true
			}
		}
	}
	return false
}

// Empty reports whether s selects anyone, unauthenticated requests too:
// its Who named no users and no groups.
func (s *Selector) Empty() bool { return !s.set }
