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
// Hosts, SNIHosts, Ports, Methods and Protocols, with the syntax and
// meaning of a [Rule]'s. Action, AllowPrivate and SNI must be empty: a matcher decides
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
		if rc.Action != "" || len(rc.AllowPrivate) > 0 || rc.SNI != "" {
			errs = append(errs, fmt.Errorf("acl: matcher %s: action, allow_private and sni are not criteria", name))
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
//
// An entry with sni_hosts matches the server_name of the tunnel's
// ClientHello once it is read (r.HelloRead), and nothing before; see
// MatchHello for a request whose hello is still to be read.
func (m *Matcher) Match(r Request) int {
	i, _ := m.MatchHello(r)
	return i
}

// MatchHello is Match for a tunnel whose ClientHello may still be read:
// pending reports that the first entry that could match r has sni_hosts
// and r's hello is not read yet, so that the entry r matches is known
// only once it is (i is then what Match says, as if the hello named no
// server).
func (m *Matcher) MatchHello(r Request) (i int, pending bool) {
	var buf [maxName]byte
	host, addr := normalizeHost(&r, &buf)
	for i := range m.entries {
		switch m.entries[i].match(&r, host, addr) {
		case matchYes:
			return i, pending
		case matchSNI:
			pending = true
		}
	}
	return -1, pending
}

// SNINames is a compiled sni_hosts criterion for a table that matches
// no other criterion of a rule (the egress rules): server names in the
// syntax of [Rule.SNIHosts]. It is immutable and safe for concurrent use.
type SNINames struct{ h hostSet }

// NewSNINames compiles entries; nil for none. The error names the entry.
func NewSNINames(entries []string) (*SNINames, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	n := &SNINames{}
	var errs []error
	for _, e := range entries {
		if err := n.h.addName(e); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return n, nil
}

// Match reports whether name, a ClientHello's server_name, matches an
// entry, without regard to ASCII case; "" matches none. A nil SNINames
// matches every name, and "".
func (n *SNINames) Match(name string) bool {
	if n == nil {
		return true
	}
	return n.h.matchSNI(name)
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
