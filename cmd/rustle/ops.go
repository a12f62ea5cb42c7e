package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/admin"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/gctune"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/sdnotify"
	"github.com/rustle-proxy/rustle/internal/server"
	"github.com/rustle-proxy/rustle/internal/wire"
)

// ops is what runs beside the proxy for its operators: the access log,
// the metrics and admin listener, readiness and systemd notifications.
type ops struct {
	log     *slog.Logger
	access  *accesslog.Logger             // nil when the access log is off
	metrics *metrics.Metrics              // nil without an admin listener
	admin   *admin.Server                 // nil without an admin listener
	console *admin.Console                // the admin page; nil without an admin listener or before attach
	ready   atomic.Bool                   // what /readyz reports, with the server's routes
	srv     atomic.Pointer[server.Server] // set by attach; nil = none yet
	cfg     atomic.Pointer[config.Config] // the configuration in effect, for the admin page
	start   time.Time                     // when rustle started
	level   *slog.LevelVar                // the log level a reload may change; nil = fixed
	gc      *gctune.Tuner                 // the GC target a reload may change; nil = GOGC from the environment
	// reloads carries the admin page's reload requests to the main
	// loop, which answers each on its channel.
	reloads chan reloadRequest
}

// reloadRequest is a reload the admin page asks of the main loop.
type reloadRequest struct {
	by     string     // who asked, for the page
	result chan error // the reload's error; nil when it took
}

// startOps opens the access log and starts the admin listener, not yet
// ready. Access log lines without a path go to stdout.
func startOps(cfg *config.Config, logger *slog.Logger, stdout io.Writer) (*ops, error) {
	o := &ops{log: logger, start: time.Now(), reloads: make(chan reloadRequest)}
	o.cfg.Store(cfg)
	al, err := wire.AccessLog(cfg, stdout, logger)
	if err != nil {
		return nil, err
	}
	o.access = al
	if cfg.Admin != "" {
		o.metrics = wire.Metrics(cfg, versionString(), logger)
		if o.access != nil {
			o.metrics.SetAccessLogDropped(o.access.Dropped)
		}
		if o.admin, err = wire.Admin(cfg, o.metrics, o.isReady, logger); err != nil {
			o.close(context.Background())
			return nil, err
		}
		if err := o.admin.Start(); err != nil {
			o.close(context.Background())
			return nil, err
		}
		endpoints := "/ /api/ /metrics /healthz /readyz /quota /revoke"
		if cfg.AdminAccess.HealthAndMetricsOnly {
			endpoints = "/metrics /healthz /readyz"
		}
		logger.Info("admin listening", "addr", o.admin.Addr().String(),
			"endpoints", endpoints, "auth", adminAuth(cfg.AdminAccess))
	}
	return o, nil
}

