package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/admin"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/gctune"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/sdnotify"
	"github.com/rustle-proxy/rustle/internal/server"
)

// ops is what runs beside the proxy for its operators: the access log,
// the metrics and admin listener, readiness and systemd notifications.
type ops struct {
	log     *slog.Logger
	access  *accesslog.Logger             // nil when the access log is off
	metrics *metrics.Metrics              // nil without an admin listener
	admin   *admin.Server                 // nil without an admin listener
	ready   atomic.Bool                   // what /readyz reports, with the server's routes
	srv     atomic.Pointer[server.Server] // set by attach; nil = none yet
	level   *slog.LevelVar                // the log level a reload may change; nil = fixed
	gc      *gctune.Tuner                 // the GC target a reload may change; nil = GOGC from the environment
}

// startOps opens the access log and starts the admin listener, not yet
// ready. Access log lines without a path go to stdout.
func startOps(cfg *config.Config, logger *slog.Logger, stdout io.Writer) (*ops, error) {
	o := &ops{log: logger}
	if cfg.AccessLog.Enabled {
		al, err := accesslog.New(accesslog.Config{
			Format:   accesslog.Format(cfg.AccessLog.Format),
			Template: cfg.AccessLog.Template,
			Path:     cfg.AccessLog.Path,
			Writer:   stdout,
			Logger:   logger,
		})
		if err != nil {
			return nil, err
		}
		o.access = al
	}
	if cfg.Admin != "" {
		o.metrics = metrics.New(metrics.Config{
			PerUser:  cfg.Metrics.PerUser,
			MaxUsers: cfg.Metrics.MaxUsers,
			Version:  versionString(),
			Logger:   logger,
		})
		if o.access != nil {
			o.metrics.SetAccessLogDropped(o.access.Dropped)
		}
		access, err := admin.LoadAccess(cfg.AdminAccess)
		if err != nil {
			o.close(context.Background())
			return nil, err
		}
		o.admin = admin.New(cfg.Admin, o.metrics.Handler(), o.isReady, logger, access)
		if err := o.admin.Start(); err != nil {
			o.close(context.Background())
			return nil, err
		}
		endpoints := "/metrics /healthz /readyz /quota /revoke"
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
// counts, adds the server's endpoints to the admin listener, and lets
// readiness see its routes.
func (o *ops) attach(srv *server.Server) {
	srv.RegisterMetrics(o.metrics)
	if o.admin != nil {
		o.admin.Handle("GET /quota", srv.QuotaHandler())
		o.admin.Handle("POST /revoke", srv.RevokeHandler())
	}
	o.srv.Store(srv)
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
// and cur stays. reload returns the configuration in effect.
func (o *ops) reload(srv *server.Server, cur *config.Config, load func() (*config.Config, error)) *config.Config {
	o.reloading()
	defer o.reloaded()
	next, err := load()
	if err == nil {
		err = srv.Reload(next) // refuses what only a restart applies
	}
	if err != nil {
		o.log.Error("reload refused; the running configuration stays", "err", err)
		return cur
	}
	if o.level != nil {
		setLevel(o.level, next.Log.Level)
	}
	if o.gc != nil {
		o.gc.Set(next.GCPercent, gcFloor(next))
	}
	return next
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
