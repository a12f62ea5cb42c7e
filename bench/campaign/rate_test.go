//go:build linux

package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
	"golang.org/x/sys/unix"
)

// TestRateTests checks the fixed-rate tests: at every rate of each, a CPU
// row (no "no proxy" figure) and the three latency rows, the same rates
// in quick mode, and the columns each runs against.
func TestRateTests(t *testing.T) {
	sel, err := selectTests("fixed-rate")
	if err != nil {
		t.Fatal(err)
	}
	if len(sel) != len(rateDefs) {
		t.Fatalf("%d fixed-rate tests selected, want %d", len(sel), len(rateDefs))
	}
	for _, td := range sel {
		if td.kind != kindRate || td.proto == "" || !slices.Equal(td.levels, td.quickLevels) {
			t.Errorf("test %s: kind %d, proto %q, rates %v (quick %v)", td.id, td.kind, td.proto, td.levels, td.quickLevels)
		}
		var ids []string
		for _, r := range td.rows {
			ids = append(ids, r.ID)
		}
		var want []string
		for _, rate := range td.levels {
			for _, what := range []string{"cpu", "p50", "p99", "p999"} {
				want = append(want, fmt.Sprintf("%s-%d-%s", td.id, rate, what))
			}
		}
		if !slices.Equal(ids, want) {
			t.Errorf("test %s: rows %v, want %v", td.id, ids, want)
		}
		for _, r := range td.rows {
			cpu := strings.HasSuffix(r.ID, "-cpu")
			if cpu != slices.Contains(r.Unsupported, report.NoProxy) || !r.LessIsBetter {
				t.Errorf("row %s: unsupported for %v, less is better %v", r.ID, r.Unsupported, r.LessIsBetter)
			}
			if r.Against != "" && !strings.HasSuffix(r.Against, fmt.Sprintf("-%d-cpu", r.Level)) {
				t.Errorf("row %s compared with %s, not the CPU row at its rate", r.ID, r.Against)
			}
		}
	}
	for _, tt := range []struct {
		test    string
		proxies []string
	}{
		{"rate-1k", []string{"rustle", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz", "squid", "tinyproxy", "gost", "none"}},
		{"rate-https-1k", []string{"rustle", "rustle-x25519", "squid", "gost", "none"}},
		{"rate-h2-1k", []string{"rustle", "gost", "none"}},
		{"rate-h3-1k", []string{"rustle", "none"}},
		{"rate-ws-64", []string{"rustle", "squid", "gost", "none"}},
		{"rate-wss-64", []string{"rustle", "squid", "gost", "none"}},
		{"rate-https-full-x25519", []string{"rustle", "rustle-x25519", "squid", "gost", "none"}},
	} {
		td := testByID(t, tt.test)
		var got []string
		for _, p := range proxies {
			if runs(td, p) {
				got = append(got, p.name)
			}
		}
		if !slices.Equal(got, tt.proxies) {
			t.Errorf("%s runs against %v, want %v", tt.test, got, tt.proxies)
		}
	}
}

func TestRateArgs(t *testing.T) {
	e := &env{bin: "/b", caFile: "/tmp/ca.pem", origin: originAddrs{HTTP: "o:1", WS: "o:4", HTTPS: "o:5", WSS: "o:6", H2: "o:8", H3: "o:9"}}
	proxy, none := &running{addr: "127.0.0.1:3128", auth: "bench:pw"}, &running{}
	for _, tt := range []struct {
		test string
		r    *running
		rate int
		want string
	}{
		{"rate-1k", proxy, 2500, "/b/load http -proxy 127.0.0.1:3128 -auth bench:pw -target o:1 -conns 64 -rate 2500 -duration 3s -req-timeout 5s -sync -path /1k"},
		{"rate-1k", none, 1000, "/b/load http -target o:1 -conns 64 -rate 1000 -duration 3s -req-timeout 5s -sync -path /1k"},
		{"rate-https-1k", none, 1000, "/b/load http -tls -ca /tmp/ca.pem -resume -target o:5 -conns 64 -rate 1000 -duration 3s -req-timeout 5s -sync -path /1k"},
		{"rate-h2-1k", proxy, 1000, "/b/load h2 -proxy 127.0.0.1:3128 -auth bench:pw -tls -ca /tmp/ca.pem -resume -h2 -target o:1 -conns 64 -rate 1000 -duration 3s -req-timeout 5s -sync -path /1k"},
		{"rate-h3-1k", none, 2000, "/b/load h3 -tls -ca /tmp/ca.pem -resume -target o:9 -conns 64 -rate 2000 -duration 3s -req-timeout 5s -sync -path /1k"},
		{"rate-ws-64", proxy, 20000, "/b/load ws -proxy 127.0.0.1:3128 -auth bench:pw -target o:4 -conns 64 -rate 20000 -duration 3s -req-timeout 5s -sync -size 64"},
		{"rate-wss-64", none, 5000, "/b/load ws -tls -ca /tmp/ca.pem -resume -target o:6 -conns 64 -rate 5000 -duration 3s -req-timeout 5s -sync -size 64"},
		{"rate-https-newconn", proxy, 500, "/b/load http -proxy 127.0.0.1:3128 -auth bench:pw -tls -ca /tmp/ca.pem -resume -target o:1 -conns 64 -rate 500 -duration 3s -req-timeout 5s -sync -path /1k -newconn"},
		{"rate-https-full", proxy, 200, "/b/load http -proxy 127.0.0.1:3128 -auth bench:pw -tls -ca /tmp/ca.pem -target o:1 -conns 64 -rate 200 -duration 3s -req-timeout 5s -sync -path /1k -newconn"},
		{"rate-https-full-x25519", proxy, 200, "/b/load http -proxy 127.0.0.1:3128 -auth bench:pw -tls -ca /tmp/ca.pem -curves X25519 -target o:1 -conns 64 -rate 200 -duration 3s -req-timeout 5s -sync -path /1k -newconn"},
	} {
		if got := strings.Join(e.rateArgs(testByID(t, tt.test), tt.r, tt.rate, 3*time.Second), " "); got != tt.want {
			t.Errorf("rateArgs(%s, proxy %q, %d) =\n%s\nwant\n%s", tt.test, tt.r.addr, tt.rate, got, tt.want)
		}
	}
}

func TestJudgeRate(t *testing.T) {
	good := rateResult{Proto: "http", Conns: 64, Rate: 1000, ElapsedUS: 3_001_000, Scheduled: 3000, Completed: 3000, Bytes: 3000 * 1065, Opened: 64}
	good.Latency.N, good.Latency.P50, good.Latency.P99, good.Latency.P999 = 3000, 310, 1250, 4020
	ws := rateResult{Proto: "ws", Conns: 64, Rate: 5000, ElapsedUS: 3e6, Scheduled: 15000, Completed: 15000, Bytes: 15000 * 64, Opened: 64}
	ws.Latency.N, ws.Latency.P50 = 15000, 200
	for _, tt := range []struct {
		name      string
		test      string
		res       rateResult
		change    func(*rateResult)
		wantClean bool
		wantProb  string
	}{
		{"clean", "rate-1k", good, func(*rateResult) {}, true, ""},
		{"errors", "rate-1k", good, func(r *rateResult) {
			r.Errors.Timeout, r.Completed, r.FirstError = 2, 2998, "deadline"
		}, false, "timeout 2, status>399 0; first: deadline"},
		{"fell behind", "rate-1k", good, func(r *rateResult) { r.Completed, r.Unsent = 2500, 500 }, false, "2500 of 3000 exchanges completed, 500 never sent"},
		{"nothing", "rate-1k", good, func(r *rateResult) { r.Completed, r.Bytes = 0, 0 }, false, "nothing completed"},
		{"short bodies", "rate-1k", good, func(r *rateResult) { r.Bytes = 1000 }, false, "short responses: 1000 bytes for 3000 requests of 1024"},
		{"connections missing", "rate-https-1k", good, func(r *rateResult) { r.Opened = 60 }, false, "60 of 64 connections opened"},
		{"a connection per request opens none before", "rate-https-full", good, func(r *rateResult) { r.Opened = 0 }, true, ""},
		{"ws clean", "rate-ws-64", ws, func(*rateResult) {}, true, ""},
		{"ws echo of the wrong size", "rate-ws-64", ws, func(r *rateResult) { r.Bytes-- }, false, "959999 bytes echoed for 15000 messages of 64"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			td := testByID(t, tt.test)
			res := tt.res
			tt.change(&res)
			rate := td.levels[0]
			run := report.Run{Metrics: map[string]float64{}}
			judgeRate(td, rate, res, &run)
			if run.Clean != tt.wantClean || !strings.Contains(run.Problem, tt.wantProb) {
				t.Fatalf("clean %v, problem %q; want %v, %q", run.Clean, run.Problem, tt.wantClean, tt.wantProb)
			}
			if res.Completed == 0 {
				return
			}
			want := map[string]float64{
				rateRowID(td.id, rate, "p50"):  float64(res.Latency.P50) / 1000,
				rateRowID(td.id, rate, "p99"):  float64(res.Latency.P99) / 1000,
				rateRowID(td.id, rate, "p999"): float64(res.Latency.P999) / 1000,
			}
			if fmt.Sprint(run.Metrics) != fmt.Sprint(want) || run.Requests != res.Completed || run.DurationS != float64(res.ElapsedUS)/1e6 {
				t.Errorf("metrics %v, requests %d, duration %v; want %v, %d", run.Metrics, run.Requests, run.DurationS, want, res.Completed)
			}
		})
	}
}

// TestCPUNS reads this process's CPU time from its threads' schedstat:
// over some spinning it grows by what getrusage says the process used.
func TestCPUNS(t *testing.T) {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, _, err := cpuNS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ru0 := cpu()
	// 50 ms of CPU, however busy the machine (at most 10 s).
	for deadline := time.Now().Add(10 * time.Second); cpu()-ru0 < 50*time.Millisecond && time.Now().Before(deadline); {
	}
	after, _, err := cpuNS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ru := cpu() - ru0
	got := time.Duration(after - before)
	if got < ru*8/10-5*time.Millisecond || got > ru*12/10+5*time.Millisecond {
		t.Errorf("schedstat says %s of CPU, getrusage %s", got, ru)
	}
}

// TestCPUNSWait reads the time this process's threads waited for a CPU:
// two threads that spin on the same CPU at once each wait while the
// other runs, so together they wait about as long as one of them ran.
func TestCPUNSWait(t *testing.T) {
	_, before, err := cpuNS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var set unix.CPUSet
	set.Set(0)
	var spun, read sync.WaitGroup
	start, release := make(chan struct{}), make(chan struct{})
	ran := make([]time.Duration, 2)
	read.Add(1)
	for i := range ran {
		spun.Add(1)
		go func() {
			// The locked thread ends with the goroutine, after release:
			// its schedstat is read while it is still there.
			runtime.LockOSThread()
			defer func() { <-release }()
			defer spun.Done()
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				t.Error(err)
				return
			}
			<-start
			var ts unix.Timespec
			cpu := func() time.Duration {
				unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
				return time.Duration(ts.Nano())
			}
			// 30 ms of this thread's CPU, however busy the machine
			// (at most 10 s).
			c0 := cpu()
			for deadline := time.Now().Add(10 * time.Second); cpu()-c0 < 30*time.Millisecond && time.Now().Before(deadline); {
			}
			ran[i] = cpu() - c0
		}()
	}
	close(start)
	spun.Wait()
	_, after, err := cpuNS(os.Getpid())
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	// Each spinner waited at least while the other ran and it had not
	// finished: at least the shorter run, less the scheduler's slack.
	if got, least := time.Duration(after-before), min(ran[0], ran[1])/2; got < least {
		t.Errorf("threads waited %s for a CPU, want at least %s (runs %s and %s on one CPU)", got, least, ran[0], ran[1])
	}
}

