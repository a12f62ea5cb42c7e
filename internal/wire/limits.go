package wire

import (
	"fmt"
	"net/netip"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/limits"
)

// guard makes the private-destination guard with allow_private's ranges.
func (b *builder) guard() error {
	var prefixes []netip.Prefix
	for _, s := range b.cfg.AllowPrivate {
		p, err := acl.ParsePrefix(s)
		if err != nil {
			return fmt.Errorf("wire: allow_private: %w", err)
		}
		prefixes = append(prefixes, p)
	}
	b.g.Guard = dialer.NewGuard(prefixes)
	return nil
}

// accessRules compiles [acl]'s rules, which may name the identity
// providers' groups, with the lists they name; none when there are none
// (every request allowed).
func (b *builder) accessRules() error {
	c := b.cfg.ACL
	if len(c.Rules) == 0 {
		return nil
	}
	rules := make([]acl.Rule, len(c.Rules))
	for i, r := range c.Rules {
		rules[i] = r.Rule()
		if err := b.withLists(fmt.Sprintf("acl.rules[%d]", i), r.Criteria, &rules[i]); err != nil {
			return err
		}
	}
	p, err := acl.New(acl.Config{Rules: rules, Groups: c.Groups, ProviderGroups: b.cfg.ProviderGroups(), Default: c.Default})
	if err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	b.rules = p
	return nil
}

// listenerRules returns the access rules of cfg.Listen[i]: the
// configuration's, in audit mode when the listener's acl_mode (or
// acl.mode) says so; nil without rules.
func (b *builder) listenerRules(i int) *acl.Policy {
	if b.rules == nil || !b.cfg.ListenerAudits(b.cfg.Listen[i]) {
		return b.rules
	}
	if b.audited == nil {
		b.audited = b.rules.Audited()
	}
	return b.audited
}

// limiter makes the limiter of [limits], whose connection limit is the
// descriptor budget's, or takes the previous generation's (with its
// counts and budget) when [limits] is unchanged. With a cluster, it adds
// the other instances' connections of each user.
func (b *builder) limiter() error {
	c := b.cfg.Limits
	if p := b.prev; p != nil && b.cfg.LimitsEqual(p.Config) {
		b.g.Limiter, b.g.Budget = p.Limiter, p.Budget
		return nil
	}
	schedules, err := b.cfg.ByteSchedules()
	if err != nil {
		return err
	}
	b.g.Budget = descriptorBudget(c)
	auth, perAddress := max(c.AuthFailures, 0), max(c.AuthFailuresPerAddress, 0) // -1 = off
	l, err := limits.New(limits.Config{
		MaxConns:               b.g.Budget.Conns,
		MaxConnsPerClient:      c.MaxConnectionsPerClient,
		MaxConnsPerUser:        c.MaxConnectionsPerUser,
		ConnRate:               float64(c.ConnectionRate),
		ConnBurst:              c.ConnectionBurst,
		AuthFailures:           auth,
		AuthFailuresPerAddress: perAddress,
		AuthWindow:             c.AuthFailureWindow.Duration,
		AuthCooldown:           c.AuthCooldown.Duration,
		UserBytesPerSecond:     int64(c.UserBytesPerSecond),
		UserBytesBurst:         int64(c.UserBytesBurst),
		Schedules:              schedules,
		Logger:                 b.log,
	})
	if err != nil {
		return fmt.Errorf("wire: %w", err)
	}
	b.g.Limiter = l
	if cl := b.env.Cluster; cl != nil {
		b.g.Limiter.SetShared(cl.Others)
	}
	return nil
}

// Budget is how the process's descriptors are shared (see
// config.Limits.DescriptorBudget).
type Budget struct {
	// OpenFiles is the soft open-file limit it was derived from.
	OpenFiles uint64
	// Conns is the connection limit; 0 = none.
	Conns int
	// Pipes are the splice pipes of every tunnel engine together.
	Pipes int
	// Asked is max_connections when Conns is lower (it was lowered to
	// what the descriptors hold), else 0.
	Asked int
}

// descriptorBudget splits the open-file limit (DefaultOpenFiles when it
// cannot be read) between connections and splice pipes as c says.
func descriptorBudget(c config.Limits) Budget {
	var nofile uint64 = DefaultOpenFiles
	if soft, _, err := OpenFileLimit(); err == nil {
		nofile = soft
	}
	conns, pipes := c.DescriptorBudget(nofile)
	b := Budget{OpenFiles: nofile, Conns: conns, Pipes: pipes}
	if _, lowered := c.Lowered(nofile); lowered {
		b.Asked = c.MaxConnections
	}
	return b
}
