package auth

import (
	"encoding/base64"
	"strings"
	"testing"
)

// TestBasicPassword checks which values give a password, and that it is
// the credential's.
func TestBasicPassword(t *testing.T) {
	enc := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tt := range []struct {
		name, value, want string
		ok                bool
	}{
		{"basic", enc("alice-session-42:pw:with:colons"), "pw:with:colons", true},
		{"case and spaces", "  bAsIc  " + base64.StdEncoding.EncodeToString([]byte("a:b")) + " ", "b", true},
		{"empty password", enc("alice:"), "", true},
		{"no colon", enc("alice"), "", false},
		{"empty user", enc(":pw"), "", false},
		{"bearer", "Bearer abc.def.ghi", "", false},
		{"not base64", "Basic !!!", "", false},
		{"too long", "Basic " + strings.Repeat("A", MaxValueLen), "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := BasicPassword([]byte(tt.value))
			if ok != tt.ok || string(got) != tt.want {
				t.Errorf("BasicPassword(%q) = %q, %v; want %q, %v", tt.value, got, ok, tt.want, tt.ok)
			}
		})
	}
}
