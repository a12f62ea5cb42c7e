package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// dnsBuckets are the buckets of the DNS query latency histogram, in
// seconds.
var dnsBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// dnsVecs are the DNS series of a Metrics, made on its first DNS call.
type dnsVecs struct {
	lookups  *prometheus.CounterVec   // by result: hit, miss, hosts
	queries  *prometheus.CounterVec   // by resolver
	failures *prometheus.CounterVec   // by resolver
	strays   *prometheus.CounterVec   // by resolver
	latency  *prometheus.HistogramVec // by resolver
}

// DNSMetrics counts the lookups of one configured resolver set ([dns]):
// cache hits and misses, and per resolver the queries sent, the queries
// that failed, the stray responses ignored and their latency. Its methods do not allocate and are
// no-ops on a nil receiver.
type DNSMetrics struct {
	hit, miss, hosts prometheus.Counter
	queries          []prometheus.Counter
	failures         []prometheus.Counter
	strays           []prometheus.Counter
	latency          []prometheus.Observer
}

// DNS returns the DNS metrics of the resolvers labelled by resolvers (the
// configured URLs without credentials: a bounded set), indexed as the
// resolvers are. It returns nil on a nil Metrics. Call it once per
// configuration: it takes a lock.
func (m *Metrics) DNS(resolvers []string) *DNSMetrics {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	if m.dns == nil {
		m.dns = &dnsVecs{
			lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: namespace, Name: "dns_lookups_total",
				Help: "Host name lookups by the [dns] resolver, by result: hit (answered from the cache, negative answers included), miss (asked the resolvers), hosts (a static hosts entry).",
			}, []string{"result"}),
			queries: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: namespace, Name: "dns_queries_total",
				Help: "DNS queries sent, by resolver (its configured URL without credentials).",
			}, []string{"resolver"}),
			failures: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: namespace, Name: "dns_failures_total",
				Help: "DNS queries that got no usable answer (timeout, network error, SERVFAIL, REFUSED, malformed), by resolver; the next resolver is asked.",
			}, []string{"resolver"}),
			strays: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: namespace, Name: "dns_stray_responses_total",
				Help: "UDP datagrams received on a query's socket that were no answer to its question (another ID, not a response, another question, malformed: late answers or spoofs), by resolver; they are ignored and the answer is waited for until the timeout.",
			}, []string{"resolver"}),
			latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
				Namespace: namespace, Name: "dns_query_duration_seconds",
				Help:    "Time from sending a DNS query to its answer or failure, by resolver.",
				Buckets: dnsBuckets,
			}, []string{"resolver"}),
		}
		v := m.dns
		m.reg.MustRegister(v.lookups, v.queries, v.failures, v.strays, v.latency)
	}
	v := m.dns
	m.mu.Unlock()
	d := &DNSMetrics{
		hit:   v.lookups.WithLabelValues("hit"),
		miss:  v.lookups.WithLabelValues("miss"),
		hosts: v.lookups.WithLabelValues("hosts"),
	}
	for _, r := range resolvers {
		d.queries = append(d.queries, v.queries.WithLabelValues(r))
		d.failures = append(d.failures, v.failures.WithLabelValues(r))
		d.strays = append(d.strays, v.strays.WithLabelValues(r))
		d.latency = append(d.latency, v.latency.WithLabelValues(r))
	}
	return d
}

// CacheHit counts a lookup answered from the cache.
func (d *DNSMetrics) CacheHit() {
	if d != nil {
		d.hit.Inc()
	}
}

// CacheMiss counts a lookup that asked the resolvers (or waited for an
// identical lookup that did).
func (d *DNSMetrics) CacheMiss() {
	if d != nil {
		d.miss.Inc()
	}
}

// HostsHit counts a lookup answered by a static hosts entry.
func (d *DNSMetrics) HostsHit() {
	if d != nil {
		d.hosts.Inc()
	}
}

// Query counts one query to resolver i that took took, and a failure
// unless ok.
func (d *DNSMetrics) Query(i int, took time.Duration, ok bool) {
	if d == nil || i < 0 || i >= len(d.queries) {
		return
	}
	d.queries[i].Inc()
	d.latency[i].Observe(took.Seconds())
	if !ok {
		d.failures[i].Inc()
	}
}

// Stray counts a datagram on resolver i's query socket that was no answer
// to the question, and was ignored.
func (d *DNSMetrics) Stray(i int) {
	if d != nil && i >= 0 && i < len(d.strays) {
		d.strays[i].Inc()
	}
}
