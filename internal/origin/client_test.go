package origin_test

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/origin"
)

// TestNewValidates checks that New fills no defaults: a Config with a
// setting that cannot be zero, or out of range, is an error naming the
// field.
func TestNewValidates(t *testing.T) {
	t.Parallel()
	resolved := origin.Config{Forwarded: origin.ForwardedNone, MaxHeaderBytes: 64 << 10}
	tests := []struct {
		name string
		edit func(*origin.Config)
		want string // "" = no error
	}{
		{"resolved", func(*origin.Config) {}, ""},
		{"forwarded rfc", func(c *origin.Config) { c.Forwarded = origin.ForwardedRFC }, ""},
		{"forwarded xff", func(c *origin.Config) { c.Forwarded = origin.ForwardedXFF }, ""},
		{"zero timeouts", func(c *origin.Config) { c.ResponseHeaderTimeout, c.WriteTimeout = 0, 0 }, ""},
		{"max header bytes zero", func(c *origin.Config) { c.MaxHeaderBytes = 0 },
			"origin: MaxHeaderBytes must be positive, got 0"},
		{"max header bytes negative", func(c *origin.Config) { c.MaxHeaderBytes = -1 },
			"origin: MaxHeaderBytes must be positive, got -1"},
		{"forwarded empty", func(c *origin.Config) { c.Forwarded = "" },
			`origin: Forwarded must be "none", "rfc7239" or "x-forwarded-for", got ""`},
		{"forwarded unknown", func(c *origin.Config) { c.Forwarded = "X-Forwarded-For" },
			`origin: Forwarded must be "none", "rfc7239" or "x-forwarded-for", got "X-Forwarded-For"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := resolved
			tt.edit(&cfg)
			c, err := origin.New(cfg)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("New = %v, want no error", err)
			case tt.want == "" && c == nil:
				t.Fatal("New returned no Client and no error")
			case tt.want == "" && *c.Config() != cfg:
				t.Fatalf("Config() = %+v, want %+v", *c.Config(), cfg)
			case tt.want != "" && (err == nil || err.Error() != tt.want):
				t.Fatalf("New error = %v, want %q", err, tt.want)
			case tt.want != "" && c != nil:
				t.Fatal("New returned a Client with its error")
			}
		})
	}
}
