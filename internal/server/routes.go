package server

import (
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/route"
)

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
	g := s.gen
	s.mu.Unlock()
	return g == nil || !g.Config.ReadyRequiresParents || g.Routes.Healthy(time.Now())
}
