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
