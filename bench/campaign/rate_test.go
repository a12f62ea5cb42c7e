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
	before, _, _, err := cpuNS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	ru0 := cpu()
	// 50 ms of CPU, however busy the machine (at most 10 s).
	for deadline := time.Now().Add(10 * time.Second); cpu()-ru0 < 50*time.Millisecond && time.Now().Before(deadline); {
	}
	after, _, _, err := cpuNS(os.Getpid())
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
	_, before, _, err := cpuNS(os.Getpid())
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
	_, after, _, err := cpuNS(os.Getpid())
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

// TestRetryDisturbed checks that a fixed-rate run disturbed by other work
// on the proxy core is made again, at most disturbedRetries more times,
// each retry logged with why; that a run which stays disturbed is returned
// marked, its log line saying so, and its latency marked in the report
// and out of the ratio column while its CPU per message stands; and that
// a clean run is made once and compared as before.
func TestRetryDisturbed(t *testing.T) {
	td := testByID(t, "rate-wss-64")
	rate := td.levels[0]
	window, ran := 3.0, 1000.0                // s, and ms the busiest thread ran
	over := report.DisturbedWait/100*ran + 50 // ms, just over the rule
	for _, tt := range []struct {
		name      string
		waits     []float64 // the busiest thread's wait in each run measure makes, in ms
		runs      int       // the runs made
		disturbed bool      // the run returned is marked
	}{
		{"clean", []float64{0, 0, 0}, 1, false},
		{"at the threshold", []float64{over - 50, over, over}, 1, false},
		{"disturbed once", []float64{over, 0, 0}, 2, false},
		{"disturbed twice", []float64{2500, over, 10}, 3, false},
		{"stays disturbed", []float64{2500, over, 2000, 0}, 3, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log strings.Builder
			e := &env{out: &log}
			made := 0
			measure := func() report.Run {
				w := tt.waits[made]
				made++
				run := report.Run{Test: td.id, Proxy: "rustle", Conns: rate, Clean: true, CoreBusy: []float64{50, 60}, ThreadRunMS: ran, ThreadWaitMS: w,
					Metrics: map[string]float64{rateRowID(td.id, rate, "cpu"): 20, rateRowID(td.id, rate, "p50"): w / 100,
						rateRowID(td.id, rate, "p99"): w / 10, rateRowID(td.id, rate, "p999"): w / 5}}
				// As measureRate would: the load tool's window, and the
				// judgement of the wait in it.
				run.DurationS = window
				run.Disturbed = report.Disturbed(run.ThreadRunMS, run.ThreadWaitMS, run.DurationS)
				return run
			}
			run := e.retryDisturbed(t.Context(), td, measure)
			if made != tt.runs {
				t.Errorf("made %d runs, want %d; log:\n%s", made, tt.runs, log.String())
			}
			if run.Disturbed != tt.disturbed || run.ThreadWaitMS != tt.waits[tt.runs-1] {
				t.Errorf("returned the run with wait %v ms, disturbed %v; want the last one made (%v ms), disturbed %v", run.ThreadWaitMS, run.Disturbed, tt.waits[tt.runs-1], tt.disturbed)
			}
			if got := strings.Count(log.String(), "retry "); got != tt.runs-1 {
				t.Errorf("%d retries logged, want %d; log:\n%s", got, tt.runs-1, log.String())
			}
			for i := 1; i < tt.runs; i++ {
				want := fmt.Sprintf("retry %d of %d: the proxy's busiest thread waited %.0f ms for a CPU in 3.0 s, in which it ran 1000 ms", i, disturbedRetries, tt.waits[i-1])
				if !strings.Contains(log.String(), want) {
					t.Errorf("log lacks %q:\n%s", want, log.String())
				}
			}
			log.Reset()
			e.logRun(run, td)
			if got := strings.Contains(log.String(), "DISTURBED"); got != tt.disturbed {
				t.Errorf("log line says disturbed %v, want %v: %s", got, tt.disturbed, log.String())
			}

			c := report.Campaign{
				Repeats: 1, DurationS: window,
				Proxies: []report.Proxy{{Name: "rustle", Label: "rustle"}, {Name: "gost", Label: "gost"}},
				Rows:    td.rows,
				Runs: []report.Run{run, {Test: td.id, Proxy: "gost", Conns: rate, Clean: true, CoreBusy: []float64{70, 60}, DurationS: window,
					Metrics: map[string]float64{rateRowID(td.id, rate, "cpu"): 30, rateRowID(td.id, rate, "p50"): 0.3,
						rateRowID(td.id, rate, "p99"): 0.9, rateRowID(td.id, rate, "p999"): 1.5}}},
			}
			figs := report.Figures(c)
			for _, what := range []string{"p50", "p99", "p999"} {
				cell := figs[rateRowID(td.id, rate, what)]["rustle"]
				if cell.Disturbed != tt.disturbed || strings.HasSuffix(cell.Text, report.MarkDisturbed) != tt.disturbed {
					t.Errorf("%s: disturbed %v, text %q; want disturbed %v", what, cell.Disturbed, cell.Text, tt.disturbed)
				}
				ratio := report.RatioText(cell, figs[rateRowID(td.id, rate, what)]["gost"])
				if (ratio == report.TextDisturbed) != tt.disturbed {
					t.Errorf("%s: ratio cell %q", what, ratio)
				}
			}
			if cpu := figs[rateRowID(td.id, rate, "cpu")]["rustle"]; cpu.Disturbed || !cpu.Comparable() || cpu.Text != "20.0" {
				t.Errorf("CPU row: disturbed %v, comparable %v, text %q", cpu.Disturbed, cpu.Comparable(), cpu.Text)
			}
		})
	}
}

