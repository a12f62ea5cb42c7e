package server

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/route"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
	"github.com/rustle-proxy/rustle/internal/wire"
)

// ErrRestartRequired is wrapped by Reload's error when the new
// configuration changes a setting that only a restart can apply.
var ErrRestartRequired = errors.New("needs a restart")

// generation is what one configuration builds (wire.Generation: users,
// access policy, guard, limits, and the policy and front-ends of each
// listener), with the server's own parts of it: the TLS handshake slots
// and a listener, which holds sockets, per configured listener. It is
// not changed once built. New builds the first; Reload builds the next
// and swaps it in for new connections, while each connection keeps the
// listener, and so the generation, it was accepted with.
type generation struct {
	*wire.Generation
	handshakes *handshakeSlots
	listeners  []*listener // one per Generation.Listeners, in order
}

// build makes the generation of cfg. prev, the generation in use, is nil
// at start; otherwise what cfg leaves unchanged is carried over (see
// wire.Build), and so are the TLS handshake slots when their number is
// the same.
func (s *Server) build(cfg *config.Config, prev *generation) (*generation, error) {
	var wprev *wire.Generation
	if prev != nil {
		wprev = prev.Generation
	}
	wg, err := wire.Build(cfg, &s.env, wprev)
	if err != nil {
		return nil, err
	}
	// The lists from URLs that never loaded are fetched before the
	// generation serves, within lists.timeout: a list a request meets
	// is the list, not the fail-closed stand-in of one not fetched yet.
	s.lists.Load(s.connCtx, wg.ListConfig, wg.Lists)
	g := &generation{Generation: wg}
	if n := max(1, cfg.Limits.MaxTLSHandshakes); prev != nil && prev.handshakes.size() == n {
		g.handshakes = prev.handshakes
	} else {
		g.handshakes = newHandshakeSlots(n)
	}
	for _, wl := range wg.Listeners {
		l := &listener{Listener: wl, handshakes: g.handshakes, cur: new(atomic.Pointer[listener])}
		l.cur.Store(l)
		g.listeners = append(g.listeners, l)
	}
	return g, nil
}

// useLocked makes g the server's current generation: it closes the
// previous resolver, starts the routes' probes when they are new, the
// refreshers of its lists from URLs (see lists.Registry.Use), and gives
// the engines their share of a new descriptor budget.
func (s *Server) useLocked(g *generation) {
	var prevRoutes *route.Table
	var prevBudget wire.Budget
	if prev := s.gen; prev != nil {
		prevRoutes, prevBudget = prev.Routes, prev.Budget
		if prev.Resolver != nil && prev.Resolver != g.Resolver {
			prev.Resolver.Close() // its idle DNS over HTTPS connections; the dialers that hold it still work
		}
	}
	s.gen = g
	if g.Routes != prevRoutes {
		g.Routes.Start(g.Dialer) // the previous table's probes are closed by Reload
		setParentIdle(s.pool, g.Routes)
	}
	if g.Budget != prevBudget {
		s.setPipesLocked(g.Budget)
	}
	s.lists.Use(g.ListConfig, g.Lists)
	var certStats func() metrics.CertStats
	if ic := g.Intercept; ic != nil {
		certs := ic.Certs()
		certStats = func() metrics.CertStats {
			st := certs.Stats()
			return metrics.CertStats{Cached: st.Cached, Hits: st.Hits, Mints: st.Misses, Evicted: st.Evicted}
		}
	}
	s.env.Metrics.SetCertStats(certStats)
}

