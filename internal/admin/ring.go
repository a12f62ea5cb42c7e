package admin

import (
	"math"
	"slices"
	"strconv"
	"sync"
	"time"
)

// maxSeries bounds the series a ring keeps; a name past it is not
// kept. The names are protocols, directions and access log reasons: a
// few dozen at most.
const maxSeries = 64

// ring keeps the last size samples of named per-second series: rates of
// counters (the increase since the previous sample, per second) and
// levels of gauges. Its memory is bounded: size samples of at most
// maxSeries series, allocated as a series first appears. It is safe for
// concurrent use.
type ring struct {
	mu       sync.Mutex
	size     int
	seq      uint64               // samples added so far; sample n (from 1) is at index (n-1)%size; guarded by mu
	at       []int64              // Unix milliseconds of each sample; guarded by mu
	series   map[string][]float32 // guarded by mu
	prev     map[string]float64   // each counter's value at the previous sample; guarded by mu
	prevAt   time.Time            // guarded by mu
	complete bool                 // prev holds a sample; guarded by mu
}

func newRing(size int) *ring {
	return &ring{size: size, at: make([]int64, size), series: make(map[string][]float32), prev: make(map[string]float64)}
}

// add records a sample taken at now: counters are cumulative values (a
// rate is recorded: the increase since the previous sample per second,
// from 0 for a counter that appears after the first sample; 0 in the
// first sample and for a counter that went down), gauges are levels. A
// series missing from a sample records 0 in it. Rates are rounded to
// thousandths.
func (r *ring) add(now time.Time, counters, gauges map[string]float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	idx := int(r.seq % uint64(r.size))
	r.seq++
	r.at[idx] = now.UnixMilli()
	for _, v := range r.series {
		v[idx] = 0
	}
	// Over the times as kept, to the millisecond: rate times the time
	// between two samples is the count between them.
	secs := float64(now.UnixMilli()-r.prevAt.UnixMilli()) / 1000
	for name, v := range counters {
		p := r.prev[name] // 0 for a counter that appears after the first sample
		if r.complete && secs > 0 && v > p {
			r.set(name, idx, (v-p)/secs)
		} else {
			r.set(name, idx, 0)
		}
		if _, ok := r.series[name]; ok {
			r.prev[name] = v
		}
	}
	for name, v := range gauges {
		r.set(name, idx, v)
	}
	r.prevAt, r.complete = now, true
}

// set sets series name at idx, making the series if there is room.
func (r *ring) set(name string, idx int, v float64) {
	s, ok := r.series[name]
	if !ok {
		if len(r.series) >= maxSeries {
			return
		}
		s = make([]float32, r.size)
		r.series[name] = s
	}
	s[idx] = float32(math.Round(v*1000) / 1000)
}

// since returns the samples after sample number after (0: every sample
// kept), oldest first: their times (Unix milliseconds), each series'
// values over them, and the number of the last sample.
func (r *ring) since(after uint64) (times []int64, series map[string][]float64, last uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	first := after + 1
	if r.seq > uint64(r.size) && first < r.seq-uint64(r.size)+1 {
		first = r.seq - uint64(r.size) + 1
	}
	series = make(map[string][]float64, len(r.series))
	if first > r.seq {
		return []int64{}, series, r.seq
	}
	n := int(r.seq - first + 1)
	times = make([]int64, 0, n)
	names := make([]string, 0, len(r.series))
	for name := range r.series {
		names = append(names, name)
		series[name] = make([]float64, 0, n)
	}
	slices.Sort(names)
	for k := first; k <= r.seq; k++ {
		idx := int((k - 1) % uint64(r.size))
		times = append(times, r.at[idx])
		for _, name := range names {
			series[name] = append(series[name], round32(r.series[name][idx]))
		}
	}
	return times, series, r.seq
}

// round32 returns v as the float64 of its shortest decimal form, so that
// JSON shows 11, not 11.000000953674316.
func round32(v float32) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(v), 'g', -1, 32), 64)
	return f
}
