package http1

import "testing"

func TestValidField(t *testing.T) {
	for _, tt := range []struct {
		name  string
		value string
		ok    bool
	}{
		{"X-Tenant", "a b\tc", true},
		{"x_tenant!#$%&'*+-.^`|~", "", true},
		{"", "v", false},
		{"X Tenant", "v", false},
		{"X-Tenant:", "v", false},
		{"X-Ténant", "v", false},
		{"X-Tenant", "a\r\nInjected: 1", false},
		{"X-Tenant", "a\x00", false},
		{"X-Tenant", "a\x7f", false},
		{"X-Tenant", " a", false},
		{"X-Tenant", "a\t", false},
	} {
		t.Run(tt.name+"="+tt.value, func(t *testing.T) {
			if got := ValidFieldName(tt.name) && ValidFieldValue(tt.value); got != tt.ok {
				t.Errorf("ValidFieldName(%q) && ValidFieldValue(%q) = %v, want %v", tt.name, tt.value, got, tt.ok)
			}
		})
	}
}
