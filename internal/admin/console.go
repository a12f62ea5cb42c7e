package admin

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/metrics"
)

// historySamples is how many samples the traffic charts keep: an hour
// at one sample a second.
const historySamples = 3600

// ConsoleProxy is what the operators' page asks of the running proxy
// beyond [Proxy]; *server.Server implements it.
type ConsoleProxy interface {
	Proxy
	// ClusterInstance names this instance in the cluster; "" without a
	// cluster.
	ClusterInstance() string
	// ResetQuota sets the counts of the quota counter of rule and scope
	// to zero until its period ends, and reports whether there was such
	// a counter; its error says why it cannot (a cluster).
	ResetQuota(rule, scope string) (bool, error)
}

// ListenerInfo describes one proxy listener of the running
// configuration.
type ListenerInfo struct {
	Name     string `json:"name"`
	Protocol string `json:"protocol"`
	// Address is the bound address (host:port).
	Address string `json:"address"`
	// Auth is how the listener authenticates clients ("none", "basic",
	// ...), as its start line says.
	Auth string `json:"auth"`
	// HTTP3 says whether it also serves HTTP/3 on UDP.
	HTTP3 bool `json:"http3"`
}

// RunInfo summarizes the running configuration for the page.
type RunInfo struct {
	Listeners []ListenerInfo `json:"listeners"`
	// Workers is the number of workers (engines and sockets per
	// listener).
	Workers int `json:"workers"`
	// AccessLog says where the access log goes: "off", or its format
	// and file ("text to stdout", "json to /var/log/rustle/access.log").
	AccessLog string `json:"access_log"`
	// Parents are the configured parent proxies' names.
	Parents []string `json:"parents"`
	// QuotaRules is the number of [[quota.rules]].
	QuotaRules int `json:"quota_rules"`
}

// ReloadResult is the outcome of a reload.
type ReloadResult struct {
	// At is when it finished.
	At time.Time `json:"at"`
	// OK says whether the new configuration took; Error is why not.
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// By says who asked: "SIGHUP", or "admin NAME" for the page's
	// button (NAME as [Caller] says, "loopback" without one).
	By string `json:"by"`
}

// ConsoleConfig configures the operators' page ([Server.HandleConsole]).
type ConsoleConfig struct {
	// Proxy is the running proxy; required.
	Proxy ConsoleProxy
	// Metrics are the counters the page samples once a second for its
	// numbers and charts; nil shows none.
	Metrics *metrics.Metrics
	// AccessLog is the access log whose latest records the page keeps
	// (see accesslog.Logger.SetTap); nil means the access log is off:
	// no tail, and refusals by reason only from the metrics.
	AccessLog *accesslog.Logger
	// Info returns the running configuration's summary; nil shows none.
	Info func() RunInfo
	// Reload reloads the configuration, as SIGHUP does, on behalf of
	// by, and returns why it was refused; nil offers no reload button.
	Reload func(ctx context.Context, by string) error
	// Version is the running rustle's version; "" means "dev".
	Version string
	// Started is when rustle started; zero means when the page was
	// added.
	Started time.Time
	// SampleInterval is how often the counters are sampled; 0 means 1s.
	SampleInterval time.Duration
	// TailSize is how many access log records are kept; 0 means 1000.
	TailSize int
}

// Console is the operators' page at / and its JSON API under /api/,
// made by [Server.HandleConsole].
type Console struct {
	cfg  ConsoleConfig
	log  *slog.Logger
	ring *ring
	tail *tail // nil without an access log
	host string

	mu         sync.Mutex
	lastReload *ReloadResult // guarded by mu; nil = none since start
}

// HandleConsole serves the operators' page at / and its API under /api/
// (see docs/operations.md), behind the same access as the other
// endpoints, and samples cfg.Metrics once a second, into a ring of the
// last hour, until the server is shut down. With
// Access.HealthAndMetricsOnly the page is off: / stays the text index,
// /api/ answers 404, and nothing is sampled. Call it once; it may be
// called while the server serves.
func (s *Server) HandleConsole(cfg ConsoleConfig) *Console {
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Started.IsZero() {
		cfg.Started = time.Now()
	}
	if cfg.SampleInterval <= 0 {
		cfg.SampleInterval = time.Second
	}
	c := &Console{cfg: cfg, log: s.log, ring: newRing(historySamples)}
	c.host, _ = os.Hostname()
	c.routes(s)
	if s.access.HealthAndMetricsOnly {
		return c
	}
	if cfg.AccessLog != nil {
		c.tail = newTail(cfg.TailSize)
		cfg.AccessLog.SetTap(c.tail.record)
	}
	s.console.Store(c)
	s.background(func(stop <-chan struct{}) {
		defer cfg.AccessLog.SetTap(nil)
		c.sample(time.Now())
		t := time.NewTicker(cfg.SampleInterval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				c.sample(now)
			}
		}
	})
	return c
}

// NoteReload records the outcome of a reload (err nil: it took) asked
// by by, for the page's summary.
func (c *Console) NoteReload(err error, by string) {
	r := &ReloadResult{At: time.Now(), OK: err == nil, By: by}
	if err != nil {
		r.Error = err.Error()
	}
	c.mu.Lock()
	c.lastReload = r
	c.mu.Unlock()
}

// sample adds the counters' values now to the ring.
func (c *Console) sample(now time.Time) {
	rd := c.cfg.Metrics.Read()
	counters := make(map[string]float64, 2*len(rd.Protocols)+8)
	gauges := make(map[string]float64, 2)
	var open int64
	var up, down uint64
	for proto, n := range rd.Protocols {
		counters["requests:"+proto] = float64(n.Requests)
		counters["tunnels:"+proto] = float64(n.Tunnels)
		open += n.Open
		up += n.BytesUp
		down += n.BytesDown
	}
	counters["bytes:up"], counters["bytes:down"] = float64(up), float64(down)
	for reason, n := range c.refusals(&rd) {
		counters["refusals:"+reason] = float64(n)
	}
	gauges["open:connections"] = float64(open)
	if rd.TunnelsOpen >= 0 {
		gauges["open:tunnels"] = float64(rd.TunnelsOpen)
	}
	c.ring.add(now, counters, gauges)
}

// refusals returns the refusals so far by reason: from the access log's
// records when it is on, else from the metrics' counts of wrong and
// missing credentials and of access rule denials.
func (c *Console) refusals(rd *metrics.Reading) map[string]uint64 {
	if c.tail != nil {
		return c.tail.reasonCounts()
	}
	t := rd.Total()
	out := make(map[string]uint64, 3)
	for reason, n := range map[string]uint64{accesslog.ReasonAuthFailed: t.AuthFailed,
		accesslog.ReasonAuthMissing: t.AuthMissing, accesslog.ReasonDenied: t.ACLDenied} {
		if n > 0 {
			out[reason] = n
		}
	}
	return out
}

// errNoReload is the reload action's error when the page was given no
// way to reload.
var errNoReload = errors.New("this admin listener cannot reload the configuration (send SIGHUP)")
