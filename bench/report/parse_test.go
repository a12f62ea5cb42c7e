package report

import (
	"errors"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const wrkText = `Running 3s test @ http://127.0.0.1:41234/
  1 threads and 64 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     1.20ms  310.00us   9.80ms   90.00%
    Req/Sec    52.10k     1.20k   54.00k    70.00%
  155608 requests in 3.00s, 172.13MB read
  Socket errors: connect 0, read 2, write 1, timeout 3
  Non-2xx or 3xx responses: 17
Requests/sec:  51860.21
Transfer/sec:     57.37MB
`

func TestParseWrk(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    WrkResult
		wantErr error
	}{
		{
			name: "json line from proxy.lua wins",
			out: wrkText + `BENCH_JSON {"requests":155608,"bytes":180489123,"duration_us":3000412,` +
				`"errors":{"connect":0,"read":2,"write":1,"status":17,"timeout":3},` +
				`"latency_p50_us":1100,"latency_p99_us":2900,"latency_max_us":9800}` + "\n",
			want: WrkResult{Requests: 155608, Bytes: 180489123, DurationUS: 3000412,
				Errors:       WrkErrors{Read: 2, Write: 1, Status: 17, Timeout: 3},
				LatencyP50US: 1100, LatencyP99US: 2900, LatencyMaxUS: 9800},
		},
		{
			name: "text summary fallback",
			out:  wrkText,
			want: WrkResult{Requests: 155608, Bytes: 180491386, DurationUS: 3000000,
				Errors: WrkErrors{Read: 2, Write: 1, Status: 17, Timeout: 3}},
		},
		{
			name: "text summary without errors",
			out:  "  10 requests in 850.50ms, 10.00KB read\nRequests/sec: 11.76\n",
			want: WrkResult{Requests: 10, Bytes: 10240, DurationUS: 850500},
		},
		{
			name:    "no summary",
			out:     "unable to connect to 127.0.0.1:1 Connection refused\n",
			wantErr: ErrNoWrkSummary,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseWrk(tt.out)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("ParseWrk error = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseWrk (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseWrkErrors(t *testing.T) {
	for _, out := range []string{
		"BENCH_JSON {not json\n",
		"  x requests in 3.00s, 1.00MB read\n",
		"  1 requests in 3.00parsecs, 1.00MB read\n",
		"  1 requests in 3.00s, 1.00XB read\n",
		"  1 requests in 3.00s, 1.00MB read\n  Socket errors: connect 0, bogus 1\n",
	} {
		if _, err := ParseWrk(out); err == nil {
			t.Errorf("ParseWrk(%q) = nil error, want one", out)
		}
	}
}

func TestRequestsPerSec(t *testing.T) {
	w := WrkResult{Requests: 3000, DurationUS: 1_500_000}
	if got := w.RequestsPerSec(); got != 2000 {
		t.Errorf("RequestsPerSec = %v, want 2000", got)
	}
	if got := (WrkResult{Requests: 5}).RequestsPerSec(); got != 0 {
		t.Errorf("RequestsPerSec with no duration = %v, want 0", got)
	}
}

func TestParseProcStat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    ProcStat
		wantErr bool
	}{
		{
			name: "squid kid",
			in:   "4242 (squid) S 4240 4240 4240 0 -1 4194560 5034 0 0 0 1234 567 0 0 20 0 1 0 98765 123456789 4567 18446744073709551615\n",
			want: ProcStat{PID: 4242, Comm: "squid", State: 'S', PPID: 4240, UTime: 1234, STime: 567},
		},
		{
			name: "comm with spaces and parentheses",
			in:   "77 (a (b) c) R 1 77 77 0 -1 0 0 0 0 0 10 20 0 0 20 0 1 0 5 0 0",
			want: ProcStat{PID: 77, Comm: "a (b) c", State: 'R', PPID: 1, UTime: 10, STime: 20},
		},
		{name: "truncated", in: "1 (x) S 0 1 1", wantErr: true},
		{name: "no comm", in: "1 x S 0", wantErr: true},
		{name: "bad pid", in: "x (y) S 0 1 1 0 -1 0 0 0 0 0 1 2", wantErr: true},
		{name: "bad utime", in: "1 (y) S 0 1 1 0 -1 0 0 0 0 0 u 2", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProcStat(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseProcStat error = %v, wantErr %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseProcStat (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseVmRSS(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr bool
	}{
		{"present", "Name:\tsquid\nVmPeak:\t  200 kB\nVmRSS:\t   14236 kB\nThreads:\t1\n", 14236, false},
		{"zombie has none", "Name:\tsquid\nState:\tZ (zombie)\n", 0, false},
		{"bad unit", "VmRSS:\t 12 MB\n", 0, true},
		{"bad number", "VmRSS:\t x kB\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseVmRSS(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseVmRSS = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParsePss(t *testing.T) {
	rollup := "55d0c9a2e000-7ffd8a5f2000 ---p 00000000 00:00 0                          [rollup]\nRss:               14236 kB\nPss:                9120 kB\nPss_Anon:           8000 kB\nShared_Clean:       5000 kB\n"
	tests := []struct {
		name    string
		in      string
		want    int64
		wantErr bool
	}{
		{"present, Pss_Anon not taken for Pss", rollup, 9120, false},
		{"kernel thread has none", "", 0, false},
		{"bad unit", "Pss:\t 12 MB\n", 0, true},
		{"bad number", "Pss:\t x kB\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParsePss(tt.in)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParsePss = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseSchedstat(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		run     uint64
		wait    uint64
		wantErr bool
	}{
		{"a thread", "2074640 2043274 24\n", 2074640, 2043274, false},
		{"two fields", "2074640 2043274\n", 0, 0, true},
		{"not a number", "x 1 2\n", 0, 0, true},
		{"wait not a number", "1 x 2\n", 0, 0, true},
		{"empty", "", 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run, wait, err := ParseSchedstat(tt.in)
			if (err != nil) != tt.wantErr || run != tt.run || wait != tt.wait {
				t.Errorf("ParseSchedstat = %d, %d, %v; want %d, %d, error %v", run, wait, err, tt.run, tt.wait, tt.wantErr)
			}
		})
	}
}

func TestParseCPUStatAndBusy(t *testing.T) {
	before, err := ParseCPUStat("cpu  30 0 30 300 0 0 0 0 0 0\ncpu0 10 0 10 100 0 0 0 0 0 0\ncpu1 20 0 20 200 0 0 0 0 0 0\nintr 1 2 3\n")
	if err != nil {
		t.Fatal(err)
	}
	after, err := ParseCPUStat("cpu  0 0 0 0 0 0 0 0 0 0\ncpu0 60 0 40 110 10 0 0 0 0 0\ncpu1 20 0 20 300 0 0 0 0 0 0\n")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[int]CPUTimes{0: {Busy: 20, Idle: 100}, 1: {Busy: 40, Idle: 200}}, before); diff != "" {
		t.Errorf("ParseCPUStat (-want +got):\n%s", diff)
	}
	// cpu0: 80 busy ticks, 20 idle+iowait ticks.
	if got := BusyPercent(before[0], after[0]); got != 80 {
		t.Errorf("BusyPercent cpu0 = %v, want 80", got)
	}
	if got := BusyPercent(before[1], after[1]); got != 0 {
		t.Errorf("BusyPercent cpu1 = %v, want 0", got)
	}
	if got := BusyPercent(before[1], before[1]); got != 0 {
		t.Errorf("BusyPercent with no time = %v, want 0", got)
	}
	// Both CPUs: 80 busy ticks of 200; ours 50, so 30 ticks (15 %) other.
	if got := OtherPercent(before, after, []int{0, 1}, 50); got != 15 {
		t.Errorf("OtherPercent = %v, want 15", got)
	}
	if got := OtherPercent(before, after, []int{0, 1}, 500); got != 0 {
		t.Errorf("OtherPercent with more of ours than busy = %v, want 0", got)
	}
	irq, err := ParseCPUStat("cpu0 0 0 0 0 0 30 10 0\n")
	if err != nil {
		t.Fatal(err)
	}
	zero := map[int]CPUTimes{0: {}}
	if got := OtherPercent(zero, irq, []int{0}, 0); got != 0 {
		t.Errorf("OtherPercent with interrupt time only = %v, want 0", got)
	}
	if _, err := ParseCPUStat("intr 1 2\n"); err == nil {
		t.Error("ParseCPUStat without cpu lines: nil error")
	}
	if _, err := ParseCPUStat("cpu0 1 2 3 x 5 6 7 8\n"); err == nil {
		t.Error("ParseCPUStat with a bad counter: nil error")
	}
}

func FuzzParseWrk(f *testing.F) {
	f.Add(wrkText)
	f.Fuzz(func(t *testing.T, out string) {
		r, err := ParseWrk(out)
		if err != nil && r != (WrkResult{}) {
			t.Errorf("ParseWrk returned %+v with error %v", r, err)
		}
	})
}

func FuzzParsePss(f *testing.F) {
	f.Add("Rss:  14236 kB\nPss:   9120 kB\nPss_Anon:  8000 kB\n")
	f.Fuzz(func(t *testing.T, s string) {
		kb, err := ParsePss(s)
		if err != nil && kb != 0 {
			t.Errorf("ParsePss returned %d with error %v", kb, err)
		}
	})
}

func FuzzParseProcStat(f *testing.F) {
	f.Add("4242 (squid) S 4240 4240 4240 0 -1 4194560 5034 0 0 0 1234 567 0 0 20 0 1 0 98765")
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParseProcStat(s)
		if err != nil && ps != (ProcStat{}) {
			t.Errorf("ParseProcStat returned %+v with error %v", ps, err)
		}
	})
}

func TestParseGoBench(t *testing.T) {
	lists, err := os.ReadFile("testdata/gobench/lists.txt") // BenchmarkDecideList and BenchmarkParseList of internal/acl, as the campaign runs them
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		out     string
		want    []GoBench
		wantErr bool
	}{
		{
			name: "internal/acl's list benchmarks",
			out:  string(lists),
			want: []GoBench{
				{Name: "BenchmarkDecideList/entries=1000/hit", N: 458778, Values: map[string]float64{"ns/op": 787.1, "B/op": 0, "allocs/op": 0}},
				{Name: "BenchmarkDecideList/entries=1000/miss", N: 576585, Values: map[string]float64{"ns/op": 818.4, "B/op": 0, "allocs/op": 0}},
				{Name: "BenchmarkDecideList/entries=1000/spread", N: 470923, Values: map[string]float64{"ns/op": 869.0, "B/op": 0, "allocs/op": 0}},
				{Name: "BenchmarkDecideList/entries=1000000/hit", N: 1000000, Values: map[string]float64{"ns/op": 311.0, "B/op": 0, "allocs/op": 0}},
				{Name: "BenchmarkDecideList/entries=1000000/miss", N: 698798, Values: map[string]float64{"ns/op": 347.6, "B/op": 0, "allocs/op": 0}},
				{Name: "BenchmarkDecideList/entries=1000000/spread", N: 191616, Values: map[string]float64{"ns/op": 1274, "B/op": 0, "allocs/op": 0}},
				{Name: "BenchmarkParseList", N: 1, Values: map[string]float64{"ns/op": 791641831, "MB/s": 27.51, "MB-heap/set": 37.84, "MB/set": 37.77}},
			},
		},
		{
			name: "a name printed alone before its log lines",
			out:  "BenchmarkX\n    x_test.go:12: hello\nBenchmarkX-4   \t 100\t 12.5 ns/op\nPASS\nok  \tpkg\t1.0s\n",
			want: []GoBench{{Name: "BenchmarkX-4", N: 100, Values: map[string]float64{"ns/op": 12.5}}},
		},
		{name: "no result", out: "PASS\n"},
		{name: "a figure without its unit", out: "BenchmarkX 100 12.5 ns/op 3\n", wantErr: true},
		{name: "a figure that is no number", out: "BenchmarkX 100 fast ns/op\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseGoBench(tt.out)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseGoBench: %v, want error %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ParseGoBench (-want +got):\n%s", diff)
			}
		})
	}
}
