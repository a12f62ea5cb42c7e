package metrics

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// parentVecs are the per-parent series, labelled by the parent's
// configured name (bounded by the configuration).
type parentVecs struct {
	requests *prometheus.CounterVec
	failures *prometheus.CounterVec
	up       *prometheus.GaugeVec
	dial     *prometheus.HistogramVec
}

func newParentVecs(reg *prometheus.Registry) *parentVecs {
	p := &parentVecs{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "parent_requests_total",
			Help: "Requests and tunnels sent through a parent proxy (each a connect and handshake), by parent.",
		}, []string{"parent"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "parent_connect_failures_total",
			Help: "Connects to a parent proxy that failed (unreachable, timed out, refused credentials or destination), by parent.",
		}, []string{"parent"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "parent_up",
			Help: "1 while a parent proxy is up (or on probation), 0 while its health check holds it down, by parent.",
		}, []string{"parent"}),
		dial: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "parent_dial_duration_seconds",
			Help:    "Time to connect to a parent proxy and finish its handshake, by parent and result (ok, error).",
			Buckets: dialBuckets,
		}, []string{"parent", "result"}),
	}
	reg.MustRegister(p.requests, p.failures, p.up, p.dial)
	return p
}

// ParentMetrics are the series of one parent proxy, resolved once by
// [Metrics.Parent]. Its methods are safe for concurrent use, do not
// allocate, and do nothing on a nil receiver.
type ParentMetrics struct {
	name               string // for Read
	requests, failures prometheus.Counter
	up                 prometheus.Gauge
	dialOK, dialErr    prometheus.Observer
}

// Parent returns the series of the parent proxy named name, a configured
// name (labels stay bounded), with its health gauge set to up. It returns
// nil on a nil Metrics.
func (m *Metrics) Parent(name string) *ParentMetrics {
	if m == nil {
		return nil
	}
	name = strings.Clone(name)
	v := m.parents
	p := &ParentMetrics{
		name:     name,
		requests: v.requests.WithLabelValues(name),
		failures: v.failures.WithLabelValues(name),
		up:       v.up.WithLabelValues(name),
		dialOK:   v.dial.WithLabelValues(name, "ok"),
		dialErr:  v.dial.WithLabelValues(name, "error"),
	}
	p.up.Set(1)
	m.mu.Lock()
	m.parentsByName[name] = p
	m.mu.Unlock()
	return p
}

// Dialed counts a request or tunnel sent through the parent, observes how
// long its connect and handshake took, and counts a failure when !ok.
func (p *ParentMetrics) Dialed(d time.Duration, ok bool) {
	if p == nil {
		return
	}
	p.requests.Inc()
	if ok {
		p.dialOK.Observe(d.Seconds())
		return
	}
	p.failures.Inc()
	p.dialErr.Observe(d.Seconds())
}

// Health sets the parent's health gauge.
func (p *ParentMetrics) Health(up bool) {
	if p == nil {
		return
	}
	if up {
		p.up.Set(1)
	} else {
		p.up.Set(0)
	}
}

// ForgetParent deletes the series of the parent proxy named name, which
// a reload removed from the configuration, so that only configured
// parents are exported. A ParentMetrics still held for it (by a
// connection of the previous configuration) counts into series no longer
// exported. It does nothing on a nil Metrics.
func (m *Metrics) ForgetParent(name string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	delete(m.parentsByName, name)
	m.mu.Unlock()
	v := m.parents
	v.requests.DeleteLabelValues(name)
	v.failures.DeleteLabelValues(name)
	v.up.DeleteLabelValues(name)
	v.dial.DeletePartialMatch(prometheus.Labels{"parent": name})
}