// adminAuth names how the admin listener authenticates, for its start
// line: "token", "htpasswd", both joined with "+", or "none".
func adminAuth(a config.AdminAccess) string {
	var parts []string
	if a.TokenFile != "" {
		parts = append(parts, "token")
	}
	if a.Htpasswd != "" {
		parts = append(parts, "htpasswd")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// addrs returns the bound addresses of the admin listener (which serves
// the metrics too), none without one: the proxy refuses them as
// destinations (server.WithOwnAddrs).
func (o *ops) addrs() []net.Addr {
	if o.admin == nil {
		return nil
	}
	return []net.Addr{o.admin.Addr()}
}

// attach lets the metrics read the server's pool, tunnel and quota
// counts, adds the server's endpoints and the operators' page to the
// admin listener, and lets readiness see its routes.
func (o *ops) attach(srv *server.Server) {
	srv.RegisterMetrics(o.metrics)
	o.srv.Store(srv)
	if o.admin != nil {
		o.admin.HandleProxy(srv)
		o.console = o.admin.HandleConsole(admin.ConsoleConfig{Proxy: srv, Metrics: o.metrics, AccessLog: o.access,
			Info: o.info, Reload: o.requestReload, Version: versionString(), Started: o.start})
	}
}

// info summarizes the configuration in effect for the admin page.
func (o *ops) info() admin.RunInfo {
	cfg := o.cfg.Load()
	ri := admin.RunInfo{Workers: cfg.WorkerCount(), AccessLog: accessLogWhere(cfg.AccessLog), QuotaRules: len(cfg.Quota.Rules)}
	for _, p := range cfg.Parents {
		ri.Parents = append(ri.Parents, p.Name)
	}
	listeners := make(map[string]config.Listener, len(cfg.Listen))
	for _, l := range cfg.Listen {
		listeners[l.Name] = l
	}
	if srv := o.srv.Load(); srv != nil {
		for _, a := range srv.Addrs() {
			l := listeners[a.Name]
			ri.Listeners = append(ri.Listeners, admin.ListenerInfo{Name: a.Name, Protocol: a.Protocol,
				Address: a.Addr.String(), Auth: cfg.EffectiveAuth(l), HTTP3: l.HTTP3})
		}
	}
	return ri
}

// accessLogWhere says where a's lines go: "off", or the format and the
// file ("stdout" without one).
func accessLogWhere(a config.AccessLog) string {
	if !a.Enabled {
		return "off"
	}
	to := a.Path
	if to == "" {
		to = "stdout"
	}
	return a.Format + " to " + to
}

// requestReload asks the main loop to reload, as SIGHUP does, on behalf
// of by, and returns the reload's error; ctx bounds the wait (a main
// loop that is draining takes no reload).
func (o *ops) requestReload(ctx context.Context, by string) error {
	req := reloadRequest{by: by, result: make(chan error, 1)}
	select {
	case o.reloads <- req:
	case <-ctx.Done():
		return fmt.Errorf("reload not started: %w", ctx.Err())
	}
	select {
	case err := <-req.result:
		return err
	case <-ctx.Done():
		return fmt.Errorf("reload still running: %w", ctx.Err())
	}
}

// isReady is what /readyz reports: started and not draining, and the
// server's routes have their parents when the configuration requires it
// (ready_requires_parents).
func (o *ops) isReady() bool {
	if !o.ready.Load() {
		return false
	}
	srv := o.srv.Load()
	return srv == nil || srv.ParentsReady()
}

// started turns readiness on and tells systemd that rustle is ready.
func (o *ops) started(addrs []server.Addr) {
	o.ready.Store(true)
	parts := make([]string, len(addrs))
	for i, a := range addrs {
		parts[i] = a.Protocol + " " + a.Addr.String()
	}
	o.notify(sdnotify.Ready())
	o.notify(sdnotify.Status("serving " + strings.Join(parts, ", ")))
}

// reloading and reloaded bracket a reload for systemd.
func (o *ops) reloading() { o.notify(sdnotify.Reloading()) }
func (o *ops) reloaded()  { o.notify(sdnotify.Ready()) }

// reload reads the configuration again with load and swaps it into srv
// for new connections, between RELOADING and READY notifications. A
// configuration that does not load or validate, or that srv refuses (a
// change to a setting read only at start among them, see
// config.RestartChange), is refused with the reason logged in one line,
// and cur stays. by says who asked ("SIGHUP", "admin NAME"), for the
// admin page. reload returns the configuration in effect and the
// refusal's error.
func (o *ops) reload(srv *server.Server, cur *config.Config, load func() (*config.Config, error), by string) (*config.Config, error) {
	o.reloading()
	defer o.reloaded()
	next, err := load()
	if err == nil {
		err = srv.Reload(next) // refuses what only a restart applies
	}
	if o.console != nil {
		o.console.NoteReload(err, by)
	}
	if err != nil {
		o.log.Error("reload refused; the running configuration stays", "err", err, "by", by)
		return cur, err
	}
	o.cfg.Store(next)
	if o.level != nil {
		setLevel(o.level, next.Log.Level)
	}
	if o.gc != nil {
		o.gc.Set(next.GCPercent, gcFloor(next))
	}
	return next, nil
}

// gcFloor is cfg's gc_floor_bytes for gctune: 0 for none (-1).
func gcFloor(cfg *config.Config) uint64 {
	return uint64(max(cfg.GCFloorBytes, 0))
}

// setLevel sets level to name ("debug", "info", "warn", "error"); an
// unknown name, which Validate refuses, leaves "info".
func setLevel(level *slog.LevelVar, name string) {
	var l slog.Level
	l.UnmarshalText([]byte(name))
	level.Set(l)
}

// stopping turns readiness off, so that load balancers stop sending new
// clients, and tells systemd that rustle is stopping.
func (o *ops) stopping() {
	o.ready.Store(false)
	o.notify(sdnotify.Stopping())
	o.notify(sdnotify.Status("draining"))
}

// reopen reopens the access log file, for logrotate.
func (o *ops) reopen() {
	if o.access == nil {
		o.log.Info("SIGUSR1: no access log to reopen")
		return
	}
	if err := o.access.Reopen(); err != nil {
		o.log.Error("access log: reopen failed; still writing to the old file", "err", err)
		return
	}
	o.log.Info("access log reopened")
}

// close stops the admin listener, waiting for scrapes in progress until
// ctx is done, then flushes and closes the access log.
func (o *ops) close(ctx context.Context) {
	if o.admin != nil {
		if err := o.admin.Shutdown(ctx); err != nil {
			o.log.Warn("admin listener: shutdown cut short", "err", err)
		}
	}
	if o.access != nil {
		if err := o.access.Close(); err != nil {
			o.log.Warn("access log: close failed", "err", err)
		}
		if n := o.access.Dropped(); n > 0 {
			o.log.Warn("access log: lines dropped", "dropped", n)
		}
	}
	if o.gc != nil {
		o.gc.Close()
	}
}

// notify logs a failed systemd notification; it never stops rustle.
func (o *ops) notify(err error) {
	if err != nil {
		o.log.Warn("systemd notification failed", "err", err)
	}
}

// optionalString is a flag value that remembers whether it was set, so
// that --admin "" can turn off an admin listener set in the file.
type optionalString struct {
	set bool
	v   string
}

func (s *optionalString) String() string { return s.v }

func (s *optionalString) Set(v string) error {
	s.set, s.v = true, v
	return nil
}

// apply sets *dst to the flag's value if the flag was given.
func (s *optionalString) apply(dst *string) {
	if s.set {
		*dst = s.v
	}
}
