package metrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ListStat is one list of hosts or clients (a rule's hosts_file,
// hosts_url, clients_file or clients_url) as the metrics report it.
type ListStat struct {
	// Name names the list: its file or its URL (without the query).
	Name string
	// Loaded reports whether the list ever loaded: until it has, rules
	// match by it as if it held nothing (allow) or everything (deny).
	Loaded bool
	// Entries is the number of entries of the list in use.
	Entries int
	// BadLines is the number of lines of the list in use that were
	// skipped as no entry.
	BadLines int
	// Checked is when the list in use was last found current: loaded,
	// or answered 304 Not Modified; zero while it never loaded.
	Checked time.Time
	// Failures is the number of loads and refreshes that failed (the
	// list in use was kept).
	Failures uint64
}

// listCollector reports the lists, read on each scrape.
type listCollector struct {
	stats atomic.Pointer[func() []ListStat]

	loaded, entries, bad, age, failures *prometheus.Desc
}

func newListCollector() *listCollector {
	name := func(n string) string { return prometheus.BuildFQName(namespace, "", n) }
	l := []string{"list"}
	return &listCollector{
		loaded: prometheus.NewDesc(name("list_loaded"),
			"1 once the list has loaded, 0 while it never has (an allow rule matches nothing by it, a deny or report rule everything), by list (its file or URL).", l, nil),
		entries: prometheus.NewDesc(name("list_entries"),
			"Entries of the list in use, by list.", l, nil),
		bad: prometheus.NewDesc(name("list_bad_lines"),
			"Lines of the list in use that were skipped as no entry, by list.", l, nil),
		age: prometheus.NewDesc(name("list_age_seconds"),
			"Seconds since the list in use was last found current (loaded, or a 304 from its URL), by list; absent while it never loaded. Past a few refresh periods its refreshes fail: see rustle_list_refresh_failures_total and the log.", l, nil),
		failures: prometheus.NewDesc(name("list_refresh_failures_total"),
			"Loads and refreshes of the list that failed (unreachable, too large, malformed, a pin mismatch), which kept the list in use, by list.", l, nil),
	}
}

func (c *listCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.loaded, c.entries, c.bad, c.age, c.failures} {
		ch <- d
	}
}

func (c *listCollector) Collect(ch chan<- prometheus.Metric) {
	fn := c.stats.Load()
	if fn == nil || *fn == nil {
		return
	}
	now := time.Now()
	for _, st := range (*fn)() {
		loaded := 0.0
		if st.Loaded {
			loaded = 1
		}
		ch <- prometheus.MustNewConstMetric(c.loaded, prometheus.GaugeValue, loaded, st.Name)
		ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(st.Failures), st.Name)
		if !st.Loaded {
			continue
		}
		ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(st.Entries), st.Name)
		ch <- prometheus.MustNewConstMetric(c.bad, prometheus.GaugeValue, float64(st.BadLines), st.Name)
		ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, now.Sub(st.Checked).Seconds(), st.Name)
	}
}

// SetListStats sets the function read on each scrape for the
// rustle_list_* series: every list the configuration in use names.
func (m *Metrics) SetListStats(fn func() []ListStat) {
	if m != nil {
		m.lists.stats.Store(&fn)
	}
}
