package proxytest

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/metrics"
)

// Metric returns the sum over the series of the metric family name in m
// whose labels include labels (name, value pairs): a counter's or a
// gauge's value, a histogram's sample count; 0 when no series matches.
func Metric(t testing.TB, m *metrics.Metrics, name string, labels ...string) float64 {
	t.Helper()
	fams, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatalf("proxytest: gather metrics: %v", err)
	}
	var sum float64
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	series:
		for _, s := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range s.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
						break
					}
				}
				if !found {
					continue series
				}
			}
			switch {
			case s.GetCounter() != nil:
				sum += s.GetCounter().GetValue()
			case s.GetGauge() != nil:
				sum += s.GetGauge().GetValue()
			case s.GetHistogram() != nil:
				sum += float64(s.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}
