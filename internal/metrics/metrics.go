// Package metrics holds rustle's Prometheus metrics and serves them in
// the Prometheus text format.
//
// The exposition is done by github.com/prometheus/client_golang, the
// reference implementation. What the data path calls is kept cheap:
// [Metrics.Listener] and [Metrics.User] resolve every labelled series
// once (per listener, per connection's user), and the methods of the
// returned [ListenerMetrics] and [UserMetrics] are atomic adds and
// histogram observations that do not allocate. Every method is a no-op on
// a nil receiver, so code may hold a nil *Metrics, *ListenerMetrics or
// *UserMetrics when metrics are off and call them without checks.
//
// Values rustle already counts elsewhere (the upstream pool's hits and
// misses, open tunnels, dropped access log lines) are read when scraped,
// through functions given to [Metrics.SetPoolStats],
// [Metrics.SetTunnelsOpen] and [Metrics.SetAccessLogDropped].
package metrics

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// namespace prefixes every rustle metric name.
const namespace = "rustle"

// OtherUser is the user label of the series that count every user past
// [Config.MaxUsers]. A real user of that name shares those series.
const OtherUser = "_other"

// DefaultMaxUsers is the bound on per-user series used when
// [Config.MaxUsers] is 0.
const DefaultMaxUsers = 100

// Config configures [New].
type Config struct {
	// PerUser adds series labelled by user name (requests and bytes per
	// user); false means none, and [Metrics.User] returns nil.
	PerUser bool
	// MaxUsers bounds the users that get series of their own; the
	// others are counted under [OtherUser]. 0 means DefaultMaxUsers.
	MaxUsers int
	// Version is reported as the version label of rustle_build_info; ""
	// means "dev".
	Version string
	// Logger receives errors met while serving /metrics; nil discards
	// them.
	Logger *slog.Logger
}

// Buckets of the latency histograms, in seconds.
var (
	dialBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	ttfbBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}
)

