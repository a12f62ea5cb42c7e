package report

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// Median returns the median of xs (the mean of the two middle values when
// len(xs) is even) and false when xs is empty. xs is not modified.
func Median(xs []float64) (float64, bool) {
	if len(xs) == 0 {
		return 0, false
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2], true
	}
	return (s[n/2-1] + s[n/2]) / 2, true
}

// Level is the outcome of one concurrency level of one test and proxy.
type Level struct {
	Conns int
	// Runs counts the measured (non-warmup) runs at the level.
	Runs int
	// Clean is true when every run at the level was clean.
	Clean bool
	// Problem is the first problem of an unclean run.
	Problem string
	// Values holds the median of every metric over the level's runs.
	Values map[string]float64
	// CoreBusy holds the median busy % of the proxy core and the load core.
	CoreBusy [2]float64
	// OtherBusy is the median share of both cores used by other processes.
	OtherBusy float64
	// LoadBound is true when the load core was more than LoadBoundBusy %
	// busy in any run at the level: a median over the runs may still come
	// from that run, so one is enough.
	LoadBound bool
	// Disturbed is true when any run at the level was disturbed by other
	// work on the proxy core (Run.Disturbed), for the same reason.
	Disturbed bool
	// Slowed is true when any run at the level was made while the
	// machine's memory was slow (Run.Slowed).
	Slowed bool
}

// Levels groups the measured runs of test against proxy by concurrency
// level, in ascending order of Conns.
func Levels(runs []Run, test, proxy string) []Level {
	byConns := map[int][]Run{}
	for _, r := range runs {
		if r.Warmup || r.Test != test || r.Proxy != proxy {
			continue
		}
		byConns[r.Conns] = append(byConns[r.Conns], r)
	}
	var out []Level
	for conns, rs := range byConns {
		l := Level{Conns: conns, Runs: len(rs), Clean: true, Values: map[string]float64{}}
		metrics := map[string][]float64{}
		var busy [2][]float64
		var other []float64
		for _, r := range rs {
			other = append(other, r.OtherBusy)
			if !r.Clean {
				if l.Clean {
					l.Problem = r.Problem
				}
				l.Clean = false
			}
			for k, v := range r.Metrics {
				metrics[k] = append(metrics[k], v)
			}
			for i := 0; i < 2 && i < len(r.CoreBusy); i++ {
				busy[i] = append(busy[i], r.CoreBusy[i])
			}
			if len(r.CoreBusy) > 1 && r.CoreBusy[1] > LoadBoundBusy {
				l.LoadBound = true
			}
			l.Disturbed = l.Disturbed || r.Disturbed
			l.Slowed = l.Slowed || r.Slowed
		}
		for k, vs := range metrics {
			l.Values[k], _ = Median(vs)
		}
		for i := range busy {
			l.CoreBusy[i], _ = Median(busy[i])
		}
		l.OtherBusy, _ = Median(other)
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Level) int { return a.Conns - b.Conns })
	return out
}

// Best returns the clean level with the best median of metric (the highest,
// or the lowest when lessIsBetter), ties going to the lower concurrency. It
// returns false when no level is clean or none has the metric.
func Best(levels []Level, metric string, lessIsBetter bool) (Level, bool) {
	var best Level
	found := false
	for _, l := range levels {
		v, ok := l.Values[metric]
		if !l.Clean || !ok || math.IsNaN(v) {
			continue
		}
		if !found {
			best, found = l, true
			continue
		}
		bv := best.Values[metric]
		if (lessIsBetter && v < bv) || (!lessIsBetter && v > bv) {
			best = l
		}
	}
	return best, found
}

// Ratio describes a against b as the seed does: "3.6× more" when a is
// larger, "11× less" when it is smaller, with two significant digits. It
// returns "n/a" when either value is not a positive finite number.
func Ratio(a, b float64) string {
	if !(a > 0) || !(b > 0) || math.IsInf(a, 0) || math.IsInf(b, 0) {
		return "n/a"
	}
	word := "more"
	r := a / b
	if a < b {
		word = "less"
		r = b / a
	}
	return formatRatio(r) + "× " + word
}

// formatRatio prints r with one decimal below 10 and as an integer above,
// as in "1.6", "9.6", "11".
func formatRatio(r float64) string {
	if math.Round(r*10)/10 < 10 {
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatFloat(math.Round(r), 'f', 0, 64)
}

// FormatValue prints v with the given number of decimals; with 0 decimals
// it rounds to an integer and groups thousands with commas ("55,258").
func FormatValue(v float64, decimals int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	if decimals > 0 {
		return strconv.FormatFloat(v, 'f', decimals, 64)
	}
	s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