// listenersLocked returns the current generation's listeners; none
// before New has built the first.
func (s *Server) listenersLocked() []*listener {
	if s.gen == nil {
		return nil
	}
	return s.gen.listeners
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
	prev, err := s.reloadable(cfg)
	if err != nil {
		return err
	}
	g, err := s.build(cfg, prev)
	if err != nil {
		return err
	}
	kept := pairListeners(prev.listeners, g.listeners)
	opened, err := s.openListeners(g, kept)
	if err != nil {
		g.Drop()
		return err
	}
	g.Guard.SetOwn(s.ownAddrs(g.listeners))
	observeRoutes(s.opts.metrics, g.Routes) // before any connection can use them
	added, removed, err := s.swap(prev, g, kept, opened)
	if err != nil {
		opened.close()
		g.Drop()
		return err
	}
	s.retire(prev, g)
	s.log.Info("configuration reloaded", "listeners", len(g.listeners),
		"added", added, "removed", removed,
		"users", g.Users, "acl_rules", len(cfg.ACL.Rules))
	s.shared.quota.SetGroups(cfg.ACL.Groups)
	s.revokeRemoved(prev, g)
	return nil
}

// reloadable returns the generation in use, or why cfg cannot replace
// it: the server is not running, or cfg changes a setting that only a
// restart applies.
func (s *Server) reloadable(cfg *config.Config) (*generation, error) {
	s.mu.Lock()
	running := s.started && !s.stopped
	prev := s.gen
	s.mu.Unlock()
	if !running {
		return nil, errors.New("server: reload: server is not running")
	}
	if err := restartOnly(prev.Config, cfg); err != nil {
		return nil, err
	}
	return prev, nil
}

// opened are the sockets a reload opened, closed again when the reload
// fails.
type opened struct {
	lns   []net.Listener
	quics []*quicSocket // for listeners with http3 on
}

func (o *opened) close() {
	closeAll(o.lns)
	for _, q := range o.quics {
		q.close()
	}
}

// openListeners gives each of g's listeners its sockets: those of the
// listener it keeps (kept, see pairListeners), whose accept loops it
// takes over, or new ones, and the QUIC socket of a listener with http3
// on that has none yet. On failure it closes what it opened.
func (s *Server) openListeners(g *generation, kept []*listener) (*opened, error) {
	o := new(opened)
	for i, l := range g.listeners {
		if ol := kept[i]; ol != nil {
			l.lns = ol.lns
			l.cur = ol.cur // what a QUIC socket opened below hands connections to
			if l.H3 != nil && ol.quic != nil {
				l.quic = ol.quic
				continue
			}
		} else {
			if err := openWithQUIC(l, func() ([]net.Listener, error) { return openSockets(l.Config, len(s.engines)) }, s.log); err != nil {
				o.close()
				return nil, err
			}
			o.lns = append(o.lns, l.lns...)
			if l.quic != nil {
				o.quics = append(o.quics, l.quic)
			}
			continue
		}
		if l.H3 != nil {
			q, err := openQUIC(l, s.log)
			if err != nil {
				o.close()
				return nil, err
			}
			l.quic = q
			o.quics = append(o.quics, q)
		}
	}
	return o, nil
}

// swap makes g the server's generation: the accept loops of the sockets
// kept hand out g's listeners from now on, the sockets of the listeners
// removed are closed (their QUIC sockets retired: their connections run
// on), and the new sockets get their accept loops. It returns how many
// listeners were added and removed, or an error when the server is
// shutting down, and then changes nothing.
func (s *Server) swap(prev, g *generation, kept []*listener, o *opened) (added, removed int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return 0, 0, errors.New("server: reload: server is shutting down")
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
	for _, ol := range prev.listeners {
		if !inUse[ol] {
			closeAll(ol.lns)
			removed++
		}
		if ol.quic != nil && !quicInUse[ol.quic] {
			ol.quic.retire() // its connections run on, then it closes
		}
	}
	s.useLocked(g)
	if g.Budget != prev.Budget {
		s.logBudget(g.Budget)
	}
	s.acceptOpenedLocked(g, kept, o)
	return len(g.listeners) - len(inUse), removed, nil
}

