package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// authzBuckets are the buckets of the decision service's call latency
// histogram, in seconds.
var authzBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5}

// AuthzError is why the decision service could not decide a request.
type AuthzError uint8

// The errors of a decision, the error label of
// rustle_authz_errors_total.
const (
	// AuthzTimeout: the service did not answer within authz.timeout.
	AuthzTimeout AuthzError = iota
	// AuthzBusy: every call of authz.max_in_flight stayed busy for
	// authz.timeout.
	AuthzBusy
	// AuthzUnreachable: the connection to the service failed.
	AuthzUnreachable
	// AuthzStatus: the service answered a status other than 200.
	AuthzStatus
	// AuthzMalformed: the answer was no decision (not JSON, no result,
	// a result neither a boolean nor an object with a boolean allow, a
	// bad ttl or header, too large).
	AuthzMalformed
	authzErrors // the number of errors
)

var authzErrorNames = [authzErrors]string{
	AuthzTimeout:     "timeout",
	AuthzBusy:        "busy",
	AuthzUnreachable: "unreachable",
	AuthzStatus:      "status",
	AuthzMalformed:   "malformed",
}

// String returns e's label value.
func (e AuthzError) String() string {
	if e < authzErrors {
		return authzErrorNames[e]
	}
	return "unknown"
}

// authzVecs are the decision service's series, made on the first
// [Metrics.Authz] call.
type authzVecs struct {
	decided  *prometheus.CounterVec // by result: allow, deny, error
	calls    *prometheus.CounterVec // by result: allow, deny, error
	lookups  *prometheus.CounterVec // by result: hit, miss
	errors   *prometheus.CounterVec // by error
	latency  prometheus.Histogram
	inFlight prometheus.Gauge
}

// AuthzMetrics counts the decisions of the external decision service
// ([authz]): the requests it decided, the calls made to it and what
// they answered, the cache's
// hits and misses, the errors by kind, the calls' latency and the calls
// in flight. Its methods do not allocate and are no-ops on a nil
// receiver.
type AuthzMetrics struct {
	decided             [3]prometheus.Counter // allow, deny, error
	allow, deny, failed prometheus.Counter
	hit, miss           prometheus.Counter
	errors              [authzErrors]prometheus.Counter
	latency             prometheus.Observer
	inFlight            prometheus.Gauge
}

// Authz returns the decision service's metrics, the same series for
// every configuration of the process. It returns nil on a nil Metrics.
// Call it once per configuration: it takes a lock.
func (m *Metrics) Authz() *AuthzMetrics {
	if m == nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.authz == nil {
		v := &authzVecs{
			decided: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: namespace, Name: "authz_decisions_total",
				Help: "Requests the decision service ([authz]) was asked about, from its cache or a call, by result: allow, deny, error (it could not decide; authz.on_error decided).",
			}, []string{"result"}),
			calls: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: namespace, Name: "authz_calls_total",
				Help: "Calls to the decision service ([authz]), by result: allow, deny, error (see rustle_authz_errors_total).",
			}, []string{"result"}),
			lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: namespace, Name: "authz_cache_lookups_total",
				Help: "Decisions looked up in the decision cache, by result: hit (no call made), miss (a call made, or one in flight for the same document waited for).",
			}, []string{"result"}),
			errors: prometheus.NewCounterVec(prometheus.CounterOpts{
				Namespace: namespace, Name: "authz_errors_total",
				Help: "Decisions the decision service could not make, by error: timeout, busy (every call of max_in_flight busy for the timeout), unreachable, status (not 200), malformed (no decision in the answer); authz.on_error decides those requests.",
			}, []string{"error"}),
			latency: prometheus.NewHistogram(prometheus.HistogramOpts{
				Namespace: namespace, Name: "authz_call_duration_seconds",
				Help:    "Time from sending a document to the decision service to its whole answer or failure.",
				Buckets: authzBuckets,
			}),
			inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
				Namespace: namespace, Name: "authz_calls_in_flight",
				Help: "Calls to the decision service in progress now (at most authz.max_in_flight).",
			}),
		}
		m.reg.MustRegister(v.decided, v.calls, v.lookups, v.errors, v.latency, v.inFlight)
		m.authz = v
	}
	v := m.authz
	a := &AuthzMetrics{
		decided: [3]prometheus.Counter{v.decided.WithLabelValues("allow"), v.decided.WithLabelValues("deny"), v.decided.WithLabelValues("error")},
		allow:   v.calls.WithLabelValues("allow"), deny: v.calls.WithLabelValues("deny"), failed: v.calls.WithLabelValues("error"),
		hit: v.lookups.WithLabelValues("hit"), miss: v.lookups.WithLabelValues("miss"),
		latency: v.latency, inFlight: v.inFlight,
	}
	for e := range authzErrors {
		a.errors[e] = v.errors.WithLabelValues(e.String())
	}
	return a
}

// Decided counts a request decided: allowed, denied, or not decided
// (failed) by the service.
func (a *AuthzMetrics) Decided(allow, failed bool) {
	switch {
	case a == nil:
	case failed:
		a.decided[2].Inc()
	case allow:
		a.decided[0].Inc()
	default:
		a.decided[1].Inc()
	}
}

// CacheHit counts a decision found in the cache.
func (a *AuthzMetrics) CacheHit() {
	if a != nil {
		a.hit.Inc()
	}
}

// CacheMiss counts a decision not in the cache.
func (a *AuthzMetrics) CacheMiss() {
	if a != nil {
		a.miss.Inc()
	}
}

// Started counts a call to the service in flight until Called.
func (a *AuthzMetrics) Started() {
	if a != nil {
		a.inFlight.Inc()
	}
}

// Called counts a call that took took and answered allow or deny (ok),
// or failed.
func (a *AuthzMetrics) Called(took time.Duration, ok, allow bool) {
	if a == nil {
		return
	}
	a.inFlight.Dec()
	a.latency.Observe(took.Seconds())
	switch {
	case !ok:
		a.failed.Inc()
	case allow:
		a.allow.Inc()
	default:
		a.deny.Inc()
	}
}

// Error counts a decision the service could not make.
func (a *AuthzMetrics) Error(e AuthzError) {
	if a != nil && e < authzErrors {
		a.errors[e].Inc()
	}
}
