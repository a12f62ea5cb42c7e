package server

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/resolve"
	"github.com/rustle-proxy/rustle/internal/route"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
)

// ErrRestartRequired is wrapped by Reload's error when the new
// configuration changes a setting that only a restart can apply.
var ErrRestartRequired = errors.New("needs a restart")

// generation is what one configuration builds: users, access policy,
// guard, limits and one listener (proxy, SOCKS and HTTP/2 servers) per
// configured listener. It is not changed once built. New builds the
// first; Reload builds the next and swaps it in for new connections,
// while each connection keeps the listener, and so the generation, it was
// accepted with.
type generation struct {
	cfg        *config.Config
	guard      *dialer.Guard
	lim        *limits.Limiter
	budget     budget              // the descriptors' split, lim's connection limit
	authr      *auth.Authenticator // the users; nil = none configured
	handshakes *handshakeSlots
	listeners  []*listener
	resolver   *resolve.Resolver  // the [dns] resolver; nil = the system's
	users      int                // the number of users, inline and from files
	names      []string           // the names of the users, inline and from files
	created    []*tlsconf.Manager // TLS managers this build made rather than took from the previous generation
	routes     *route.Table       // nil = no parents or routes
	dialer     *dialer.Dialer     // what the routes' probes dial parents with
}

