package wire

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/rustle-proxy/rustle/internal/cluster"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/quota"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// Pool returns the upstream pool of [upstream]; nil when
// max_idle_per_host turns keep-alive off.
func Pool(cfg *config.Config) (*dialer.Pool, error) {
	u := cfg.Upstream
	if u.MaxIdlePerHost <= 0 {
		return nil, nil
	}
	p, err := dialer.NewPool(dialer.PoolConfig{
		MaxIdlePerHost: u.MaxIdlePerHost,
		MaxIdle:        u.MaxIdle,
		IdleTimeout:    u.IdleTimeout.Duration,
	})
	if err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	return p, nil
}

// Engine returns a worker's tunnel engine, which ends tunnels idle for
// timeouts.idle_tunnel.
func Engine(cfg *config.Config, log *slog.Logger) (*tunnel.Engine, error) {
	e, err := tunnel.New(tunnel.Config{
		IdleTimeout: cfg.Timeouts.IdleTunnel.Duration,
		Logger:      log,
	})
	if err != nil {
		return nil, fmt.Errorf("wire: start tunnel engine: %w", err)
	}
	return e, nil
}

// Quota returns the quota tracker of [quota]'s rules, counting the
// groups of [acl.groups] together; nil without rules.
func Quota(cfg *config.Config) (*quota.Tracker, error) {
	if len(cfg.Quota.Rules) == 0 {
		return nil, nil
	}
	rules, err := quotaRules(cfg.Quota)
	if err != nil {
		return nil, fmt.Errorf("wire: quota: %w", err)
	}
	return quota.New(quota.Config{Rules: rules, Groups: cfg.ACL.Groups}), nil
}

// quotaRules converts the configured rules; the configuration is
// validated.
func quotaRules(q config.Quota) ([]quota.Rule, error) {
	rules := make([]quota.Rule, len(q.Rules))
	for i, r := range q.Rules {
		period, err := quota.ParsePeriod(r.Period)
		if err != nil {
			return nil, err
		}
		reset, err := config.ParseReset(r.Reset)
		if err != nil {
			return nil, err
		}
		loc, err := time.LoadLocation(r.TimeZone)
		if err != nil {
			return nil, err
		}
		rules[i] = quota.Rule{Name: r.Name, Users: r.Users, Groups: r.Groups, Period: period, Reset: reset,
			Loc: loc, Bytes: r.Bytes, Requests: r.Requests}
	}
	return rules, nil
}

// ClusterHooks are what the cluster link asks of the running server.
type ClusterHooks struct {
	// LocalConns calls its argument with each user holding connections
	// here and their number.
	LocalConns func(fn func(user string, conns int))
	// Revoke ends, here, the sessions and tunnels of users another
	// instance revoked.
	Revoke func(users []string)
}

// Cluster returns the link of [cluster] to the other instances, sharing
// q (nil = no quotas); nil without a [cluster]. It connects to nothing
// before its Start.
func Cluster(cfg *config.Config, q *quota.Tracker, hooks ClusterHooks, log *slog.Logger) (*cluster.Cluster, error) {
	c := cfg.Cluster
	if !c.Enabled() {
		return nil, nil
	}
	cc := cluster.Config{
		URL: c.Redis, Sentinels: c.Sentinels, MasterName: c.MasterName, Nodes: c.Nodes, Username: c.Username,
		SyncInterval: c.SyncInterval.Duration, Timeout: c.Timeout.Duration,
		Instance: c.Instance, Quota: q, LocalConns: hooks.LocalConns, Revoke: hooks.Revoke,
		Logger: log,
	}
	var err error
	if c.PasswordFile != "" {
		if cc.Password, err = readSecret(c.PasswordFile); err != nil {
			return nil, fmt.Errorf("wire: cluster.password_file: %w", err)
		}
	}
	if c.SentinelPasswordFile != "" {
		if cc.SentinelPassword, err = readSecret(c.SentinelPasswordFile); err != nil {
			return nil, fmt.Errorf("wire: cluster.sentinel_password_file: %w", err)
		}
	}
	cl, err := cluster.New(cc)
	if err != nil {
		return nil, fmt.Errorf("wire: %w", err)
	}
	return cl, nil
}