// Status classes of rustle_requests_total's code label, indexed by
// status/100; index 0 is every status outside 100..599.
var statusClasses = [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

// Metrics is rustle's set of metrics, with its own registry. Create it
// with [New].
type Metrics struct {
	reg     *prometheus.Registry
	handler http.Handler

	accepted    *prometheus.CounterVec
	open        *prometheus.GaugeVec
	requests    *prometheus.CounterVec
	bytes       *prometheus.CounterVec
	tunnels     *prometheus.CounterVec
	datagrams   *prometheus.CounterVec
	authFails   *prometheus.CounterVec
	authAsks    *prometheus.CounterVec
	aclDenies   *prometheus.CounterVec
	wouldDeny   *prometheus.CounterVec
	sniChecks   *prometheus.CounterVec
	sniRefusals *prometheus.CounterVec
	dial        *prometheus.HistogramVec
	ttfb        *prometheus.HistogramVec

	userRequests *prometheus.CounterVec // nil unless per-user series are on
	userBytes    *prometheus.CounterVec // nil unless per-user series are on
	maxUsers     int

	funcs   *funcCollector
	dns     *dnsVecs    // made by the first DNS call; guarded by mu
	authz   *authzVecs  // made by the first Authz call; guarded by mu
	parents *parentVecs // see parent.go
	quota   *quotaCollector
	lists   *listCollector

	mu            sync.Mutex
	listeners     map[[2]string]*ListenerMetrics // guarded by mu
	parentsByName map[string]*ParentMetrics      // the configured parents' series, for Read; guarded by mu

	usersMu sync.RWMutex
	users   map[string]*UserMetrics // guarded by usersMu
	other   *UserMetrics            // set once in New
}

// New creates the metrics and registers them, with the Go runtime and
// process collectors, in a registry of their own.
func New(cfg Config) *Metrics {
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.MaxUsers <= 0 {
		cfg.MaxUsers = DefaultMaxUsers
	}
	lp := []string{"listener", "protocol"}
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "connections_accepted_total",
			Help: "Client connections accepted, by listener and protocol.",
		}, lp),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: namespace, Name: "connections_open",
			Help: "Client connections open now, by listener and protocol.",
		}, lp),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "requests_total",
			Help: "Requests and tunnels answered, by listener, protocol and status class (1xx-5xx, other).",
		}, append(lp, "code")),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "bytes_total",
			Help: "Payload bytes written, by listener, protocol and direction (up: to the upstream, down: to the client): body content or tunnel bytes, never heads.",
		}, append(lp, "direction")),
		tunnels: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "tunnels_total",
			Help: "Tunnels opened (CONNECT, WebSocket, SOCKS), by listener and protocol.",
		}, lp),
		datagrams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "datagrams_total",
			Help: "Datagrams of CONNECT-UDP flows, by listener, protocol and direction (up: sent to the target, down: sent to the client, refused: dropped because the access rules or the private-destination guard refused their destination).",
		}, append(lp, "direction")),
		authFails: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "auth_failures_total",
			Help: "Requests and SOCKS logins refused for wrong credentials, by listener and protocol.",
		}, lp),
		authAsks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "auth_challenges_total",
			Help: "Requests refused for missing credentials (the 407 challenge before a client authenticates, a SOCKS greeting without username/password, SOCKS4), by listener and protocol.",
		}, lp),
		aclDenies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "acl_denials_total",
			Help: "Requests refused by the access policy, by listener and protocol.",
		}, lp),
		wouldDeny: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "acl_would_deny_total",
			Help: "Requests a rule in audit mode let through that it would have refused (a report rule, or any deny rule or a default of deny of a policy or listener in audit mode), by listener, protocol and rule (\"default\" for the default).",
		}, append(lp, "rule")),
		sniChecks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "sni_checks_total",
			Help: "Tunnels whose first bytes the SNI check read, by listener, protocol and result (matched, differs, no-sni, not-tls, malformed, too-large, incomplete); the server names are in the access log.",
		}, append(lp, "result")),
		sniRefusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "sni_refusals_total",
			Help: "Tunnels the SNI check (sni = \"match\") closed before any byte reached the origin, by listener and protocol.",
		}, lp),
		dial: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "upstream_dial_duration_seconds",
			Help:    "Time to resolve and connect to an upstream, by result (ok, error).",
			Buckets: dialBuckets,
		}, []string{"result"}),
		ttfb: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: namespace, Name: "upstream_first_byte_seconds",
			Help:    "Time from sending a request upstream to the first byte of its response, by listener.",
			Buckets: ttfbBuckets,
		}, []string{"listener"}),
		maxUsers:      cfg.MaxUsers,
		listeners:     make(map[[2]string]*ListenerMetrics),
		parentsByName: make(map[string]*ParentMetrics),
		funcs:         newFuncCollector(),
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: namespace, Name: "build_info",
		Help: "Always 1; the labels name the running rustle's version and Go version.",
	}, []string{"version", "goversion"})
	buildInfo.WithLabelValues(cfg.Version, runtime.Version()).Set(1)

	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfo, m.accepted, m.open, m.requests, m.bytes, m.tunnels, m.datagrams,
		m.authFails, m.authAsks, m.aclDenies, m.wouldDeny, m.sniChecks, m.sniRefusals, m.dial, m.ttfb, m.funcs,
	)
	m.parents = newParentVecs(m.reg)
	m.quota = newQuotaCollector(m)
	m.lists = newListCollector()
	m.reg.MustRegister(m.quota, m.lists)
	if cfg.PerUser {
		m.userRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "user_requests_total",
			Help: "Requests and tunnels per authenticated user; users past the bound are counted as " + OtherUser + ".",
		}, []string{"user"})
		m.userBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "user_bytes_total",
			Help: "Payload bytes per authenticated user and direction (up, down); users past the bound are counted as " + OtherUser + ".",
		}, []string{"user", "direction"})
		m.reg.MustRegister(m.userRequests, m.userBytes)
		m.users = make(map[string]*UserMetrics)
		m.other = m.newUser(OtherUser)
	}

	opts := promhttp.HandlerOpts{
		Registry:            m.reg,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}
	if cfg.Logger != nil {
		opts.ErrorLog = errorLog{cfg.Logger}
	}
	m.handler = promhttp.HandlerFor(m.reg, opts)
	return m
}

// errorLog adapts a *slog.Logger to promhttp.Logger.
type errorLog struct{ l *slog.Logger }

func (e errorLog) Println(v ...any) {
	e.l.Warn("metrics: serving /metrics: " + strings.TrimSpace(fmt.Sprintln(v...)))
}

// Handler returns the handler of /metrics: the Prometheus text format
// (gzip- or zstd-compressed when the scraper asks), at most 4 scrapes at
// once, each given up after 10s.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return m.handler
}

