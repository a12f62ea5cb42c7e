package admin

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestRing checks the samples a ring keeps: counters as rates per
// second (none in the first sample, from zero for a counter that
// appears later, none for one that went down), gauges as levels, zeros
// where a series is missing, the samples after a number, and the bound
// on samples and series.
func TestRing(t *testing.T) {
	r := newRing(4)
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r.add(at(0), map[string]float64{"req": 100}, map[string]float64{"open": 3})
	r.add(at(1), map[string]float64{"req": 110}, map[string]float64{"open": 5})
	r.add(at(1.5), map[string]float64{"req": 113, "new": 4}, nil)
	r.add(at(2.5), map[string]float64{"req": 90, "new": 4}, map[string]float64{"open": 1})

	times, series, last := r.since(0)
	ms := func(s ...float64) []int64 {
		var out []int64
		for _, v := range s {
			out = append(out, at(v).UnixMilli())
		}
		return out
	}
	if last != 4 {
		t.Errorf("last = %d, want 4", last)
	}
	if diff := cmp.Diff(ms(0, 1, 1.5, 2.5), times); diff != "" {
		t.Errorf("times (-want +got):\n%s", diff)
	}
	want := map[string][]float64{
		"req":  {0, 10, 6, 0},
		"new":  {0, 0, 8, 0},
		"open": {3, 5, 0, 1},
	}
	if diff := cmp.Diff(want, series); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}

	r.add(at(3.5), map[string]float64{"req": 100}, nil)
	times, series, last = r.since(2)
	if last != 5 || len(times) != 3 || times[0] != at(1.5).UnixMilli() || series["req"][2] != 10 {
		t.Errorf("since(2) after a fifth sample: last %d, times %v, req %v", last, times, series["req"])
	}
	if times, _, _ := r.since(0); len(times) != 4 || times[0] != at(1).UnixMilli() {
		t.Errorf("since(0) keeps %v, want the last 4 samples from 1s", times)
	}
	if times, series, last := r.since(5); len(times) != 0 || len(series["req"]) != 0 || last != 5 {
		t.Errorf("since(last) = %v %v %d, want nothing new", times, series, last)
	}

	many := make(map[string]float64)
	for i := range maxSeries + 10 {
		many[fmt.Sprint("s", i)] = float64(i)
	}
	r.add(at(4.5), many, nil)
	if _, series, _ := r.since(0); len(series) != maxSeries {
		t.Errorf("%d series kept, want the bound %d", len(series), maxSeries)
	}
}
