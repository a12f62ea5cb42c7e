package admin

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/rustle-proxy/rustle/internal/quota"
)

// Bounds of the API's lists.
const (
	defaultListLimit = 20
	maxListLimit     = 1000
	defaultLogLimit  = 100
	maxActionBody    = 4 << 10
)

// routes adds the page, its assets and the API.
func (c *Console) routes(s *Server) {
	s.Handle("GET /ui/{file}", http.HandlerFunc(serveAsset))
	s.Handle("GET /api/summary", c.jsonHandler(func(r *http.Request) (any, error) { return c.summary(r), nil }))
	s.Handle("GET /api/traffic", c.jsonHandler(c.traffic))
	s.Handle("GET /api/users", c.jsonHandler(func(r *http.Request) (any, error) { return c.users(listLimit(r, defaultListLimit)), nil }))
	s.Handle("GET /api/quotas", c.jsonHandler(func(r *http.Request) (any, error) { return c.quotas(listLimit(r, 100)), nil }))
	s.Handle("GET /api/parents", c.jsonHandler(func(r *http.Request) (any, error) { return c.parents(), nil }))
	s.Handle("GET /api/log", c.jsonHandler(func(r *http.Request) (any, error) { return c.logTail(r), nil }))
	s.Handle("POST /api/revoke", c.action("revoke", c.revoke))
	s.Handle("POST /api/quota/reset", c.action("quota-reset", c.resetQuota))
	s.Handle("POST /api/reload", c.action("reload", c.reload))
}

// apiError is an error the API answers with its status.
type apiError struct {
	code int
	msg  string
}

func (e *apiError) Error() string { return e.msg }