// TestBusiestThread checks that the thread that ran the most between two
// readings is the one judged, a thread born between them counting from
// zero and one gone at the second reading not at all.
func TestBusiestThread(t *testing.T) {
	for _, tt := range []struct {
		name          string
		before, after map[int]threadTimes
		runNS, waitNS uint64
	}{
		{"none", nil, nil, 0, 0},
		{"one thread", map[int]threadTimes{1: {100, 10}}, map[int]threadTimes{1: {900, 60}}, 800, 50},
		{
			// gost on a quiet core: the busiest thread waits little, a
			// sibling waits on it.
			"the busiest, not the one that waited most",
			map[int]threadTimes{1: {1000, 100}, 2: {1000, 100}},
			map[int]threadTimes{1: {1600, 177}, 2: {1100, 445}},
			600, 77,
		},
		{"born in the window", map[int]threadTimes{1: {1000, 0}}, map[int]threadTimes{1: {1010, 5}, 7: {300, 200}}, 300, 200},
		{"gone at the second reading", map[int]threadTimes{1: {0, 0}, 2: {0, 0}}, map[int]threadTimes{1: {20, 2}}, 20, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if run, wait := busiestThread(tt.before, tt.after); run != tt.runNS || wait != tt.waitNS {
				t.Errorf("busiestThread = %d, %d ns; want %d, %d", run, wait, tt.runNS, tt.waitNS)
			}
		})
	}
}

// TestCPUNSThreads checks that cpuNS reads every thread of this process
// by its ID, the calling thread among them, and that the sum over them
// is its total.
func TestCPUNSThreads(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	total, wait, threads, err := cpuNS(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := threads[unix.Gettid()]; !ok {
		t.Errorf("thread %d missing from %v", unix.Gettid(), threads)
	}
	var run, w uint64
	for _, tt := range threads {
		run += tt.run
		w += tt.wait
	}
	if run != total || w != wait {
		t.Errorf("threads sum to %d run, %d wait; cpuNS said %d, %d", run, w, total, wait)
	}
}

// TestRetrySlowed checks that a fixed-rate run whose memory loop took
// more than report.SlowedFactor times the campaign's fastest so far is
// made again, at most disturbedRetries more times, each retry logged with
// the two times, and that the campaign's fastest loop follows the runs.
func TestRetrySlowed(t *testing.T) {
	td := testByID(t, "rate-https-1k")
	rate := td.levels[0]
	for _, tt := range []struct {
		name    string
		fastest float64   // the campaign's fastest loop before, ms
		loops   []float64 // the loop of each run measure makes, ms
		runs    int       // the runs made
		slowed  bool      // the run returned is marked
		after   float64   // the campaign's fastest loop after, ms
	}{
		{"first run", 0, []float64{120, 70, 70}, 1, false, 120},
		{"usual pace", 70, []float64{78, 70, 70}, 1, false, 70},
		{"faster than any before", 90, []float64{70, 70, 70}, 1, false, 70},
		{"slow once", 70, []float64{100, 75, 70}, 2, false, 70},
		{"stays slow", 70, []float64{100, 105, 99, 70}, 3, true, 70},
		{"no loop", 70, []float64{0, 70, 70}, 1, false, 70},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var log strings.Builder
			e := &env{out: &log, fastestLoop: tt.fastest}
			made := 0
			measure := func() report.Run {
				l := tt.loops[made]
				made++
				run := report.Run{Test: td.id, Proxy: "rustle", Conns: rate, Clean: true, CoreBusy: []float64{50, 60}, MemoryLoopMS: l,
					Metrics: map[string]float64{rateRowID(td.id, rate, "cpu"): l}}
				run.Slowed = e.slowed(run.MemoryLoopMS) // as measureRate does
				return run
			}
			run := e.retryDisturbed(t.Context(), td, measure)
			if made != tt.runs || run.Slowed != tt.slowed || run.MemoryLoopMS != tt.loops[tt.runs-1] {
				t.Errorf("made %d runs, returned loop %v ms slowed %v; want %d runs, the last one's (%v ms), slowed %v; log:\n%s",
					made, run.MemoryLoopMS, run.Slowed, tt.runs, tt.loops[tt.runs-1], tt.slowed, log.String())
			}
			if e.fastestLoop != tt.after {
				t.Errorf("fastest loop %v ms after, want %v", e.fastestLoop, tt.after)
			}
			for i := 1; i < tt.runs; i++ {
				want := fmt.Sprintf("retry %d of %d: the memory loop took %.1f ms, the campaign's fastest %.1f ms", i, disturbedRetries, tt.loops[i-1], tt.after)
				if !strings.Contains(log.String(), want) {
					t.Errorf("log lacks %q:\n%s", want, log.String())
				}
			}
			if got := strings.Count(log.String(), "SLOWED"); got != tt.runs-1 {
				t.Errorf("%d runs logged SLOWED, want %d (the ones given up); log:\n%s", got, tt.runs-1, log.String())
			}
		})
	}
}
