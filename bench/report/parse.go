package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// WrkMarker starts the line that bench/wrk/proxy.lua prints from wrk's done()
// hook, followed by a JSON object.
const WrkMarker = "BENCH_JSON "

// WrkErrors are wrk's error counters. Status counts responses with a status
// above 399.
type WrkErrors struct {
	Connect int64 `json:"connect"`
	Read    int64 `json:"read"`
	Write   int64 `json:"write"`
	Status  int64 `json:"status"`
	Timeout int64 `json:"timeout"`
}

// Total returns the sum of all counters.
func (e WrkErrors) Total() int64 { return e.Connect + e.Read + e.Write + e.Status + e.Timeout }

// WrkResult is what one wrk run reports.
type WrkResult struct {
	Requests   int64     `json:"requests"`
	Bytes      int64     `json:"bytes"`
	DurationUS int64     `json:"duration_us"`
	Errors     WrkErrors `json:"errors"`
	// Latency percentiles in microseconds; zero when only wrk's text
	// summary was parsed.
	LatencyP50US int64 `json:"latency_p50_us"`
	LatencyP99US int64 `json:"latency_p99_us"`
	LatencyMaxUS int64 `json:"latency_max_us"`
}

// RequestsPerSec returns completed requests per second of the run.
func (w WrkResult) RequestsPerSec() float64 {
	if w.DurationUS <= 0 {
		return 0
	}
	return float64(w.Requests) / (float64(w.DurationUS) / 1e6)
}

// ErrNoWrkSummary is returned by ParseWrk when the output holds neither the
// JSON line of proxy.lua nor wrk's own summary.
var ErrNoWrkSummary = errors.New("report: no wrk summary in output")

// ParseWrk reads the output of one wrk run. It prefers the exact JSON line
// that bench/wrk/proxy.lua prints (WrkMarker); without one it falls back to
// wrk's text summary ("N requests in 10.00s, 1.2MB read", "Socket errors:
// ...", "Non-2xx or 3xx responses: N"), whose byte count is rounded.
func ParseWrk(out string) (WrkResult, error) {
	var text WrkResult
	sawText := false
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, WrkMarker); ok {
			var r WrkResult
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				return WrkResult{}, fmt.Errorf("report: parse wrk JSON line: %w", err)
			}
			return r, nil
		}
		switch {
		case strings.Contains(line, " requests in "):
			if err := parseWrkTotals(line, &text); err != nil {
				return WrkResult{}, err
			}
			sawText = true
		case strings.HasPrefix(line, "Socket errors:"):
			if err := parseWrkSocketErrors(line, &text.Errors); err != nil {
				return WrkResult{}, err
			}
		case strings.HasPrefix(line, "Non-2xx or 3xx responses:"):
			n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(line, "Non-2xx or 3xx responses:")), 10, 64)
			if err != nil {
				return WrkResult{}, fmt.Errorf("report: parse wrk line %q: %w", line, err)
			}
			text.Errors.Status = n
		}
	}
	if !sawText {
		return WrkResult{}, ErrNoWrkSummary
	}
	return text, nil
}

// parseWrkTotals parses "123 requests in 10.00s, 1.50MB read".
func parseWrkTotals(line string, r *WrkResult) error {
	f := strings.Fields(line)
	if len(f) < 6 || f[1] != "requests" || f[2] != "in" || f[5] != "read" {
		return fmt.Errorf("report: parse wrk line %q: unexpected shape", line)
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return fmt.Errorf("report: parse wrk requests %q: %w", f[0], err)
	}
	d, err := parseWrkDuration(strings.TrimSuffix(f[3], ","))
	if err != nil {
		return err
	}
	b, err := parseWrkBytes(f[4])
	if err != nil {
		return err
	}
	r.Requests, r.DurationUS, r.Bytes = n, d, b
	return nil
}

// parseWrkDuration parses wrk's durations ("10.00s", "850.12ms", "1.00m")
// into microseconds.
func parseWrkDuration(s string) (int64, error) {
	units := []struct {
		suffix string
		us     float64
	}{{"us", 1}, {"ms", 1e3}, {"s", 1e6}, {"m", 60e6}, {"h", 3600e6}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseFloat(num, 64)
			if err != nil {
				continue
			}
			return int64(v * u.us), nil
		}
	}
	return 0, fmt.Errorf("report: parse wrk duration %q: unknown unit", s)
}

