package server

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
)

// TestRegisterMetrics checks that the pool and tunnel series appear once
// a server is registered, and that a server without a pool reports only
// tunnels.
func TestRegisterMetrics(t *testing.T) {
	for _, tt := range []struct {
		name     string
		perHost  int
		wantPool bool
	}{
		{"pool", 0, true},
		{"no keep-alive", -1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Workers = 1
			cfg.Upstream.MaxIdlePerHost = tt.perHost
			cfg.SetDefaults()
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			s, err := New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			m := metrics.New(metrics.Config{})
			s.RegisterMetrics(m)
			s.RegisterMetrics(nil)
			fams, err := m.Gatherer().Gather()
			if err != nil {
				t.Fatal(err)
			}
			have := make(map[string]float64)
			for _, f := range fams {
				if len(f.GetMetric()) == 1 {
					mm := f.GetMetric()[0]
					have[f.GetName()] = mm.GetGauge().GetValue() + mm.GetCounter().GetValue()
				}
			}
			if v, ok := have["rustle_tunnels_open"]; !ok || v != 0 {
				t.Errorf("rustle_tunnels_open = %v (present %v), want 0", v, ok)
			}
			for _, name := range []string{"rustle_upstream_pool_hits_total", "rustle_upstream_pool_misses_total", "rustle_upstream_pool_idle_connections"} {
				if _, ok := have[name]; ok != tt.wantPool {
					t.Errorf("%s present = %v, want %v", name, ok, tt.wantPool)
				}
			}
		})
	}
}