// acceptOpenedLocked starts the accept loops of the sockets o that a
// reload opened for g's listeners (kept: those that took over sockets).
func (s *Server) acceptOpenedLocked(g *generation, kept []*listener, o *opened) {
	s.quics = append(s.quics, o.quics...)
	for _, q := range o.quics {
		for _, l := range g.listeners {
			if l.quic == q {
				s.accepts.Add(1)
				go s.acceptQUIC(q, l.cur)
			}
		}
	}
	for i, l := range g.listeners {
		if kept[i] != nil {
			continue
		}
		for w, ln := range l.lns {
			s.accepts.Add(1)
			go s.acceptLoop(ln, l.cur, s.engines[w])
		}
		s.log.Info("listening", "listener", l.Config.Name, "protocol", l.Config.Protocol,
			"addr", l.lns[0].Addr().String(), "auth", g.Config.EffectiveAuth(l.Config), "workers", len(l.lns))
	}
}

// retire lets go of what prev had and g no longer uses, once g is in
// use.
func (s *Server) retire(prev, g *generation) {
	// The new guard decides at once for the connections accepted before
	// the reload too (their dialers hold the old one), and the pooled
	// upstreams it no longer lets through are closed: tightening
	// allow_private takes effect on every reuse and every dial.
	prev.Guard.Supersede(g.Guard)
	// Connections keep the routes and parents they were given; only the
	// previous table's probes stop (but those of the parents carried
	// over, which the new table runs on), and the series of the parents
	// the reload removed are deleted.
	prev.Routes.Close()
	forgetRemoved(s.opts.metrics, prev.Routes, g.Routes)
	if s.pool != nil {
		n := s.pool.Retain(func(c *net.TCPConn) bool {
			a, ok := c.RemoteAddr().(*net.TCPAddr)
			return ok && g.Guard.Check(a.AddrPort(), false) == nil
		})
		if n > 0 {
			s.log.Info("pooled upstream connections closed: the reloaded guard refuses them", "count", n)
		}
	}
	// Connections already past their handshake keep working when their
	// TLS manager stops rotating ticket keys.
	keepTLS := make(map[*tlsconf.Manager]bool)
	for _, l := range g.listeners {
		keepTLS[l.TLS] = true
	}
	for _, ol := range prev.listeners {
		if ol.TLS != nil && !keepTLS[ol.TLS] {
			ol.TLS.Close()
		}
	}
	// The previous front-ends get no new connections: their idle stream
	// workers end now (those they still serve go on without reuse).
	closeFrontEnds(prev.listeners)
}

// closeFrontEnds lets the idle stream workers of the listeners' HTTP/2
// and HTTP/3 servers go, and waits for them.
func closeFrontEnds(ls []*listener) {
	for _, l := range ls {
		if l.H2 != nil {
			l.H2.Close()
		}
		if l.H3 != nil {
			l.H3.Close()
		}
	}
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
				if !taken[j] && same(ol.Config, nl.Config) {
					kept[i], taken[j] = ol, true
					break
				}
			}
		}
	}
	// A tproxy listener's sockets are IP_TRANSPARENT, the others' not.
	match(func(o, n config.Listener) bool { return o.Name == n.Name && o.Address == n.Address && o.Mode == n.Mode })
	match(func(o, n config.Listener) bool { return o.Address == n.Address && o.Mode == n.Mode })
	return kept
}

// openSockets opens a listener's sockets, one per worker, all on the
// port the first one gets.
func openSockets(lc config.Listener, workers int) ([]net.Listener, error) {
	addr := lc.Address
	var lns []net.Listener
	for w := 0; w < workers; w++ {
		ln, err := listenReusePort(addr, lc.Mode == config.ModeTProxy)
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
			old = prev.Auth
		}
		cur := after[listener]
		if cur == nil {
			cur = g.Auth
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
		if l.Policy.Auth != nil {
			m[l.Config.Name] = l.Policy.Auth
		}
	}
	return m
}