// parseWrkBytes parses wrk's binary-prefixed sizes ("512.00B", "1.50MB").
func parseWrkBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mul    float64
	}{{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40}, {"B", 1}}
	for _, u := range units {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			v, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, fmt.Errorf("report: parse wrk size %q: %w", s, err)
			}
			return int64(v * u.mul), nil
		}
	}
	return 0, fmt.Errorf("report: parse wrk size %q: unknown unit", s)
}

// parseWrkSocketErrors parses "Socket errors: connect 0, read 1, write 0,
// timeout 2".
func parseWrkSocketErrors(line string, e *WrkErrors) error {
	rest := strings.TrimPrefix(line, "Socket errors:")
	for _, part := range strings.Split(rest, ",") {
		f := strings.Fields(part)
		if len(f) != 2 {
			return fmt.Errorf("report: parse wrk line %q: unexpected shape", line)
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			return fmt.Errorf("report: parse wrk line %q: %w", line, err)
		}
		switch f[0] {
		case "connect":
			e.Connect = n
		case "read":
			e.Read = n
		case "write":
			e.Write = n
		case "timeout":
			e.Timeout = n
		default:
			return fmt.Errorf("report: parse wrk line %q: unknown counter %q", line, f[0])
		}
	}
	return nil
}

// ProcStat holds the fields of /proc/PID/stat the campaign uses.
type ProcStat struct {
	PID   int
	Comm  string
	State byte
	PPID  int
	// UTime and STime are in clock ticks (usually 100 per second).
	UTime uint64
	STime uint64
}

// ParseProcStat parses the one line of /proc/PID/stat. The command name is
// taken between the first "(" and the last ")", so names holding spaces or
// parentheses parse correctly.
func ParseProcStat(s string) (ProcStat, error) {
	s = strings.TrimSpace(s)
	open := strings.IndexByte(s, '(')
	closing := strings.LastIndexByte(s, ')')
	if open < 0 || closing < open {
		return ProcStat{}, fmt.Errorf("report: parse /proc stat %q: no command name", s)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(s[:open]))
	if err != nil {
		return ProcStat{}, fmt.Errorf("report: parse /proc stat pid: %w", err)
	}
	// Fields after the command name start with field 3 (state).
	f := strings.Fields(s[closing+1:])
	if len(f) < 13 {
		return ProcStat{}, fmt.Errorf("report: parse /proc stat of %d: %d fields after comm, want at least 13", pid, len(f))
	}
	ps := ProcStat{PID: pid, Comm: s[open+1 : closing], State: f[0][0]}
	if ps.PPID, err = strconv.Atoi(f[1]); err != nil {
		return ProcStat{}, fmt.Errorf("report: parse /proc stat ppid of %d: %w", pid, err)
	}
	// utime is field 14 and stime field 15, that is f[11] and f[12].
	if ps.UTime, err = strconv.ParseUint(f[11], 10, 64); err != nil {
		return ProcStat{}, fmt.Errorf("report: parse /proc stat utime of %d: %w", pid, err)
	}
	if ps.STime, err = strconv.ParseUint(f[12], 10, 64); err != nil {
		return ProcStat{}, fmt.Errorf("report: parse /proc stat stime of %d: %w", pid, err)
	}
	return ps, nil
}

// ParseVmRSS returns the VmRSS line of /proc/PID/status in kB. A process
// without one (a zombie, a kernel thread) has 0.
func ParseVmRSS(status string) (int64, error) {
	return parseKB(status, "VmRSS:")
}

// ParsePss returns the Pss line of /proc/PID/smaps_rollup in kB: the
// process's proportional set size, where a page shared by n processes
// counts 1/n. A process without one (a kernel thread) has 0.
func ParsePss(smapsRollup string) (int64, error) {
	return parseKB(smapsRollup, "Pss:")
}

// parseKB returns the value of the first line starting with name, of the
// form "name   1234 kB", or 0 when there is none.
func parseKB(s, name string) (int64, error) {
	for line := range strings.Lines(s) {
		rest, ok := strings.CutPrefix(line, name)
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("report: parse %s line %q: unexpected shape", strings.TrimSuffix(name, ":"), strings.TrimSpace(line))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("report: parse %s line %q: %w", strings.TrimSuffix(name, ":"), strings.TrimSpace(line), err)
		}
		return kb, nil
	}
	return 0, nil
}