// TestProxyCPU checks the choice between schedstat and clock ticks: the
// nanoseconds when they agree with the ticks within the ticks' rounding,
// the ticks when threads that exited in the window took CPU schedstat no
// longer shows.
func TestProxyCPU(t *testing.T) {
	sample := func(ticks, ns uint64, procs int, nsOK bool) rateSample {
		return rateSample{proxy: treeUsage{ticks: ticks, procs: procs}, proxyNS: ns, nsOK: nsOK}
	}
	for _, tt := range []struct {
		name     string
		s0, s1   rateSample
		want     float64
		wantFrom string
	}{
		{"exact where the ticks round", sample(100, 1e9, 1, true), sample(107, 1.0752e9, 1, true), 0.0752, "schedstat"},
		{"ticks round down by up to 2 a process", sample(100, 1e9, 1, true), sample(105, 1.0752e9, 1, true), 0.0752, "schedstat"},
		{"threads exited: the ticks", sample(100, 1e9, 1, true), sample(175, 1.0255e9, 1, true), 0.75, ""},
		{"three processes round more", sample(100, 1e9, 3, true), sample(112, 1.05e9, 3, true), 0.05, "schedstat"},
		{"no schedstat", sample(100, 0, 1, false), sample(107, 0, 1, false), 0.07, ""},
	} {
		got, from := proxyCPU(tt.s0, tt.s1, 100)
		if from != tt.wantFrom || got < tt.want-1e-9 || got > tt.want+1e-9 {
			t.Errorf("%s: %v s from %q, want %v from %q", tt.name, got, from, tt.want, tt.wantFrom)
		}
	}
}

