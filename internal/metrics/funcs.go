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
	certs   atomic.Pointer[func() CertStats]

	poolHits, poolMisses, poolIdle                  *prometheus.Desc
	tunnelsOpen, dropDesc                           *prometheus.Desc
	certsCached, certHits, certMints, certEvictions *prometheus.Desc
}

// CertStats are the counts of the interception's leaf certificate cache
// (see intercept.Certs.Stats): the leaves cached, and since the cache
// was made (at start, and when a reload changes the CA), the handshakes
// served from it, the leaves minted and those the bound pushed out.
type CertStats struct {
	Cached               int
	Hits, Mints, Evicted uint64
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
		certsCached: prometheus.NewDesc(name("intercept_certs_cached"),
			"Leaf certificates of intercepted tunnels cached now.", nil, nil),
		certHits: prometheus.NewDesc(name("intercept_cert_hits_total"),
			"Intercepted tunnels whose leaf certificate came from the cache (since the CA was loaded).", nil, nil),
		certMints: prometheus.NewDesc(name("intercept_cert_mints_total"),
			"Leaf certificates minted for intercepted tunnels: names not cached, or renewed (since the CA was loaded).", nil, nil),
		certEvictions: prometheus.NewDesc(name("intercept_cert_evictions_total"),
			"Leaf certificates pushed out of the cache by intercept.cache_size (since the CA was loaded).", nil, nil),
	}
}

// Describe sends every series the collector may report.
func (c *funcCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.poolHits, c.poolMisses, c.poolIdle, c.tunnelsOpen, c.dropDesc,
		c.certsCached, c.certHits, c.certMints, c.certEvictions} {
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
	if fn := c.certs.Load(); fn != nil && *fn != nil {
		s := (*fn)()
		ch <- prometheus.MustNewConstMetric(c.certsCached, prometheus.GaugeValue, float64(s.Cached))
		ch <- prometheus.MustNewConstMetric(c.certHits, prometheus.CounterValue, float64(s.Hits))
		ch <- prometheus.MustNewConstMetric(c.certMints, prometheus.CounterValue, float64(s.Mints))
		ch <- prometheus.MustNewConstMetric(c.certEvictions, prometheus.CounterValue, float64(s.Evicted))
	}
}