// build makes the generation of cfg. prev, the generation in use, is nil
// at start; otherwise its limiter, TLS handshake slots and TLS managers
// are carried over where cfg leaves their settings unchanged, and the
// certificates of carried-over TLS managers are re-read.
func (s *Server) build(cfg *config.Config, prev *generation) (*generation, error) {
	g := &generation{cfg: cfg}
	var authr *auth.Authenticator
	if cfg.HasUsers() {
		a, err := auth.New(auth.Config{
			Realm:     cfg.Auth.Realm,
			Files:     cfg.Auth.Htpasswd,
			Users:     localUsers(cfg),
			CacheTTL:  cfg.Auth.CacheTTL.Duration,
			CacheSize: cfg.Auth.CacheSize,
		})
		if err != nil {
			return nil, fmt.Errorf("server: load users: %w", err)
		}
		authr = a
		g.authr = a
		g.users = a.Len()
		if s.shared.cluster != nil { // published when a reload removes them
			g.names = userNames(cfg)
		}
	}

	providers, err := newProviders(cfg, s.log)
	if err != nil {
		return nil, err
	}
	chains := make(map[string]*auth.Authenticator) // by the providers they try

	guard, err := newGuard(cfg.AllowPrivate)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	policy, err := newPolicy(cfg.ACL, cfg.ProviderGroups())
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	g.guard = guard
	if prev != nil && prev.cfg.Limits == cfg.Limits {
		g.lim, g.budget = prev.lim, prev.budget
	} else {
		g.budget = descriptorBudget(cfg.Limits)
		g.lim = newLimiter(cfg.Limits, g.budget.conns, s.log)
		if cl := s.shared.cluster; cl != nil {
			g.lim.SetShared(cl.Others)
		}
	}
	if n := max(1, cfg.Limits.MaxTLSHandshakes); prev != nil && prev.handshakes.size() == n {
		g.handshakes = prev.handshakes
	} else {
		g.handshakes = newHandshakeSlots(n)
	}
	res, err := s.newResolver(cfg, prev)
	if err != nil {
		return nil, err
	}
	g.resolver = res
	dc := dialer.Config{
		Timeout:           cfg.Timeouts.Connect.Duration,
		SocketBufferBytes: cfg.SocketBufferBytes,
		Guard:             guard,
	}
	if res != nil {
		dc.Resolver = res
	}
	d := dialer.New(dc)
	egress, err := newEgress(cfg)
	if err != nil {
		return nil, err
	}
	var prevRoutes *route.Table
	if prev != nil {
		prevRoutes = prev.routes
	}
	if g.routes, err = s.newRoutes(cfg, prevRoutes); err != nil {
		return nil, err
	}
	g.dialer = d

	// TLS managers of the previous generation, by their settings.
	reuse := make(map[tlsKey][]*tlsconf.Manager)
	if prev != nil {
		for _, l := range prev.listeners {
			if l.tls != nil {
				k := tlsKeyOf(l.cfg)
				reuse[k] = append(reuse[k], l.tls)
			}
		}
	}
	o := s.opts
	for i, lc := range cfg.Listen {
		log := s.log.With("listener", lc.Name)
		pc := httpproxy.Config{
			Forwarded:             cfg.Forwarded,
			Via:                   cfg.Via,
			MaxHeaderBytes:        cfg.MaxHeaderBytes,
			ReadHeaderTimeout:     cfg.Timeouts.ReadHeader.Duration,
			ResponseHeaderTimeout: cfg.Timeouts.ResponseHeader.Duration,
			IdleTimeout:           cfg.Timeouts.IdleClient.Duration,
			WriteTimeout:          cfg.Timeouts.Write.Duration,
			SocketBufferBytes:     cfg.SocketBufferBytes,
			Logger:                log,
		}
		gp := &gate.Policy{
			Listener:   lc.Name,
			ACL:        policy,
			Limiter:    g.lim,
			Dialer:     d,
			Pool:       s.pool,
			Routes:     g.routes,
			Metrics:    o.metrics.Listener(lc.Name, lc.Protocol),
			AccessLog:  o.access,
			TunnelIdle: cfg.Timeouts.IdleTunnel.Duration,
			Logger:     log,
			Revoked:    s.revoked,
			Cut:        s.cutCtx,
			Quota:      s.shared.quota,
			Instance:   s.instance,
		}
		if o.metrics != nil {
			gp.UserMetrics = o.metrics.User
		}
		if gp.Egress, err = listenerEgress(cfg, i, egress); err != nil {
			g.closeCreated()
			return nil, err
		}
		if cfg.EffectiveAuth(lc) == config.AuthBasic {
			a, err := listenerAuth(cfg, i, authr, providers, chains)
			if err != nil {
				g.closeCreated()
				return nil, err
			}
			gp.Auth = a
		}
		hp, err := httpproxy.New(pc)
		if err != nil {
			g.closeCreated()
			return nil, fmt.Errorf("server: listener %s: %w", lc.Name, err)
		}
		l := &listener{cfg: lc, policy: gp, lm: gp.Metrics, proxy: hp, peek: cfg.Timeouts.ReadHeader.Duration,
			hello:      cfg.Timeouts.ClientHello.Duration,
			quicRetry:  cfg.HTTP3.RetryThreshold,
			handshakes: g.handshakes, lim: g.lim, cur: new(atomic.Pointer[listener])}
		l.cur.Store(l)
		for _, e := range lc.ProxyProtocolFrom {
			p, err := acl.ParsePrefix(e)
			if err != nil {
				g.closeCreated()
				return nil, fmt.Errorf("server: listener %s: proxy_protocol_from: %w", lc.Name, err)
			}
			l.ppFrom = append(l.ppFrom, p)
		}
		switch lc.Protocol {
		case "socks5", "mixed":
			l.socks = newSOCKS(cfg, log)
		case "https":
			if k := tlsKeyOf(lc); len(reuse[k]) > 0 {
				ms := reuse[k]
				l.tls, reuse[k] = ms[0], ms[1:]
				if err := l.tls.Reload(); err != nil {
					g.closeCreated()
					return nil, fmt.Errorf("server: listener %s: %w", lc.Name, err)
				}
			} else {
				m, err := newTLS(lc, log)
				if err != nil {
					g.closeCreated()
					return nil, fmt.Errorf("server: listener %s: %w", lc.Name, err)
				}
				l.tls = m
				g.created = append(g.created, m)
			}
			alpn := lc.EffectiveALPN()
			l.http1 = slices.Contains(alpn, config.ALPNHTTP1)
			if slices.Contains(alpn, config.ALPNH2) {
				if l.h2, err = newH2(cfg, pc); err != nil {
					g.closeCreated()
					return nil, fmt.Errorf("server: listener %s: %w", lc.Name, err)
				}
			}
			if lc.HTTP3 {
				if l.h3, err = newH3(cfg, pc); err != nil {
					g.closeCreated()
					return nil, fmt.Errorf("server: listener %s: %w", lc.Name, err)
				}
			}
		}
		g.listeners = append(g.listeners, l)
	}
	return g, nil
}