// jsonHandler answers a GET with fn's value as JSON, or with its error.
func (c *Console) jsonHandler(fn func(r *http.Request) (any, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, err := fn(r)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// writeError answers err: an apiError with its status, any other 500;
// the body is {"error": "..."}.
func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var ae *apiError
	if errors.As(err, &ae) {
		code = ae.code
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// listLimit reads the query's limit: def when absent, at most
// maxListLimit.
func listLimit(r *http.Request, def int) int {
	n, err := strconv.Atoi(r.URL.Query().Get("limit"))
	if err != nil || n <= 0 {
		return def
	}
	return min(n, maxListLimit)
}

// Summary is the answer of GET /api/summary: what is running.
type Summary struct {
	Version string    `json:"version"`
	Started time.Time `json:"started"`
	Now     time.Time `json:"now"`
	// Instance names this rustle: its cluster instance name with a
	// cluster, else the host name.
	Instance string `json:"instance"`
	// Cluster says whether quotas and connection counts are shared
	// through Redis, RedisUp whether the last sync succeeded.
	Cluster bool `json:"cluster"`
	RedisUp bool `json:"redis_up"`
	RunInfo
	// LastReload is the last reload since start; null when none.
	LastReload *ReloadResult `json:"last_reload"`
	// CanReload says whether POST /api/reload is served.
	CanReload bool `json:"can_reload"`
	// You is who the page is shown to (see [Caller]).
	You string `json:"you"`
}

func (c *Console) summary(r *http.Request) *Summary {
	s := &Summary{Version: c.cfg.Version, Started: c.cfg.Started, Now: time.Now(), Instance: c.host,
		CanReload: c.cfg.Reload != nil, You: Caller(r)}
	if c.cfg.Info != nil {
		s.RunInfo = c.cfg.Info()
	}
	if s.Listeners == nil {
		s.Listeners = []ListenerInfo{}
	}
	if s.Parents == nil {
		s.Parents = []string{}
	}
	s.Cluster, s.RedisUp = c.cfg.Proxy.ClusterState()
	if name := c.cfg.Proxy.ClusterInstance(); name != "" {
		s.Instance = name
	}
	c.mu.Lock()
	s.LastReload = c.lastReload
	c.mu.Unlock()
	return s
}

// ProtocolTotals are one protocol's counts so far.
type ProtocolTotals struct {
	Requests  uint64 `json:"requests"`
	Tunnels   uint64 `json:"tunnels"`
	BytesUp   uint64 `json:"bytes_up"`
	BytesDown uint64 `json:"bytes_down"`
	Open      int64  `json:"connections_open"`
}

// Totals are the counts since start and the levels now.
type Totals struct {
	Requests        uint64                    `json:"requests"`
	Tunnels         uint64                    `json:"tunnels"`
	BytesUp         uint64                    `json:"bytes_up"`
	BytesDown       uint64                    `json:"bytes_down"`
	ConnectionsOpen int64                     `json:"connections_open"`
	TunnelsOpen     int                       `json:"tunnels_open"`
	Protocols       map[string]ProtocolTotals `json:"protocols"`
	// Status counts requests by status class: "1xx".."5xx", "other".
	Status map[string]uint64 `json:"status"`
	// Refusals counts refusals by the access log's reason; RefusalsFrom
	// says where they come from: "access_log" (every reason) or
	// "metrics" (auth-failed, auth-missing and denied only, when the
	// access log is off).
	Refusals     map[string]uint64 `json:"refusals"`
	RefusalsFrom string            `json:"refusals_from"`
	// RefusalsTotal is the sum of Refusals.
	RefusalsTotal uint64 `json:"refusals_total"`
}

// Traffic is the answer of GET /api/traffic?since=N: the totals now and
// the per-second samples after sample N (every sample kept, up to an
// hour, without since).
type Traffic struct {
	// IntervalMS is the time between samples.
	IntervalMS int64 `json:"interval_ms"`
	// Seq is the number of the last sample: the since of the next call.
	Seq uint64 `json:"seq"`
	// Times are the samples' times, Unix milliseconds, oldest first.
	Times []int64 `json:"times"`
	// Series are the values at those times, by name: "requests:PROTO"
	// and "tunnels:PROTO" (per second), "bytes:up" and "bytes:down"
	// (bytes per second), "open:connections" and "open:tunnels" (levels)
	// and "refusals:REASON" (per second).
	Series map[string][]float64 `json:"series"`
	Totals Totals               `json:"totals"`
}

var statusNames = [6]string{"other", "1xx", "2xx", "3xx", "4xx", "5xx"}

func (c *Console) traffic(r *http.Request) (any, error) {
	var since uint64
	if v := r.URL.Query().Get("since"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, &apiError{http.StatusBadRequest, "since: not a sample number: " + clip(v)}
		}
		since = n
	}
	t := &Traffic{IntervalMS: c.cfg.SampleInterval.Milliseconds()}
	t.Times, t.Series, t.Seq = c.ring.since(since)
	t.Totals = c.totals()
	return t, nil
}

// totals returns the counts so far and the levels now.
func (c *Console) totals() Totals {
	rd := c.cfg.Metrics.Read()
	tot := rd.Total()
	t := Totals{Requests: tot.Requests, Tunnels: tot.Tunnels, BytesUp: tot.BytesUp, BytesDown: tot.BytesDown,
		ConnectionsOpen: tot.Open, TunnelsOpen: max(rd.TunnelsOpen, 0),
		Protocols: make(map[string]ProtocolTotals, len(rd.Protocols)), Status: make(map[string]uint64, 6),
		Refusals: c.refusals(&rd), RefusalsFrom: "metrics"}
	if c.tail != nil {
		t.RefusalsFrom = "access_log"
	}
	for _, n := range t.Refusals {
		t.RefusalsTotal += n
	}
	for proto, n := range rd.Protocols {
		t.Protocols[proto] = ProtocolTotals{Requests: n.Requests, Tunnels: n.Tunnels,
			BytesUp: n.BytesUp, BytesDown: n.BytesDown, Open: n.Open}
	}
	for i, n := range tot.Status {
		t.Status[statusNames[i]] = n
	}
	return t
}

// UserRow is one user of the top lists: its counts since start (the
// per-user metrics) and its quotas now.
type UserRow struct {
	Name      string         `json:"name"`
	Requests  uint64         `json:"requests"`
	BytesUp   uint64         `json:"bytes_up"`
	BytesDown uint64         `json:"bytes_down"`
	Quotas    []quota.Status `json:"quotas"`
}

// Users is the answer of GET /api/users?limit=N: the top users by bytes
// (both ways) and by requests, N of each (20 without limit). They come
// from the per-user metrics: with metrics.per_user off, PerUser is false
// and the lists are empty.
type Users struct {
	PerUser    bool      `json:"per_user"`
	ByBytes    []UserRow `json:"by_bytes"`
	ByRequests []UserRow `json:"by_requests"`
}

func (c *Console) users(limit int) *Users {
	all := c.cfg.Metrics.Users()
	out := &Users{PerUser: c.cfg.Metrics.PerUser(), ByBytes: []UserRow{}, ByRequests: []UserRow{}}
	rows := make([]UserRow, len(all))
	for i, u := range all {
		rows[i] = UserRow{Name: u.Name, Requests: u.Requests, BytesUp: u.BytesUp, BytesDown: u.BytesDown}
	}
	top := func(key func(UserRow) uint64) []UserRow {
		sorted := slices.Clone(rows)
		slices.SortFunc(sorted, func(a, b UserRow) int {
			return cmp.Or(cmp.Compare(key(b), key(a)), cmp.Compare(a.Name, b.Name))
		})
		sorted = sorted[:min(limit, len(sorted))]
		for i := range sorted {
			sorted[i].Quotas = append([]quota.Status{}, c.cfg.Proxy.Quota(sorted[i].Name)...)
		}
		return sorted
	}
	out.ByBytes = top(func(u UserRow) uint64 { return u.BytesUp + u.BytesDown })
	out.ByRequests = top(func(u UserRow) uint64 { return u.Requests })
	return out
}

// QuotaRow is one quota counter and how much of it is used.
type QuotaRow struct {
	quota.Status
	// Used is the larger of the bytes' and the requests' share of their
	// limit: 1 when the quota is spent.
	Used float64 `json:"used"`
}

// Quotas is the answer of GET /api/quotas?limit=N: the quota counters,
// the most used first, N of them (100 without limit), out of Count.
// With a cluster the counts are the totals of every instance.
type Quotas struct {
	Counters []QuotaRow `json:"counters"`
	Count    int        `json:"count"`
	Cluster  bool       `json:"cluster"`
	RedisUp  bool       `json:"redis_up"`
}

func (c *Console) quotas(limit int) *Quotas {
	all := c.cfg.Proxy.Quotas()
	out := &Quotas{Counters: make([]QuotaRow, len(all)), Count: len(all)}
	for i, st := range all {
		out.Counters[i] = QuotaRow{Status: st, Used: max(share(st.BytesUsed, st.BytesLimit), share(st.RequestsUsed, st.RequestsLimit))}
	}
	slices.SortStableFunc(out.Counters, func(a, b QuotaRow) int { return cmp.Compare(b.Used, a.Used) })
	out.Counters = out.Counters[:min(limit, len(out.Counters))]
	out.Cluster, out.RedisUp = c.cfg.Proxy.ClusterState()
	return out
}

// share is used/limit, 0 without a limit.
func share(used, limit int64) float64 {
	if limit <= 0 {
		return 0
	}
	return float64(used) / float64(limit)
}

// ParentRow is one parent proxy: its health and counts since start.
type ParentRow struct {
	Name string `json:"name"`
	// Up is false while its health check holds it down.
	Up       bool   `json:"up"`
	Requests uint64 `json:"requests"`
	Failures uint64 `json:"failures"`
	// DialMS is the mean time of its successful connects and
	// handshakes, in milliseconds; 0 before the first.
	DialMS float64 `json:"dial_ms"`
}

// Parents is the answer of GET /api/parents.
type Parents struct {
	Parents []ParentRow `json:"parents"`
}

func (c *Console) parents() *Parents {
	out := &Parents{Parents: []ParentRow{}}
	for _, p := range c.cfg.Metrics.Read().Parents {
		row := ParentRow{Name: p.Name, Up: p.Up, Requests: p.Requests, Failures: p.Failures}
		if p.DialOK > 0 {
			row.DialMS = p.DialOKSeconds * 1000 / float64(p.DialOK)
		}
		out.Parents = append(out.Parents, row)
	}
	return out
}

// Log is the answer of GET /api/log?user=&host=&status=&reason=&limit=:
// the latest access log records that pass the filter, newest first (100
// without limit), from the last 1000 the log wrote.
type Log struct {
	// Enabled is false when the access log is off: no records.
	Enabled bool        `json:"enabled"`
	Records []LogRecord `json:"records"`
}

func (c *Console) logTail(r *http.Request) *Log {
	if c.tail == nil {
		return &Log{Records: []LogRecord{}}
	}
	return &Log{Enabled: true, Records: c.tail.latest(logFilter(r), listLimit(r, defaultLogLimit))}
}

// logFilter reads a LogFilter from r's query.
func logFilter(r *http.Request) LogFilter {
	q := r.URL.Query()
	return LogFilter{User: q.Get("user"), Host: q.Get("host"), Status: q.Get("status"), Reason: q.Get("reason")}
}

// ActionRequest is the JSON body of the actions: POST /api/revoke
// {"user": NAME}, POST /api/quota/reset {"rule": RULE, "scope": SCOPE},
// POST /api/reload {}.
type ActionRequest struct {
	User  string `json:"user,omitempty"`
	Rule  string `json:"rule,omitempty"`
	Scope string `json:"scope,omitempty"`
}

// ActionResult is the answer of an action that was carried out.
type ActionResult struct {
	// Done says what was done, in one line.
	Done string `json:"done"`
}

// action serves an action: it reads the body, runs fn, answers its
// result or error, and logs who asked what and how it went.
func (c *Console) action(name string, fn func(r *http.Request, a ActionRequest) (string, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a ActionRequest
		dec := json.NewDecoder(io.LimitReader(r.Body, maxActionBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&a); err != nil && !errors.Is(err, io.EOF) {
			err = &apiError{http.StatusBadRequest, name + ": the body is not a JSON action: " + err.Error()}
			c.logAction(r, name, a, "", err)
			writeError(w, err)
			return
		}
		done, err := fn(r, a)
		c.logAction(r, name, a, done, err)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, ActionResult{Done: done})
	})
}

// logAction logs an action: who asked (see Caller), from where, what,
// and what came of it.
func (c *Console) logAction(r *http.Request, name string, a ActionRequest, done string, err error) {
	attrs := []any{"action", name, "by", callerName(r), "remote", r.RemoteAddr}
	for _, kv := range [][2]string{{"user", a.User}, {"rule", a.Rule}, {"scope", a.Scope}} {
		if kv[1] != "" {
			attrs = append(attrs, kv[0], clip(kv[1]))
		}
	}
	if err != nil {
		c.log.Warn("admin action failed", append(attrs, "err", err)...)
		return
	}
	c.log.Info("admin action", append(attrs, "done", done)...)
}

// callerName is Caller for logs: "loopback" without authentication.
func callerName(r *http.Request) string {
	if who := Caller(r); who != "" {
		return who
	}
	return "loopback"
}

func (c *Console) revoke(r *http.Request, a ActionRequest) (string, error) {
	if a.User == "" {
		return "", &apiError{http.StatusBadRequest, "revoke: {\"user\": NAME} is required"}
	}
	n, err := c.cfg.Proxy.RevokeUser(a.User)
	if err != nil {
		return "", &apiError{http.StatusBadGateway,
			fmt.Sprintf("revoke %s: ended here (%d), not yet published to the other instances: %v", a.User, n, err)}
	}
	if n == 0 {
		return fmt.Sprintf("revoke %s: no session or tunnel of it was open here", a.User), nil
	}
	return fmt.Sprintf("revoke %s: its sessions and tunnels were ended", a.User), nil
}

func (c *Console) resetQuota(r *http.Request, a ActionRequest) (string, error) {
	if a.Rule == "" || a.Scope == "" {
		return "", &apiError{http.StatusBadRequest, "quota reset: {\"rule\": RULE, \"scope\": USER or group:NAME} is required"}
	}
	ok, err := c.cfg.Proxy.ResetQuota(a.Rule, a.Scope)
	if err != nil {
		return "", &apiError{http.StatusConflict, "quota reset: " + err.Error()}
	}
	if !ok {
		return "", &apiError{http.StatusNotFound, fmt.Sprintf("quota reset: no counter of rule %q for %q", clip(a.Rule), clip(a.Scope))}
	}
	return fmt.Sprintf("quota reset: %s of %s starts from zero", a.Rule, a.Scope), nil
}

func (c *Console) reload(r *http.Request, a ActionRequest) (string, error) {
	if c.cfg.Reload == nil {
		return "", &apiError{http.StatusNotImplemented, errNoReload.Error()}
	}
	if err := c.cfg.Reload(r.Context(), "admin "+callerName(r)); err != nil {
		return "", &apiError{http.StatusUnprocessableEntity, "reload refused; the running configuration stays: " + err.Error()}
	}
	return "configuration reloaded", nil
}
