package server

import (
	"fmt"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/route"
)

// newRoutes compiles the configuration's parents and routes, with the
// routes' own egress sources and resolvers; nil when there are neither.
// The parents of prev (the table in use; nil at start) with the same name
// and URL are carried over with their health (see route.NewAfter). Its
// metrics series (observeRoutes, called once the build is sure to be
// used, before any connection uses it) and probes start when the
// generation is put to use, so that a build that is dropped leaves no
// series behind.
func (s *Server) newRoutes(cfg *config.Config, prev *route.Table) (*route.Table, error) {
	if len(cfg.Parents) == 0 && len(cfg.Routes) == 0 {
		return nil, nil
	}
	rc := cfg.RouteConfig()
	for i, r := range cfg.Routes {
		key := fmt.Sprintf("routes[%d]", i)
		if e := r.Egress; e.Set() {
			src, err := newSource(cfg, key+".egress", dialer.SourceConfig{Bind: e.Bind, Interface: e.Interface, Freebind: e.Freebind})
			if err != nil {
				return nil, err
			}
			rc.Routes[i].Source = src
		}
		if len(r.Resolvers) > 0 {
			res, err := s.buildResolver(cfg, key+".resolvers", r.Resolvers)
			if err != nil {
				return nil, err
			}
			rc.Routes[i].Resolver = res
		}
	}
	t, err := route.NewAfter(rc, prev)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	return t, nil
}

// observeRoutes gives each of t's parents its metrics series (a parent
// carried over keeps the one it has); nil m or t: nothing to do.
func observeRoutes(m *metrics.Metrics, t *route.Table) {
	if m == nil || t == nil {
		return
	}
	t.Observe(func(p *route.Parent) route.Observer { return m.Parent(p.Name()) })
}

// forgetRemoved deletes the metrics series of prev's parents that cur
// (nil = none) has no parent of that name for.
func forgetRemoved(m *metrics.Metrics, prev, cur *route.Table) {
	if m == nil || prev == nil {
		return
	}
	for _, p := range prev.Parents() {
		if cur.Parent(p.Name()) == nil {
			m.ForgetParent(p.Name())
		}
	}
}

// setParentIdle gives the pooled connections to each of t's parents
// (pooled under gate.ForwardKey) the parent's idle_timeout; t nil = no
// parents. A nil pool keeps nothing.
func setParentIdle(pool *dialer.Pool, t *route.Table) {
	if pool == nil {
		return
	}
	m := make(map[string]time.Duration)
	for _, p := range t.Parents() {
		if d := p.IdleTimeout(); d > 0 {
			m[string(gate.ForwardKey(nil, p))] = d
		}
	}
	pool.SetKeyIdleTimeouts(m)
}

// ParentsReady reports whether the routes let the server take traffic,
// for /readyz: true unless the configuration sets ready_requires_parents
// and a route through parents has none up (and no direct fallback).
func (s *Server) ParentsReady() bool {
	s.mu.Lock()
	cfg, t := s.cfg, s.routes
	s.mu.Unlock()
	return cfg == nil || !cfg.ReadyRequiresParents || t.Healthy(time.Now())
}
