package proxytest

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/authz"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/quota"
	"github.com/rustle-proxy/rustle/internal/sni"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// PolicyConfig says what a test [gate.Policy] applies. Its zero value is
// a policy without users, rules or limits whose guard lets loopback
// destinations through.
type PolicyConfig struct {
	// Listener names the listener in access log records.
	Listener string
	// Users maps user names to passwords; nil = no authentication.
	Users map[string]string
	// Only restricts the policy to these of Users, as a listener's users
	// key does (see auth.Authenticator.Only); nil = every user.
	Only []string
	// Providers are the identity providers tried in order, auth.Local
	// standing for Users; nil = Users alone. With Providers and no
	// Users, the policy authenticates with the providers alone.
	Providers []auth.Provider
	// ProviderGroups names the groups the providers give, for Rules.
	ProviderGroups []string
	// Rules are the access rules, with Groups and Default ("" = deny);
	// nil Rules = no access policy.
	Rules   []acl.Rule
	Groups  map[string][]string
	Default string
	// Audit puts the access rules in audit mode (acl.Config.Audit).
	Audit bool
	// Limits configures the limiter, its settings left zero given
	// rustle's defaults (see LimitsConfig); nil = none.
	Limits *limits.Config
	// Guard keeps the private-destination guard's default: private and
	// loopback destinations refused, but for the ranges in Allow. false
	// lets every private range through, as tests of loopback origins need.
	Guard bool
	// Allow lists the private ranges a Guard lets through; nil = none.
	Allow []netip.Prefix
	// DialTimeout bounds a dial; 0 = 5s.
	DialTimeout time.Duration
	// Pool keeps idle upstream connections; nil = none.
	Pool *dialer.Pool
	// Metrics and UserMetrics observe the policy's requests; nil = none.
	Metrics     *metrics.ListenerMetrics
	UserMetrics func(string) *metrics.UserMetrics
	// AccessLog receives the policy's records; nil = none.
	AccessLog *accesslog.Logger
	// TunnelIdle ends goroutine-relayed tunnels idle this long; 0 = none.
	TunnelIdle time.Duration
	// Revoked tracks sessions per user; nil = none.
	Revoked *gate.Registry
	// Logger receives the policy's refusals at debug level; nil = discard.
	Logger *slog.Logger
	// Quota counts the users' requests and bytes; nil = no quotas.
	Quota *quota.Tracker
	// SNI is the listener's SNI check; sni.Unset = off.
	SNI sni.Mode
	// HelloTimeout bounds the SNI check's wait for a ClientHello; 0 =
	// 5s.
	HelloTimeout time.Duration
	// Authz is the decision service's client; nil = none.
	Authz *authz.Client
}

// NewPolicy returns the policy cfg describes; it fails the test when the
// users or rules do not load.
func NewPolicy(t testing.TB, cfg PolicyConfig) *gate.Policy {
	t.Helper()
	p := &gate.Policy{
		Listener:    cfg.Listener,
		Pool:        cfg.Pool,
		Metrics:     cfg.Metrics,
		UserMetrics: cfg.UserMetrics,
		AccessLog:   cfg.AccessLog,
		TunnelIdle:  cfg.TunnelIdle,
		Revoked:     cfg.Revoked,
		Logger:      cfg.Logger,
		Quota:       cfg.Quota,
		SNI:         cfg.SNI,
		Authz:       cfg.Authz,
	}
	p.HelloTimeout = cfg.HelloTimeout
	if p.HelloTimeout == 0 {
		p.HelloTimeout = 5 * time.Second
	}
	if cfg.Users != nil || cfg.Providers != nil {
		names := make([]string, 0, len(cfg.Users))
		for n := range cfg.Users {
			names = append(names, n)
		}
		sort.Strings(names)
		users := make([]auth.User, len(names))
		for i, n := range names {
			users[i] = auth.User{Name: n, Password: cfg.Users[n]}
		}
		a, err := auth.New(auth.Config{Users: users, Providers: cfg.Providers})
		if err != nil {
			t.Fatalf("proxytest: users: %v", err)
		}
		p.Auth = a
		if cfg.Only != nil {
			p.Auth = a.Only(cfg.Only)
		}
	}
	if cfg.Rules != nil {
		pol, err := acl.New(acl.Config{Rules: cfg.Rules, Groups: cfg.Groups, ProviderGroups: cfg.ProviderGroups, Default: cfg.Default, Audit: cfg.Audit})
		if err != nil {
			t.Fatalf("proxytest: rules: %v", err)
		}
		p.ACL = pol
	}
	if cfg.Limits != nil {
		l, err := limits.New(LimitsConfig(*cfg.Limits))
		if err != nil {
			t.Fatalf("proxytest: limits: %v", err)
		}
		p.Limiter = l
	}
	allow := cfg.Allow
	if !cfg.Guard {
		allow = dialer.PrivateRanges()
	}
	timeout := cfg.DialTimeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	d, err := dialer.New(dialer.Config{Timeout: timeout, Guard: dialer.NewGuard(allow)})
	if err != nil {
		t.Fatalf("proxytest: dialer: %v", err)
	}
	p.Dialer = d
	return p
}

// LimitsConfig returns c with the settings of its limits that are on
// and left zero given the values rustle's configuration defaults them to
// (config.SetDefaults), which limits.New requires: a connection rate's
// burst twice the rate (at least 1), the failed-authentication window
// (1m) and cool-down (5m), a byte rate's burst one second of it.
func LimitsConfig(c limits.Config) limits.Config {
	if c.ConnRate > 0 && c.ConnBurst == 0 {
		c.ConnBurst = max(1, int(2*c.ConnRate))
	}
	if c.AuthFailures > 0 || c.AuthFailuresPerAddress > 0 {
		if c.AuthWindow == 0 {
			c.AuthWindow = time.Minute
		}
		if c.AuthCooldown == 0 {
			c.AuthCooldown = 5 * time.Minute
		}
	}
	if c.UserBytesPerSecond > 0 && c.UserBytesBurst == 0 {
		c.UserBytesBurst = c.UserBytesPerSecond
	}
	return c
}

// NewSession opens a session of p for the client connection c (its peer
// as the client's address), with eng as its tunnel engine (nil = tunnels
// relayed by goroutines), and closes it in t.Cleanup (Close is
// idempotent, so a front-end may close it first).
func NewSession(t testing.TB, p *gate.Policy, c net.Conn, eng *tunnel.Engine) *gate.Session {
	t.Helper()
	var client netip.AddrPort
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		client = a.AddrPort()
	}
	s := p.NewSession(context.Background(), client, eng, nil)
	s.Attach(c)
	t.Cleanup(s.Close)
	return s
}
