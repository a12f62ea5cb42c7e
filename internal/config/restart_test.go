package config

import (
	"testing"
	"time"
)

func TestRestartChange(t *testing.T) {
	for _, tt := range []struct {
		name   string
		modify func(c *Config)
		want   string
	}{
		{"nothing", func(c *Config) {}, ""},
		{"log level", func(c *Config) { c.Log.Level = "debug" }, ""},
		{"limits", func(c *Config) { c.Limits.MaxConnectionsPerUser = 3 }, ""},
		{"workers", func(c *Config) { c.Workers = c.WorkerCount() + 1 }, "workers changed from"},
		{"upstream", func(c *Config) { c.Upstream.MaxIdle++ }, "[upstream] changed"},
		{"idle tunnel", func(c *Config) { c.Timeouts.IdleTunnel.Duration += time.Minute }, "timeouts.idle_tunnel changed"},
		{"admin", func(c *Config) { c.Admin = "127.0.0.1:9" }, "admin changed"},
		{"admin_access", func(c *Config) { c.AdminAccess.Hosts = []string{"rustle-admin.example"} }, "[admin_access] changed"},
		{"access log", func(c *Config) { c.AccessLog.Enabled = true }, "[access_log] changed"},
		{"metrics", func(c *Config) { c.Metrics.PerUser = true }, "[metrics] changed"},
		{"log format", func(c *Config) { c.Log.Format = "json" }, "log.format changed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cur, next := Default(), Default()
			tt.modify(next)
			got := RestartChange(cur, next)
			if tt.want == "" && got != "" || tt.want != "" && (len(got) < len(tt.want) || got[:len(tt.want)] != tt.want) {
				t.Errorf("RestartChange = %q, want %q", got, tt.want)
			}
		})
	}
}
