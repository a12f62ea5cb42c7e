package metrics

import (
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// QuotaStat is one quota counter as the metrics report it.
type QuotaStat struct {
	// Rule names the quota rule.
	Rule string
	// Scope is what the counter counts: a user's name, or "group:NAME".
	Scope string
	// Used and limit of bytes and requests in the current period; a
	// limit of 0 is none.
	BytesUsed, BytesLimit       int64
	RequestsUsed, RequestsLimit int64
}

// quotaCollector reports the quota counters and the cluster's link to
// Redis, read on each scrape.
type quotaCollector struct {
	m     *Metrics
	stats atomic.Pointer[func() []QuotaStat]
	up    atomic.Pointer[func() bool]

	used, limit, redisUp *prometheus.Desc
}

func newQuotaCollector(m *Metrics) *quotaCollector {
	name := func(n string) string { return prometheus.BuildFQName(namespace, "", n) }
	labels := []string{"rule", "scope", "kind"}
	return &quotaCollector{
		m: m,
		used: prometheus.NewDesc(name("quota_used"),
			"Bytes or requests (kind) used in the current period, by quota rule and scope: a user (for the users with per-user series, see metrics.max_users) or group:NAME.", labels, nil),
		limit: prometheus.NewDesc(name("quota_limit"),
			"Bytes or requests (kind) allowed per period, by quota rule and scope, as rustle_quota_used; absent for a kind the rule does not limit.", labels, nil),
		redisUp: prometheus.NewDesc(name("cluster_redis_up"),
			"1 when the last sync with the cluster's Redis succeeded, 0 while limits count locally.", nil, nil),
	}
}

func (c *quotaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.used
	ch <- c.limit
	ch <- c.redisUp
}

func (c *quotaCollector) Collect(ch chan<- prometheus.Metric) {
	if fn := c.up.Load(); fn != nil && *fn != nil {
		v := 0.0
		if (*fn)() {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(c.redisUp, prometheus.GaugeValue, v)
	}
	fn := c.stats.Load()
	if fn == nil || *fn == nil {
		return
	}
	for _, st := range (*fn)() {
		if !strings.HasPrefix(st.Scope, "group:") && !c.m.hasUserSeries(st.Scope) {
			continue // the bound on per-user series holds here too
		}
		for _, k := range [...]struct {
			kind        string
			used, limit int64
		}{{"bytes", st.BytesUsed, st.BytesLimit}, {"requests", st.RequestsUsed, st.RequestsLimit}} {
			ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(k.used), st.Rule, st.Scope, k.kind)
			if k.limit > 0 {
				ch <- prometheus.MustNewConstMetric(c.limit, prometheus.GaugeValue, float64(k.limit), st.Rule, st.Scope, k.kind)
			}
		}
	}
}

// hasUserSeries reports whether user has per-user series of its own.
func (m *Metrics) hasUserSeries(user string) bool {
	if m.users == nil {
		return false
	}
	m.usersMu.RLock()
	defer m.usersMu.RUnlock()
	_, ok := m.users[user]
	return ok
}

// SetQuotaStats sets the function read on each scrape for
// rustle_quota_used and rustle_quota_limit. A user's counters are
// reported only for the users with per-user series of their own
// (metrics.per_user, within metrics.max_users); a group's always.
func (m *Metrics) SetQuotaStats(fn func() []QuotaStat) {
	if m != nil {
		m.quota.stats.Store(&fn)
	}
}

// SetClusterUp sets the function read on each scrape for
// rustle_cluster_redis_up; until it is set the series is absent.
func (m *Metrics) SetClusterUp(fn func() bool) {
	if m != nil {
		m.quota.up.Store(&fn)
	}
}