// TestRateLoadBound checks that the latency rows of a fixed-rate test are
// load-sensitive and its CPU row is not: a run whose load core was busier
// than report.LoadBoundBusy marks its latency figures load-bound, out of
// the ratio column, and its log line says so; the CPU per message stands,
// and a run below the threshold is compared as any other.
func TestRateLoadBound(t *testing.T) {
	td := testByID(t, "rate-wss-64")
	rate := td.levels[0]
	for _, r := range td.rows {
		if want := !strings.HasSuffix(r.ID, "-cpu"); r.LoadSensitive != want {
			t.Errorf("row %s: load-sensitive %v, want %v", r.ID, r.LoadSensitive, want)
		}
	}
	for _, tt := range []struct {
		name  string
		load  float64
		bound bool
	}{
		{"load core saturated", 98, true},
		{"just above", report.LoadBoundBusy + 0.5, true},
		{"at the threshold", report.LoadBoundBusy, false},
		{"load core below", 60, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := report.Campaign{
				Repeats: 1, DurationS: 3,
				Proxies: []report.Proxy{{Name: "rustle", Label: "rustle"}, {Name: "gost", Label: "gost"}},
				Rows:    td.rows,
			}
			m := func(cpu, lat float64) map[string]float64 {
				return map[string]float64{rateRowID(td.id, rate, "cpu"): cpu, rateRowID(td.id, rate, "p50"): lat,
					rateRowID(td.id, rate, "p99"): lat * 3, rateRowID(td.id, rate, "p999"): lat * 5}
			}
			rustle := report.Run{Test: td.id, Proxy: "rustle", Conns: rate, Clean: true, Metrics: m(20, 2), CoreBusy: []float64{50, tt.load}}
			c.Runs = []report.Run{rustle,
				{Test: td.id, Proxy: "gost", Conns: rate, Clean: true, Metrics: m(30, 0.3), CoreBusy: []float64{70, 60}}}
			figs := report.Figures(c)
			for _, what := range []string{"p50", "p99", "p999"} {
				cell := figs[rateRowID(td.id, rate, what)]["rustle"]
				if cell.LoadBound != tt.bound || strings.HasSuffix(cell.Text, report.MarkLoadBound) != tt.bound {
					t.Errorf("%s: load-bound %v, text %q; want load-bound %v", what, cell.LoadBound, cell.Text, tt.bound)
				}
				ratio := report.RatioText(cell, figs[rateRowID(td.id, rate, what)]["gost"])
				if (ratio == report.TextLoadBound) != tt.bound {
					t.Errorf("%s: ratio cell %q", what, ratio)
				}
			}
			if cpu := figs[rateRowID(td.id, rate, "cpu")]["rustle"]; cpu.LoadBound || !cpu.Comparable() || cpu.Text != "20.0" {
				t.Errorf("CPU row: load-bound %v, comparable %v, text %q", cpu.LoadBound, cpu.Comparable(), cpu.Text)
			}
			var log strings.Builder
			e := &env{out: &log}
			e.logRun(rustle, td)
			if got := strings.Contains(log.String(), "LOAD-BOUND"); got != tt.bound {
				t.Errorf("log line says load-bound %v, want %v: %s", got, tt.bound, log.String())
			}
		})
	}
}