// listenerAuth returns the authenticator of cfg.Listen[i], a listener
// that authenticates: its -L URL's user alone, or its identity providers
// (see config.ListenerProviders) in order, with the configured users
// (authr) its users key names, or every configured user, where "local"
// stands among them.
func listenerAuth(cfg *config.Config, i int, authr *auth.Authenticator, providers map[string]auth.Provider,
	chains map[string]*auth.Authenticator) (*auth.Authenticator, error) {
	lc := cfg.Listen[i]
	if names := cfg.ListenerProviders(lc); lc.URLUser == nil && !(len(names) == 1 && names[0] == config.LocalProvider) {
		if len(names) == 0 {
			return nil, fmt.Errorf("server: listener %s requires basic auth but no users are configured", lc.Name)
		}
		a, err := chainAuth(cfg, names, authr, providers, chains)
		if err != nil {
			return nil, fmt.Errorf("server: listener %s: %w", lc.Name, err)
		}
		if len(lc.Users) > 0 {
			if err := knownUsers(cfg, i, authr); err != nil {
				return nil, err
			}
			return a.Only(lc.Users), nil
		}
		return a, nil
	}
	switch {
	case lc.URLUser != nil:
		u := lc.URLUser
		a, err := auth.New(auth.Config{
			Realm:     cfg.Auth.Realm,
			Users:     []auth.User{{Name: u.Name, Password: u.Password, Bcrypt: u.Bcrypt}},
			CacheTTL:  cfg.Auth.CacheTTL.Duration,
			CacheSize: cfg.Auth.CacheSize,
		})
		if err != nil {
			return nil, fmt.Errorf("server: listener %s: load its user: %w", lc.Name, err)
		}
		return a, nil
	case authr == nil:
		return nil, fmt.Errorf("server: listener %s requires basic auth but no users are configured", lc.Name)
	case len(lc.Users) > 0:
		if err := knownUsers(cfg, i, authr); err != nil {
			return nil, err
		}
		return authr.Only(lc.Users), nil
	}
	return authr, nil
}

// knownUsers checks that the users key of cfg.Listen[i] names users of
// authr, the configured users.
func knownUsers(cfg *config.Config, i int, authr *auth.Authenticator) error {
	lc := cfg.Listen[i]
	for j, name := range lc.Users {
		if !authr.Has(name) {
			return fmt.Errorf("server: listener %s: %w", lc.Name, cfg.KeyError(fmt.Sprintf("listen[%d].users[%d]", i, j),
				fmt.Errorf("user %q is neither in [[auth.users]] nor in an auth.htpasswd file", name)))
		}
	}
	return nil
}

// Check loads what cfg names, as New would: the users and their files,
// the access rules, the private ranges and the https listeners'
// certificates. It starts nothing (no listener, worker or engine) and
// releases all it loaded before returning: nil, or the error New would
// have returned.
func Check(cfg *config.Config) error {
	s := &Server{log: slog.New(slog.DiscardHandler), revoked: new(gate.Registry)}
	g, err := s.build(cfg, nil)
	if err != nil {
		return err
	}
	g.closeCreated()
	if g.resolver != nil {
		g.resolver.Close()
	}
	return nil
}

