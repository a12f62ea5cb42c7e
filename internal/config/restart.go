package config

import (
	"fmt"
	"slices"
)

// RestartChange says which setting next changes from cur that only a
// restart applies, as "workers changed from 2 to 4" or "[upstream]
// changed"; "" when a reload can apply every change. It is the one list
// of such settings: workers, [upstream], timeouts.idle_tunnel, admin,
// [admin_access], [access_log], [metrics], log.format, [quota] and [cluster].
func RestartChange(cur, next *Config) string {
	switch {
	case next.WorkerCount() != cur.WorkerCount():
		return fmt.Sprintf("workers changed from %d to %d", cur.WorkerCount(), next.WorkerCount())
	case next.Upstream != cur.Upstream:
		return "[upstream] changed"
	case next.Timeouts.IdleTunnel != cur.Timeouts.IdleTunnel:
		return fmt.Sprintf("timeouts.idle_tunnel changed from %v to %v",
			cur.Timeouts.IdleTunnel.Duration, next.Timeouts.IdleTunnel.Duration)
	case next.Admin != cur.Admin:
		return "admin changed"
	case !adminAccessEqual(cur.AdminAccess, next.AdminAccess):
		return "[admin_access] changed"
	case next.AccessLog != cur.AccessLog:
		return "[access_log] changed"
	case next.Metrics != cur.Metrics:
		return "[metrics] changed"
	case next.Log.Format != cur.Log.Format:
		return "log.format changed"
	case next.Egress.Mark != cur.Egress.Mark:
		return "egress.mark changed" // the resolver and the pool keep sockets made with the old one
	case quotaChange(cur, next) != "":
		return quotaChange(cur, next)
	}
	return ""
}

// adminAccessEqual reports whether a and b say the same.
func adminAccessEqual(a, b AdminAccess) bool {
	return a.TokenFile == b.TokenFile && a.Htpasswd == b.Htpasswd &&
		a.HealthAndMetricsOnly == b.HealthAndMetricsOnly && slices.Equal(a.Hosts, b.Hosts)
}