// Gatherer returns the registry, for tests and for other collectors'
// owners to read.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Listener returns the metrics of one listener and protocol, creating
// its series on first use. protocol is what the connections speak:
// "http", "https", "h2", "socks5" or "socks4" (a mixed listener asks once
// per protocol it tells apart). Call it once per listener and protocol
// and keep the result: it takes a lock. It returns nil on a nil Metrics.
func (m *Metrics) Listener(name, protocol string) *ListenerMetrics {
	if m == nil {
		return nil
	}
	key := [2]string{name, protocol}
	m.mu.Lock()
	defer m.mu.Unlock()
	if l, ok := m.listeners[key]; ok {
		return l
	}
	name, protocol = strings.Clone(name), strings.Clone(protocol)
	l := &ListenerMetrics{
		protocol:   protocol,
		accepted:   m.accepted.WithLabelValues(name, protocol),
		open:       m.open.WithLabelValues(name, protocol),
		up:         m.bytes.WithLabelValues(name, protocol, "up"),
		down:       m.bytes.WithLabelValues(name, protocol, "down"),
		tunnels:    m.tunnels.WithLabelValues(name, protocol),
		dgUp:       m.datagrams.WithLabelValues(name, protocol, "up"),
		dgDown:     m.datagrams.WithLabelValues(name, protocol, "down"),
		dgRefused:  m.datagrams.WithLabelValues(name, protocol, "refused"),
		authFails:  m.authFails.WithLabelValues(name, protocol),
		authAsks:   m.authAsks.WithLabelValues(name, protocol),
		aclDenies:  m.aclDenies.WithLabelValues(name, protocol),
		wouldDeny:  m.wouldDeny.MustCurryWith(prometheus.Labels{"listener": name, "protocol": protocol}),
		sniRefused: m.sniRefusals.WithLabelValues(name, protocol),
		dialOK:     m.dial.WithLabelValues("ok"),
		dialErr:    m.dial.WithLabelValues("error"),
		ttfb:       m.ttfb.WithLabelValues(name),
	}
	for i, class := range statusClasses {
		l.requests[i] = m.requests.WithLabelValues(name, protocol, class)
	}
	for i, r := range sniResults {
		l.sniChecks[i] = m.sniChecks.WithLabelValues(name, protocol, r)
	}
	m.listeners[key] = l
	return l
}

// User returns the metrics of an authenticated user: series of its own
// for the first MaxUsers users seen, the shared [OtherUser] series for
// the rest. It returns nil when per-user series are off or m is nil. Call
// it once per connection, after authentication, not per request.
func (m *Metrics) User(name string) *UserMetrics {
	if m == nil || m.users == nil {
		return nil
	}
	m.usersMu.RLock()
	u, ok := m.users[name]
	full := len(m.users) >= m.maxUsers
	m.usersMu.RUnlock()
	if ok {
		return u
	}
	if full {
		return m.other
	}
	m.usersMu.Lock()
	defer m.usersMu.Unlock()
	if u, ok := m.users[name]; ok {
		return u
	}
	if len(m.users) >= m.maxUsers {
		return m.other
	}
	name = strings.Clone(name) // the caller's string may alias a buffer
	u = m.newUser(name)
	m.users[name] = u
	return u
}

func (m *Metrics) newUser(name string) *UserMetrics {
	return &UserMetrics{
		name:     name,
		requests: m.userRequests.WithLabelValues(name),
		up:       m.userBytes.WithLabelValues(name, "up"),
		down:     m.userBytes.WithLabelValues(name, "down"),
	}
}

// PoolStats is what the upstream keep-alive pool reports.
type PoolStats struct {
	// Hits counts requests that reused a pooled connection.
	Hits uint64
	// Misses counts requests that found no pooled connection and dialed.
	Misses uint64
	// Idle is the number of idle connections pooled now.
	Idle int
}

// SetPoolStats sets the function read on each scrape for
// rustle_upstream_pool_hits_total, _misses_total and
// rustle_upstream_pool_idle_connections. Until it is set, or with nil,
// those series are absent.
func (m *Metrics) SetPoolStats(fn func() PoolStats) {
	if m != nil {
		m.funcs.pool.Store(&fn)
	}
}

// SetTunnelsOpen sets the function read on each scrape for
// rustle_tunnels_open, the tunnels open in every worker's engine.
func (m *Metrics) SetTunnelsOpen(fn func() int) {
	if m != nil {
		m.funcs.tunnels.Store(&fn)
	}
}

// SetAccessLogDropped sets the function read on each scrape for
// rustle_access_log_dropped_total, usually the access logger's Dropped.
func (m *Metrics) SetAccessLogDropped(fn func() uint64) {
	if m != nil {
		m.funcs.dropped.Store(&fn)
	}
}
