package auth

import "testing"

func TestSessionKey(t *testing.T) {
	for _, tc := range []struct{ user, key, base string }{
		{"alice-session-42", "42", "alice"},
		{"alice", "", "alice"},
		{"alice-session-", "", "alice-session-"},
		{"-session-42", "", "-session-42"},
		{"a-session-b-session-c", "c", "a-session-b"},
		{"", "", ""},
	} {
		if got := SessionKey(tc.user); got != tc.key {
			t.Errorf("SessionKey(%q) = %q, want %q", tc.user, got, tc.key)
		}
		if got := SessionUser(tc.user); got != tc.base {
			t.Errorf("SessionUser(%q) = %q, want %q", tc.user, got, tc.base)
		}
	}
}
