package server

import (
	"fmt"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/route"
)

// newRoutes compiles the configuration's parents and routes, each parent
// observed by its metrics series; nil when there are neither. The parents
// of prev (the table in use; nil at start) with the same name and URL are
// carried over with their health (see route.NewAfter). Its probes start
// when the generation is put to use.
func newRoutes(cfg *config.Config, m *metrics.Metrics, prev *route.Table) (*route.Table, error) {
	if len(cfg.Parents) == 0 && len(cfg.Routes) == 0 {
		return nil, nil
	}
	t, err := route.NewAfter(cfg.RouteConfig(), prev)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if m != nil {
		t.Observe(func(p *route.Parent) route.Observer { return m.Parent(p.Name()) })
	}
	return t, nil
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