// tlsKey is what a TLS manager is made from: a listener's TLS files,
// the ALPN protocols and the key exchanges it offers, joined with commas.
type tlsKey struct {
	tls       config.ListenerTLS
	alpn, kex string
}

func tlsKeyOf(lc config.Listener) tlsKey {
	return tlsKey{lc.TLS, strings.Join(lc.EffectiveALPN(), ","), strings.Join(lc.KeyExchanges, ",")}
}

// closeCreated closes the TLS managers g made, when g is dropped.
func (g *generation) closeCreated() {
	for _, m := range g.created {
		m.Close()
	}
}

// useLocked makes g the server's current generation.
func (s *Server) useLocked(g *generation) {
	s.cfg, s.guard, s.lim, s.handshakes, s.users, s.userNames = g.cfg, g.guard, g.lim, g.handshakes, g.authr, g.names
	if s.resolver != nil && s.resolver != g.resolver {
		s.resolver.Close() // its idle DNS over HTTPS connections; the dialers that hold it still work
	}
	s.resolver = g.resolver
	s.listeners = g.listeners
	if g.routes != s.routes {
		s.routes = g.routes
		g.routes.Start(g.dialer) // the previous table's probes are closed by Reload
		setParentIdle(s.pool, g.routes)
	}
	if g.budget != s.budget {
		s.budget = g.budget
		s.setPipesLocked(g.budget)
	}
}

// currentLocked returns the server's current generation.
func (s *Server) currentLocked() *generation {
	return &generation{cfg: s.cfg, guard: s.guard, lim: s.lim, budget: s.budget, authr: s.users,
		handshakes: s.handshakes, listeners: s.listeners, resolver: s.resolver, routes: s.routes,
		names: s.userNames}
}

