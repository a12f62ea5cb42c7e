package server

import (
	"fmt"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/route"
)

// newRoutes compiles the configuration's parents and routes, each parent
// observed by its metrics series; nil when there are neither. Its probes
// start when the generation is put to use.
func (s *Server) newRoutes(cfg *config.Config, m *metrics.Metrics) (*route.Table, error) {
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
	t, err := route.New(rc)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if m != nil {
		t.Observe(func(p *route.Parent) route.Observer { return m.Parent(p.Name()) })
	}
	return t, nil
}
