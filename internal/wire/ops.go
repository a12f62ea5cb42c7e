package wire

import (
	"io"
	"log/slog"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/admin"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
)

// AccessLog returns the access log of [access_log], whose lines go to
// stdout when it names no path; nil when it is off.
func AccessLog(cfg *config.Config, stdout io.Writer, log *slog.Logger) (*accesslog.Logger, error) {
	a := cfg.AccessLog
	if !a.Enabled {
		return nil, nil
	}
	return accesslog.New(accesslog.Config{
		Format:   accesslog.Format(a.Format),
		Template: a.Template,
		Path:     a.Path,
		Writer:   stdout,
		Logger:   log,
	})
}

// Metrics returns the metrics of [metrics], which report version; nil
// without an admin listener, the one place they are served.
func Metrics(cfg *config.Config, version string, log *slog.Logger) *metrics.Metrics {
	if cfg.Admin == "" {
		return nil
	}
	return metrics.New(metrics.Config{
		PerUser:  cfg.Metrics.PerUser,
		MaxUsers: cfg.Metrics.MaxUsers,
		Version:  version,
		Logger:   log,
	})
}

// Admin returns the admin listener of admin and [admin_access], not
// started, serving m's metrics and ready's readiness; nil without one.
// Its error is that of an [admin_access] file that does not load.
func Admin(cfg *config.Config, m *metrics.Metrics, ready func() bool, log *slog.Logger) (*admin.Server, error) {
	if cfg.Admin == "" {
		return nil, nil
	}
	access, err := admin.LoadAccess(cfg.AdminAccess)
	if err != nil {
		return nil, err
	}
	return admin.New(cfg.Admin, m.Handler(), ready, log, access), nil
}