// CPUTimes are the counters of one "cpuN" line of /proc/stat, in ticks.
type CPUTimes struct {
	// Busy is user+nice+system+irq+softirq+steal.
	Busy uint64
	// Idle is idle+iowait.
	Idle uint64
	// IRQ is irq+softirq, the part of Busy no process is charged for.
	IRQ uint64
}

// ParseCPUStat returns the per-CPU counters of /proc/stat, keyed by CPU
// number. The aggregate "cpu" line is left out.
func ParseCPUStat(stat string) (map[int]CPUTimes, error) {
	out := map[int]CPUTimes{}
	for line := range strings.Lines(stat) {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil {
			return nil, fmt.Errorf("report: parse /proc/stat line %q: %w", strings.TrimSpace(line), err)
		}
		var v [8]uint64
		for i := range v {
			if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
				return nil, fmt.Errorf("report: parse /proc/stat line %q: %w", strings.TrimSpace(line), err)
			}
		}
		// user nice system idle iowait irq softirq steal
		out[n] = CPUTimes{Busy: v[0] + v[1] + v[2] + v[5] + v[6] + v[7], Idle: v[3] + v[4], IRQ: v[5] + v[6]}
	}
	if len(out) == 0 {
		return nil, errors.New("report: parse /proc/stat: no cpuN lines")
	}
	return out, nil
}

// OtherPercent returns the share of the given CPUs' time, in percent, that
// was busy in processes other than ours: busy time minus interrupt time
// minus ourTicks (the utime+stime of our processes over the same interval),
// at least 0. It is how much other work disturbed a run.
func OtherPercent(before, after map[int]CPUTimes, cpus []int, ourTicks uint64) float64 {
	var busy, total float64
	for _, c := range cpus {
		b, a := before[c], after[c]
		db := float64(a.Busy) - float64(b.Busy)
		busy += db - (float64(a.IRQ) - float64(b.IRQ))
		total += db + float64(a.Idle) - float64(b.Idle)
	}
	if total <= 0 {
		return 0
	}
	return max(0, 100*(busy-float64(ourTicks))/total)
}

// BusyPercent returns the busy share of a CPU between two samples, in
// percent; 0 when no time passed.
func BusyPercent(before, after CPUTimes) float64 {
	busy := float64(after.Busy) - float64(before.Busy)
	total := busy + float64(after.Idle) - float64(before.Idle)
	if total <= 0 {
		return 0
	}
	return 100 * busy / total
}

// ParseSchedstat returns the first two fields of a
// /proc/PID/task/TID/schedstat line: the time the thread ran on a CPU
// (run) and the time it spent runnable, waiting in a run queue for a CPU
// (wait), both in nanoseconds from the scheduler's clock.
func ParseSchedstat(s string) (run, wait uint64, err error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return 0, 0, fmt.Errorf("report: schedstat %q: want 3 fields", strings.TrimSpace(s))
	}
	if run, err = strconv.ParseUint(f[0], 10, 64); err == nil {
		wait, err = strconv.ParseUint(f[1], 10, 64)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("report: schedstat %q: %w", strings.TrimSpace(s), err)
	}
	return run, wait, nil
}

// GoBench is one result line of go test -bench: the benchmark's name as
// printed (sub-benchmarks joined with "/"; run with -test.cpu 1, which
// leaves off the "-N" GOMAXPROCS suffix), its iterations, and its figures
// by unit ("ns/op", "B/op", "allocs/op", "MB/s" and the units of
// b.ReportMetric).
type GoBench struct {
	Name   string
	N      int64
	Values map[string]float64
}

// ParseGoBench reads the result lines of go test -bench output: a line
// that starts with "Benchmark" and goes on with an iteration count and
// pairs of a figure and its unit. Other lines (the header, PASS, a
// benchmark's name printed alone before its log lines) are skipped; a
// result line whose figures do not pair up is an error.
func ParseGoBench(out string) ([]GoBench, error) {
	var res []GoBench
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		n, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue // a name alone, or a log line
		}
		if len(f) < 4 || len(f)%2 != 0 {
			return nil, fmt.Errorf("report: benchmark line %q: figures without units", strings.TrimSpace(line))
		}
		b := GoBench{Name: f[0], N: n, Values: map[string]float64{}}
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("report: benchmark line %q: %w", strings.TrimSpace(line), err)
			}
			b.Values[f[i+1]] = v
		}
		res = append(res, b)
	}
	return res, nil
}