// Reload swaps in cfg, a validated configuration, for the connections
// accepted from now on; connections in progress keep the configuration
// they were accepted with until they end, except that the sessions and
// tunnels of users that cfg removes are ended. It re-reads the users files and
// the certificates of https listeners and rebuilds the access policy,
// guard, limits, timeouts and proxy settings. A listener whose address is
// unchanged keeps its sockets (listeners are matched by name and address,
// then by address alone); a new one is opened and a removed one closed.
//
// When cfg cannot be applied (a users or certificate file does not load,
// a new address cannot be bound, or a setting that only a restart can
// change differs: see config.RestartChange) Reload
// returns why, wrapping ErrRestartRequired in the last case, and the
// server goes on with the configuration it had. Certificates of unchanged
// https listeners may have been re-read by then. The [limits] counters
// start afresh when [limits] changes. Reload calls are serialized; it is
// an error to call Reload before Start or after Shutdown or Close.
func (s *Server) Reload(cfg *config.Config) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	s.mu.Lock()
	running := s.started && !s.stopped
	prev := s.currentLocked()
	s.mu.Unlock()
	if !running {
		return errors.New("server: reload: server is not running")
	}
	if err := restartOnly(prev.cfg, cfg); err != nil {
		return err
	}
	g, err := s.build(cfg, prev)
	if err != nil {
		return err
	}

	// Keep the sockets of unchanged addresses; open the new ones.
	kept := pairListeners(prev.listeners, g.listeners)
	var opened []net.Listener
	var openedQUIC []*quicSocket // sockets this reload opened, for listeners with http3 on
	fail := func(err error) error {
		closeAll(opened)
		for _, q := range openedQUIC {
			q.close()
		}
		g.closeCreated()
		return err
	}
	for i, l := range g.listeners {
		if ol := kept[i]; ol != nil {
			l.lns = ol.lns
			l.cur = ol.cur // what a QUIC socket opened below hands connections to
			if l.h3 != nil && ol.quic != nil {
				l.quic = ol.quic
				continue
			}
		} else {
			lns, err := openSockets(l.cfg, len(s.engines))
			if err != nil {
				return fail(err)
			}
			l.lns = lns
			opened = append(opened, lns...)
		}
		if l.h3 != nil {
			q, err := openQUIC(l, s.log)
			if err != nil {
				return fail(err)
			}
			l.quic = q
			openedQUIC = append(openedQUIC, q)
		}
	}
	g.guard.SetOwn(s.ownAddrs(g.listeners))
	observeRoutes(s.opts.metrics, g.routes) // before any connection can use them

	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return fail(errors.New("server: reload: server is shutting down"))
	}
	inUse := make(map[*listener]bool)
	quicInUse := make(map[*quicSocket]bool)
	for i, l := range g.listeners {
		if ol := kept[i]; ol != nil {
			inUse[ol] = true
			l.cur = ol.cur
			l.cur.Store(l) // accept loops on these sockets now hand out l
		}
		if l.quic != nil {
			quicInUse[l.quic] = true
		}
	}
	removed := 0
	for _, ol := range prev.listeners {
		if !inUse[ol] {
			closeAll(ol.lns)
			removed++
		}
		if ol.quic != nil && !quicInUse[ol.quic] {
			ol.quic.retire() // its connections run on, then it closes
		}
	}
	s.quics = append(s.quics, openedQUIC...)
	for _, q := range openedQUIC {
		for _, l := range g.listeners {
			if l.quic == q {
				s.accepts.Add(1)
				go s.acceptQUIC(q, l.cur)
			}
		}
	}
	budgetChanged := g.budget != prev.budget
	s.useLocked(g)
	if budgetChanged {
		s.logBudget(g.budget)
	}
	for i, l := range g.listeners {
		if kept[i] != nil {
			continue
		}
		for w, ln := range l.lns {
			s.accepts.Add(1)
			go s.acceptLoop(ln, l.cur, s.engines[w])
		}
		s.log.Info("listening", "listener", l.cfg.Name, "protocol", l.cfg.Protocol,
			"addr", l.lns[0].Addr().String(), "auth", cfg.EffectiveAuth(l.cfg), "workers", len(l.lns))
	}
	s.mu.Unlock()

	// The new guard decides at once for the connections accepted before
	// the reload too (their dialers hold the old one), and the pooled
	// upstreams it no longer lets through are closed: tightening
	// allow_private takes effect on every reuse and every dial.
	prev.guard.Supersede(g.guard)
	// Connections keep the routes and parents they were given; only the
	// previous table's probes stop (but those of the parents carried
	// over, which the new table runs on), and the series of the parents
	// the reload removed are deleted.
	prev.routes.Close()
	forgetRemoved(s.opts.metrics, prev.routes, g.routes)
	if s.pool != nil {
		n := s.pool.Retain(func(c *net.TCPConn) bool {
			a, ok := c.RemoteAddr().(*net.TCPAddr)
			return ok && g.guard.Check(a.AddrPort(), false) == nil
		})
		if n > 0 {
			s.log.Info("pooled upstream connections closed: the reloaded guard refuses them", "count", n)
		}
	}

	// Connections already past their handshake keep working when their
	// TLS manager stops rotating ticket keys.
	keepTLS := make(map[*tlsconf.Manager]bool)
	for _, l := range g.listeners {
		keepTLS[l.tls] = true
	}
	for _, ol := range prev.listeners {
		if ol.tls != nil && !keepTLS[ol.tls] {
			ol.tls.Close()
		}
	}
	s.log.Info("configuration reloaded", "listeners", len(g.listeners),
		"added", len(g.listeners)-len(inUse), "removed", removed,
		"users", g.users, "acl_rules", len(cfg.ACL.Rules))
	s.shared.quota.SetGroups(cfg.ACL.Groups)
	s.revokeRemoved(prev, g)
	return nil
}

