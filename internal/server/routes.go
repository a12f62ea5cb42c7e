package server

import (
	"fmt"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/route"
)

// newRoutes compiles the configuration's parents and routes, each parent
// observed by its metrics series; nil when there are neither. Its probes
// start when the generation is put to use.
func newRoutes(cfg *config.Config, m *metrics.Metrics) (*route.Table, error) {
	if len(cfg.Parents) == 0 && len(cfg.Routes) == 0 {
		return nil, nil
	}
	t, err := route.New(cfg.RouteConfig())
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if m != nil {
		t.Observe(func(p *route.Parent) route.Observer { return m.Parent(p.Name()) })
	}
	return t, nil
}
