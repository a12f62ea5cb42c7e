package acl_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
)

// FuzzHostMatch compiles a one-rule policy from a fuzzed hosts entry and
// decides a fuzzed host against it, checking the result against a second,
// naive reading of the entry syntax: New never panics, an entry it accepts
// matches exactly the names refMatch says, and IP entries leave names
// pending.
func FuzzHostMatch(f *testing.F) {
	f.Fuzz(func(t *testing.T, entry, host string) {
		p, err := acl.New(acl.Config{Rules: []acl.Rule{{Name: "r", Action: acl.Allow, Hosts: []string{entry}}}})
		if err != nil {
			if acl.ParseHost(entry) == nil {
				t.Fatalf("ParseHost accepts %q but New fails: %v", entry, err)
			}
			return
		}
		d := p.Decide(acl.Request{Host: host, Port: 1})
		_, ipErr := acl.ParsePrefix(entry)
		// A host is an address in every spelling the dialer reads.
		hostIP, isIP, _ := dialer.ParseHost(host)
		var hostErr error
		if !isIP {
			hostErr = errors.New("a name")
		}
		switch {
		case ipErr == nil && hostErr == nil:
			want := netip.MustParsePrefix(mustPrefix(t, entry)).Contains(hostIP.WithZone("").Unmap())
			if d.Allow != want || d.Pending() {
				t.Fatalf("entry %q host %q: allow %v pending %v, want %v", entry, host, d.Allow, d.Pending(), want)
			}
		case ipErr == nil:
			// A name left to resolve: not empty once its one trailing
			// dot is dropped (".", "a.." are no names), at most 256 bytes
			// without that dot (maxName).
			if name := strings.TrimSuffix(host, "."); name != "" && !strings.HasSuffix(name, ".") && len(name) <= 256 && !d.Pending() {
				t.Fatalf("entry %q host %q: not pending", entry, host)
			}
		case hostErr != nil:
			if want := refMatch(entry, host); d.Allow != want {
				t.Fatalf("entry %q host %q: allow %v, want %v", entry, host, d.Allow, want)
			}
		}
	})
}

func mustPrefix(t *testing.T, s string) string {
	p, err := acl.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p.String()
}

// refMatch is the naive reading of a name entry. Names compare ASCII
// case-insensitively, byte for byte: strings.ToLower would fold non-ASCII
// letters (the Kelvin sign to "k") and widen invalid bytes to U+FFFD, which
// host names on the wire never get.
func refMatch(entry, host string) bool {
	e := strings.TrimSuffix(asciiLower(entry), ".")
	h := strings.TrimSuffix(asciiLower(host), ".")
	if len(h) > 256 {
		return false
	}
	switch {
	case strings.HasPrefix(e, "*."):
		return strings.HasSuffix(h, e[1:])
	case strings.HasPrefix(e, "."):
		return h == e[1:] || strings.HasSuffix(h, e)
	}
	return h == e
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// FuzzListMatch checks that a hosts entry in a list matches what it
// matches as a rule's hosts entry, and that ParseList never panics:
// every entry ParseHost takes, alone on a line of a list, is one entry
// of the list, and a rule with the list decides a fuzzed host and a
// fuzzed address as the rule with the entry does.
func FuzzListMatch(f *testing.F) {
	for _, seed := range []struct{ entry, host string }{
		{"example.com", "EXAMPLE.com."}, {"*.example.com", "a.example.com"}, {".example.com", "example.com"},
		{"10.0.0.0/8", "10.1.2.3"}, {"127.1", "127.0.0.1"}, {"::ffff:1.2.3.4", "1.2.3.4"}, {"0x7f000001", "a.example"},
	} {
		f.Add(seed.entry, seed.host, []byte{10, 1, 2, 3})
	}
	f.Fuzz(func(t *testing.T, entry, host string, ip []byte) {
		s, st, err := acl.ParseList(strings.NewReader(entry), acl.HostList)
		if err != nil {
			t.Fatalf("ParseList: %v", err)
		}
		if acl.ParseHost(entry) != nil || strings.ContainsAny(entry, "#\r\n\t\v\f ") || strings.HasPrefix(entry, "!") || strings.HasPrefix(entry, "[") {
			return // not an entry, or one that a list reads otherwise (a comment, a header)
		}
		if st.Entries != 1 || st.Bad != 0 {
			t.Fatalf("entry %q: %+v", entry, st)
		}
		l := acl.NewList("fuzz", acl.HostList)
		l.Store(s)
		inline, err := acl.New(acl.Config{Rules: []acl.Rule{{Name: "r", Action: acl.Allow, Hosts: []string{entry}}}})
		if err != nil {
			t.Fatal(err)
		}
		listed, err := acl.New(acl.Config{Rules: []acl.Rule{{Name: "r", Action: acl.Allow, HostLists: []*acl.List{l}}}})
		if err != nil {
			t.Fatal(err)
		}
		r := acl.Request{Host: host, Port: 1}
		a, b := inline.Decide(r), listed.Decide(r)
		if a.Allow != b.Allow || a.Rule != b.Rule || a.Pending() != b.Pending() {
			t.Fatalf("entry %q host %q: inline %v %q %v, list %v %q %v", entry, host, a.Allow, a.Rule, a.Pending(), b.Allow, b.Rule, b.Pending())
		}
		if addr, ok := netip.AddrFromSlice(ip); ok {
			okA, _ := a.Permit(addr)
			okB, _ := b.Permit(addr)
			if okA != okB {
				t.Fatalf("entry %q host %q addr %s: inline %v, list %v", entry, host, addr, okA, okB)
			}
		}
	})
}
