package cluster

import (
	"strings"
	"testing"
	"time"
)

// TestNewRefusesMissingSettings checks that New refuses a sync interval
// or a timeout left zero, which config.SetDefaults fills, instead of
// choosing values of its own (it used to default them: 1s, 500ms).
func TestNewRefusesMissingSettings(t *testing.T) {
	for _, tt := range []struct {
		name     string
		interval time.Duration
		timeout  time.Duration
		want     string
	}{
		{"both", time.Second, 500 * time.Millisecond, ""},
		{"no interval", 0, 500 * time.Millisecond, "must be positive"},
		{"no timeout", time.Second, 0, "must be positive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Config{URL: "redis://127.0.0.1:1", SyncInterval: tt.interval, Timeout: tt.timeout, Instance: "i"})
			if c != nil { // never started: nothing to sync or withdraw
				c.cancel()
				c.client.Close()
			}
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("New = %v; want an error with %q", err, tt.want)
			}
		})
	}
}
