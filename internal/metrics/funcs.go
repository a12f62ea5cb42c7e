package metrics

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// funcCollector reports values read on each scrape from functions set
// after New; a series whose function is unset is left out.
type funcCollector struct {
	pool    atomic.Pointer[func() PoolStats]
	tunnels atomic.Pointer[func() int]
	dropped atomic.Pointer[func() uint64]

	poolHits, poolMisses, poolIdle *prometheus.Desc
	tunnelsOpen, dropDesc          *prometheus.Desc
}

func newFuncCollector() *funcCollector {
	name := func(n string) string { return prometheus.BuildFQName(namespace, "", n) }
	return &funcCollector{
		poolHits: prometheus.NewDesc(name("upstream_pool_hits_total"),
			"Requests that reused an idle pooled upstream connection.", nil, nil),
		poolMisses: prometheus.NewDesc(name("upstream_pool_misses_total"),
			"Requests that found no idle pooled upstream connection and dialed.", nil, nil),
		poolIdle: prometheus.NewDesc(name("upstream_pool_idle_connections"),
			"Idle keep-alive upstream connections pooled now.", nil, nil),
		tunnelsOpen: prometheus.NewDesc(name("tunnels_open"),
			"Tunnels open now in the tunnel engines.", nil, nil),
		dropDesc: prometheus.NewDesc(name("access_log_dropped_total"),
			"Access log lines dropped because the writer fell behind or a write failed.", nil, nil),
	}
}

// Describe sends every series the collector may report.
func (c *funcCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.poolHits, c.poolMisses, c.poolIdle, c.tunnelsOpen, c.dropDesc} {
		ch <- d
	}
}

// Collect calls the functions that are set and sends their values.
func (c *funcCollector) Collect(ch chan<- prometheus.Metric) {
	if fn := c.pool.Load(); fn != nil && *fn != nil {
		s := (*fn)()
		ch <- prometheus.MustNewConstMetric(c.poolHits, prometheus.CounterValue, float64(s.Hits))
		ch <- prometheus.MustNewConstMetric(c.poolMisses, prometheus.CounterValue, float64(s.Misses))
		ch <- prometheus.MustNewConstMetric(c.poolIdle, prometheus.GaugeValue, float64(s.Idle))
	}
	if fn := c.tunnels.Load(); fn != nil && *fn != nil {
		ch <- prometheus.MustNewConstMetric(c.tunnelsOpen, prometheus.GaugeValue, float64((*fn)()))
	}
	if fn := c.dropped.Load(); fn != nil && *fn != nil {
		ch <- prometheus.MustNewConstMetric(c.dropDesc, prometheus.CounterValue, float64((*fn)()))
	}
}