// restartOnly returns an error wrapping ErrRestartRequired when cfg
// changes a setting of old that only a restart applies (see
// config.RestartChange).
func restartOnly(old, cfg *config.Config) error {
	if c := config.RestartChange(old, cfg); c != "" {
		return fmt.Errorf("server: reload: %s: %w", c, ErrRestartRequired)
	}
	return nil
}

// pairListeners returns, for each of the new listeners, the old one
// whose sockets it takes over, or nil when it needs sockets of its own:
// first an old listener with the same name and address, then one with
// the same address, in order.
func pairListeners(old, new []*listener) []*listener {
	taken := make([]bool, len(old))
	kept := make([]*listener, len(new))
	match := func(same func(o, n config.Listener) bool) {
		for i, nl := range new {
			if kept[i] != nil {
				continue
			}
			for j, ol := range old {
				if !taken[j] && same(ol.cfg, nl.cfg) {
					kept[i], taken[j] = ol, true
					break
				}
			}
		}
	}
	match(func(o, n config.Listener) bool { return o.Name == n.Name && o.Address == n.Address })
	match(func(o, n config.Listener) bool { return o.Address == n.Address })
	return kept
}

// openSockets opens a listener's sockets, one per worker, all on the
// port the first one gets.
func openSockets(lc config.Listener, workers int) ([]net.Listener, error) {
	addr := lc.Address
	var lns []net.Listener
	for w := 0; w < workers; w++ {
		ln, err := listenReusePort(addr)
		if err != nil {
			closeAll(lns)
			return nil, fmt.Errorf("server: listen %s on %s: %w", lc.Name, lc.Address, err)
		}
		if w == 0 {
			addr = ln.Addr().String() // the other workers bind the same port
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

func closeAll(lns []net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}

// revokeRemoved ends the connections, tunnels, streams and SOCKS
// sessions that prev's users had and g takes away: a reload that removes
// a user (or its users-file line), or takes a user off a listener's users
// list, ends the user's access there at once, not when its connections
// happen to close. On each listener, by name, a user is revoked whom
// prev's authenticator of the listener accepted and g's does not, or whom
// g's does not allow at all (a client certificate's user left out of the
// listener's users list); a listener that g has not, or that does not
// authenticate in g, is judged by g's configured users. A user named only
// by a client certificate, on a listener without a users list, is in
// neither and keeps its connections; so does, on a listener with identity
// providers, every user the configured users do not have (a provider's
// user, or a certificate's: they are not told apart).
func (s *Server) revokeRemoved(prev, g *generation) {
	before, after := listenerAuths(prev.listeners), listenerAuths(g.listeners)
	var names, listeners []string
	n := s.revoked.Revoke(func(listener, user string) bool {
		old := before[listener]
		if old == nil {
			old = prev.authr
		}
		cur := after[listener]
		if cur == nil {
			cur = g.authr
		}
		// A user a provider vouched for is not cur's to disallow: Allows
		// judges only names without a password (client certificates), and
		// on a listener with providers those are not told apart from the
		// providers' users, so they are left to their next connection.
		if old.Has(user) && !cur.Has(user) || !cur.Allows(user) && !cur.HasProviders() {
			names, listeners = append(names, user), append(listeners, listener)
			return false
		}
		return true
	})
	if n > 0 {
		slices.Sort(names)
		slices.Sort(listeners)
		names = slices.Compact(names)
		s.log.Info("access revoked: users removed by the reload", "users", strings.Join(names, ","), "count", n,
			"listeners", strings.Join(slices.Compact(listeners), ","))
	}
	s.publishRevoked(s.removedUsers(prev, g, names))
}

// listenerAuths returns the authenticator of each listener that
// authenticates, by name.
func listenerAuths(ls []*listener) map[string]*auth.Authenticator {
	m := make(map[string]*auth.Authenticator, len(ls))
	for _, l := range ls {
		if l.policy.Auth != nil {
			m[l.cfg.Name] = l.policy.Auth
		}
	}
	return m
}
