package server

import "github.com/rustle-proxy/rustle/internal/metrics"

// RegisterMetrics makes m read, on each scrape, the upstream pool's hits,
// misses and idle connections and the number of open tunnels. Call it
// once, after New; a nil m is ignored.
func (s *Server) RegisterMetrics(m *metrics.Metrics) {
	if m == nil {
		return
	}
	if p := s.pool; p != nil {
		m.SetPoolStats(func() metrics.PoolStats {
			hits, misses := p.Stats()
			return metrics.PoolStats{Hits: hits, Misses: misses, Idle: p.Len()}
		})
	}
	m.SetTunnelsOpen(s.Tunnels)
	s.registerQuotaMetrics(m)
}
