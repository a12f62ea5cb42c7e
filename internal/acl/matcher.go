package acl

import (
	"errors"
	"fmt"
)

// Matcher is a compiled list of criteria sets, matched in order as the
// rules of a [Policy] are, without a verdict: it tells which entry is the
// first to match a request. Other tables that choose by the same
// criteria as the access rules (the route table) compile one, so that a
// criterion means the same everywhere. It is immutable and safe for
// concurrent use; [Matcher.Match] allocates nothing.
type Matcher struct {
	entries []rule
}

// NewMatcher compiles criteria: each entry's Clients, Users, Groups,
// Hosts, Ports, Methods and Protocols, with the syntax and meaning of a
// [Rule]'s. Action and AllowPrivate must be empty: a matcher decides
// nothing. Name, when set, names the entry in errors; "" means
// "[N]", N its index from 0. The error names the entry and the criterion.
//
// providerGroups names the groups identity providers put users in, which
// criteria may name beside groups' keys (see [Config.ProviderGroups]);
// nil = none.
func NewMatcher(criteria []Rule, groups map[string][]string, providerGroups []string) (*Matcher, error) {
	m := &Matcher{entries: make([]rule, 0, len(criteria))}
	var errs []error
	for i, rc := range criteria {
		name := rc.Name
		if name == "" {
			name = fmt.Sprintf("[%d]", i)
		}
		if rc.Action != "" || len(rc.AllowPrivate) > 0 {
			errs = append(errs, fmt.Errorf("acl: matcher %s: action and allow_private are not criteria", name))
			continue
		}
		rc.Action = Allow
		r, err := compile(rc, groups, providerGroups)
		if err != nil {
			errs = append(errs, fmt.Errorf("acl: matcher %s: %w", name, err))
			continue
		}
		r.name = name
		m.entries = append(m.entries, r)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return m, nil
}

// Len returns the number of entries.
func (m *Matcher) Len() int { return len(m.entries) }

// Match returns the index of the first entry that matches r, or -1 when
// none does. An entry's IP and CIDR hosts match an IP literal and r.Addr
// only: a host name is not resolved for it, so an entry that could match
// only by the address a name resolves to does not match that name (as
// [Policy.Check] decides).
func (m *Matcher) Match(r Request) int {
	var buf [maxName]byte
	host, addr := normalizeHost(&r, &buf)
	for i := range m.entries {
		if m.entries[i].match(&r, host, addr) == matchYes {
			return i
		}
	}
	return -1
}

// AppendMatches appends to dst the index of every entry that matches r,
// in order, and returns the result: for a table whose matching entries
// all apply (the header rules), where Match gives the first only. It
// matches as Match does and allocates nothing beyond dst's growth.
func (m *Matcher) AppendMatches(dst []int, r Request) []int {
	var buf [maxName]byte
	host, addr := normalizeHost(&r, &buf)
	for i := range m.entries {
		if m.entries[i].match(&r, host, addr) == matchYes {
			dst = append(dst, i)
		}
	}
	return dst
}
