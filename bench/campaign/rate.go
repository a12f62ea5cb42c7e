//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
)

// The tests "at a fixed offered rate" (issue 32, group fixed-rate): the
// same exchanges per second for every proxy, below every proxy's
// saturation, so that the CPU per exchange and the latency compare
// proxies at equal work rather than each at its own best rate, and a
// shared load core does not decide the row. Each rate is its own level
// (report.Row.Level): the rows of a rate read its runs alone.

// Load subcommands of a fixed-rate test (testDef.proto).
const (
	protoHTTP = "http" // HTTP/1.1, plain or over TLS
	protoH2   = "h2"
	protoH3   = "h3"
	protoWS   = "ws"
)

// rateConns is the number of connections of every fixed-rate test: with
// a connection per request, the most requests in flight at once.
const rateConns = 64

// rateReqTimeout is the request timeout of a fixed-rate run, and the
// drain after its window: an exchange not done by then is an error, one
// not sent by then is unsent, and either makes the run unclean.
const rateReqTimeout = 5 * time.Second

// secRate is the start of the name of every fixed-rate section.
const secRate = "At a fixed offered rate"

// rateDef describes one fixed-rate test.
type rateDef struct {
	id, what string // test ID, and what it sends (the section's name)
	proto    string
	listener string
	needs    []string
	// msg is true when the exchanges are WebSocket messages.
	msg bool
	// newConn and fullHandshake as in testDef; curves restricts the key
	// exchanges the client offers.
	newConn, fullHandshake bool
	curves                 string
	rates                  []int
	// against is the fixed-rate test whose CPU per exchange at the same
	// rate this one's is compared with ("" for none).
	against string
	note    string
}

// wsRateHigh is the upper rate of the WebSocket rows, in messages per
// second. At 20,000 the load core (the load tool and the origin) was 92 to
// 100 % busy on the 2-core machine with every proxy, plain and over TLS,
// and the median followed its queue (rustle 1.4 to 2.9 ms against 0.17 to
// 0.35 ms below 95 %); at 10,000 and 12,000 gost still took it to 89 to
// 100 % in most runs with little other load. At 8,000 it was at 58 to 76 % in the runs
// with at most 5 % other load, every proxy plain and rustle over TLS, but
// gost over TLS kept it at 94 to 99 % (its latency there is likely to be
// marked load-bound: only 5,000 kept it below). Measured figures in
// bench/README.md, "The fixed-rate rows".
const wsRateHigh = 8000

// rateDefs are the fixed-rate tests, in report order. The rates are
// below the slowest column's closed-loop rate in the published campaign
// (bench/RESULTS.md: gost 3,529 HTTP/2 and 3,742 plain 1 KB req/s
// through the Go load tool, 4,024 HTTPS; 966 full handshakes; Squid
// 33,923 WebSocket-over-TLS messages) by at least a quarter, and below
// the load core's: a run whose load core is more than
// report.LoadBoundBusy % busy has its latency marked load-bound. The
// WebSocket rows' upper rate is wsRateHigh for that reason.
var rateDefs = []rateDef{
	{id: "rate-1k", what: "plain HTTP, 1 KB responses", proto: protoHTTP, listener: lnHTTP, needs: []string{featHTTP}, rates: []int{1000, 2500},
		note: "64 kept-alive connections; a proxy that closes after every response without saying so (Tinyproxy) gets the request again on a new connection, the reconnection counted in the latency."},
	{id: "rate-https-1k", what: "HTTPS, 1 KB responses", proto: protoHTTP, listener: lnHTTPS, needs: []string{featHTTPS}, rates: []int{1000, 2500}, against: "rate-1k",
		note: "64 kept-alive TLS connections (HTTP/1.1), opened before the run; the comparison column divides rustle's CPU per request by the plain port's at the same rate."},
	{id: "rate-h2-1k", what: "HTTP/2, 1 KB responses", proto: protoH2, listener: lnHTTPS, needs: []string{featHTTPS, featH2}, rates: []int{1000, 2500}, against: "rate-https-1k",
		note: "64 HTTP/2 connections, one stream at a time on each; the comparison column divides rustle's CPU per request by the HTTPS (HTTP/1.1) row's at the same rate."},
	{id: "rate-h3-1k", what: "HTTP/3, 1 KB responses", proto: protoH3, listener: lnHTTPS, needs: []string{featHTTPS, featH3}, rates: []int{1000, 2000}, against: "rate-h2-1k",
		note: "64 QUIC connections, one request at a time on each; the comparison column divides rustle's CPU per request by the HTTP/2 row's at the same rate (1,000/s; HTTP/3 runs 2,000/s, not 2,500, to stay well below rustle's closed-loop HTTP/3 rate)."},
	{id: "rate-ws-64", what: "WebSocket, 64-byte messages", proto: protoWS, listener: lnHTTP, needs: []string{featWebSocket}, msg: true, rates: []int{5000, wsRateHigh},
		note: "64 upgraded connections, opened before the run; a message counts from the time it was due to its echo's arrival."},
	{id: "rate-wss-64", what: "WebSocket over TLS, 64-byte messages", proto: protoWS, listener: lnHTTPS, needs: []string{featHTTPS, featWebSocket}, msg: true, rates: []int{5000, wsRateHigh}, against: "rate-ws-64",
		note: "64 upgraded TLS connections; the comparison column divides rustle's CPU per message by the plain WebSocket row's at the same rate."},
	{id: "rate-https-newconn", what: "a new TLS connection per request, resumed session", proto: protoHTTP, listener: lnHTTPS, needs: []string{featHTTPS}, newConn: true, rates: []int{200, 500},
		note: "each request on a connection of its own (TCP, a TLS handshake offering the session of an earlier one, the request, close), at most 64 at once; the latency includes the connection and the handshake. Squid 5.7 with GnuTLS resumes no session (see the notes): its figures are full handshakes."},
	{id: "rate-https-full", what: "a new TLS connection per request, full handshake", proto: protoHTTP, listener: lnHTTPS, needs: []string{featHTTPS}, newConn: true, fullHandshake: true, rates: []int{200, 500},
		note: "as the resumed row, without a session cache: a full handshake per request, with the key exchange each proxy picks from the client's offer (X25519MLKEM768 first, then X25519; see the notes)."},
	{id: "rate-https-full-x25519", what: "a new TLS connection per request, full handshake, X25519", proto: protoHTTP, listener: lnHTTPS, needs: []string{featHTTPS}, newConn: true, fullHandshake: true, curves: "X25519", rates: []int{200, 500}, against: "rate-https-full",
		note: "the full-handshake row with the client offering X25519 alone, so that every proxy makes the same key exchange (Squid 5.7 with GnuTLS picks X25519 anyway; rustle picks the hybrid X25519MLKEM768 when offered); the comparison column divides rustle's CPU per request by its own with the default offer."},
}

// rateRowID returns the ID of the row of test at rate for what ("cpu",
// "p50", "p99", "p999").
func rateRowID(test string, rate int, what string) string {
	return fmt.Sprintf("%s-%d-%s", test, rate, what)
}

// rateTests returns the fixed-rate tests: per rate, the CPU per exchange
// and the latency's 50th, 99th and 99.9th percentiles. The latency rows
// are load-sensitive (report.Row.LoadSensitive): a run whose load core
// was saturated marks them load-bound, since the exchanges then wait in
// the load tool's and the origin's queue; the CPU row is the proxy's own
// CPU time and stands.
func rateTests() []testDef {
	var out []testDef
	for _, rd := range rateDefs {
		unit, per, noun := "µs/req", "request", "req/s"
		if rd.msg {
			unit, per, noun = "µs/msg", "message", "msg/s"
		}
		sec := secRate + ": " + rd.what
		var rows []report.Row
		for i, rate := range rd.rates {
			at := "at " + report.FormatValue(float64(rate), 0) + " " + noun
			cpu := report.Row{ID: rateRowID(rd.id, rate, "cpu"), Section: sec, Title: at + ": CPU per " + per, Unit: unit, Decimals: 1, LessIsBetter: true,
				Unsupported: notNone, Level: rate, Selects: i == 0}
			if i == 0 {
				cpu.Note = rd.note
			}
			if rd.against != "" && hasRate(rd.against, rate) {
				cpu.Against = rateRowID(rd.against, rate, "cpu")
			}
			rows = append(rows, cpu)
			for _, q := range []struct{ id, name string }{{"p50", "p50"}, {"p99", "p99"}, {"p999", "p99.9"}} {
				rows = append(rows, report.Row{ID: rateRowID(rd.id, rate, q.id), Section: sec, Title: at + ": latency " + q.name, Unit: "ms", Decimals: 2, LessIsBetter: true, Level: rate,
					LoadSensitive: true})
			}
		}
		t := testDef{
			id: rd.id, kind: kindRate, proto: rd.proto, listener: rd.listener, needs: rd.needs, group: "fixed-rate",
			newConn: rd.newConn, fullHandshake: rd.fullHandshake, curves: rd.curves,
			levels: rd.rates, quickLevels: rd.rates, rows: rows,
		}
		if rd.msg {
			t.wsSize = 64
		} else {
			t.path, t.body = "/1k", 1<<10
		}
		out = append(out, t)
	}
	return out
}

// hasRate reports whether the fixed-rate test id runs at rate.
func hasRate(id string, rate int) bool {
	for _, rd := range rateDefs {
		if rd.id == id {
			for _, r := range rd.rates {
				if r == rate {
					return true
				}
			}
		}
	}
	return false
}

// rateResult mirrors the JSON line of a fixed-rate run of the load tool
// (load's RateResult).
type rateResult struct {
	Proto      string           `json:"proto"`
	Conns      int              `json:"conns"`
	Rate       float64          `json:"rate"`
	DurationUS int64            `json:"duration_us"`
	ElapsedUS  int64            `json:"elapsed_us"`
	Scheduled  int64            `json:"scheduled"`
	Completed  int64            `json:"completed"`
	Unsent     int64            `json:"unsent"`
	Bytes      int64            `json:"bytes"`
	Errors     report.WrkErrors `json:"errors"`
	FirstError string           `json:"first_error"`
	Opened     int64            `json:"opened"`
	Handshakes int64            `json:"tls_handshakes"`
	Resumed    int64            `json:"tls_resumed"`
	Curves     map[string]int64 `json:"tls_curves"`
	Cert       string           `json:"tls_cert"`
	Latency    struct {
		N, P50, P99, P999, Max int64
	} `json:"latency_us"`
}

// rateArgs returns the load tool's command line for a run of t at rate
// against r lasting d, synchronised on its stdin.
func (e *env) rateArgs(t testDef, r *running, rate int, d time.Duration) []string {
	argv := append([]string{filepath.Join(e.bin, "load"), t.proto}, e.loadArgs(t, r)...)
	argv = append(argv, "-target", e.target(t, r), "-conns", strconv.Itoa(rateConns),
		"-rate", strconv.Itoa(rate), "-duration", d.String(), "-req-timeout", rateReqTimeout.String(), "-sync")
	if t.proto == protoWS {
		argv = append(argv, "-size", strconv.Itoa(t.wsSize))
	} else {
		argv = append(argv, "-path", t.path)
	}
	if t.newConn {
		argv = append(argv, "-newconn")
	}
	return argv
}

// rateSample is what a fixed-rate run reads at each end of its window.
type rateSample struct {
	proxy, origin, tool treeUsage
	// proxyNS is the proxy's CPU time in nanoseconds (schedstat), and
	// proxyWaitNS the time its threads waited for a CPU, valid when
	// nsOK.
	proxyNS, proxyWaitNS uint64
	nsOK                 bool
	// threads are the proxy's threads' schedstat fields (cpuNS).
	threads map[int]threadTimes
	cores   map[int]report.CPUTimes
}

// sampleRate reads the CPU time of the proxy r, the origin and the load
// tool (toolPID), and the cores' counters.
func (e *env) sampleRate(r *running, toolPID int) (rateSample, error) {
	var s rateSample
	if r.p != nil {
		var err error
		if s.proxy, err = usage(r.p.pid()); err != nil {
			return s, fmt.Errorf("proxy gone: %w", err)
		}
		s.proxyNS, s.proxyWaitNS, s.threads, err = cpuNS(r.p.pid())
		s.nsOK = err == nil
	}
	s.origin, _ = usage(e.originPID)
	s.tool, _ = usage(toolPID)
	s.cores, _ = cpuSample()
	return s, nil
}

// measureRate makes one run of the fixed-rate test t at rate against r:
// "load PROTO -rate RATE -sync" opens its connections, and the proxy's
// CPU and the cores are read between its "ready" and its "done", so that
// the window holds the exchanges alone, not the connections opened before
// them nor their closing.
func (e *env) measureRate(ctx context.Context, t testDef, r *running, rate int, d time.Duration) report.Run {
	run := report.Run{Test: t.id, Proxy: r.def.name, Conns: rate, Start: time.Now().UTC(), Metrics: map[string]float64{}}
	fail := func(format string, args ...any) report.Run {
		run.Clean = false
		run.Problem = fmt.Sprintf(format, args...)
		return run
	}
	ctx, cancel := context.WithTimeout(ctx, d+2*rateReqTimeout+60*time.Second)
	defer cancel()
	if r.p != nil {
		run.MemoryLoopMS = e.fastMemory(ctx, r.split.proxy)
	}
	argv := e.rateArgs(t, r, rate, d)
	cmd := exec.CommandContext(ctx, "taskset", append([]string{"-c", cpuList(r.split.load)}, argv...)...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fail("%v", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fail("%v", err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return fail("start load %s: %v", t.proto, err)
	}
	waited := false
	finish := func() {
		if !waited {
			waited = true
			stdin.Close()
			io.Copy(io.Discard, stdout)
			cmd.Wait()
		}
	}
	defer finish()
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var raw []string
	expect := func(want string) error {
		if !sc.Scan() {
			return fmt.Errorf("load %s ended before %q: %s", t.proto, want, strings.TrimSpace(stderr.String()))
		}
		raw = append(raw, sc.Text())
		if sc.Text() != want {
			return fmt.Errorf("load %s printed %q, want %q", t.proto, sc.Text(), want)
		}
		return nil
	}
	if err := expect("ready"); err != nil {
		return fail("%v", err)
	}
	s0, err := e.sampleRate(r, cmd.Process.Pid)
	if err != nil {
		return fail("%v", err)
	}
	io.WriteString(stdin, "go\n")
	if err := expect("done"); err != nil {
		return fail("%v", err)
	}
	s1, err := e.sampleRate(r, cmd.Process.Pid)
	if err != nil {
		return fail("%v", err)
	}
	stdin.Close()
	for sc.Scan() {
		raw = append(raw, sc.Text())
	}
	finish()
	run.Raw = strings.Join(raw, "\n")
	if cmd.ProcessState == nil || !cmd.ProcessState.Success() {
		return fail("load %s: %v: %s", t.proto, cmd.ProcessState, strings.TrimSpace(stderr.String()))
	}
	var res rateResult
	if err := json.Unmarshal([]byte(raw[len(raw)-1]), &res); err != nil {
		return fail("parse load %s output: %v", t.proto, err)
	}
	run.CoreBusy = busy(r.split, s0.cores, s1.cores)
	ours := delta(s0.proxy.ticks, s1.proxy.ticks) + delta(s0.origin.ticks, s1.origin.ticks) + delta(s0.tool.ticks, s1.tool.ticks)
	run.OtherBusy = report.OtherPercent(s0.cores, s1.cores, r.split.all(), ours)
	if r.p != nil {
		run.ProxyCPUSeconds, run.ProxyCPUFrom = proxyCPU(s0, s1, e.clkTck)
		run.ProxyRSSKB = s1.proxy.rssKB
		if s0.nsOK && s1.nsOK {
			run.ProxyWaitMS = float64(delta(s0.proxyWaitNS, s1.proxyWaitNS)) / 1e6
			tr, tw := busiestThread(s0.threads, s1.threads)
			run.ThreadRunMS, run.ThreadWaitMS = float64(tr)/1e6, float64(tw)/1e6
		}
		if res.Completed > 0 {
			run.Metrics[rateRowID(t.id, rate, "cpu")] = run.ProxyCPUSeconds * 1e6 / float64(res.Completed)
		}
	}
	judgeRate(t, rate, res, &run)
	run.Disturbed = report.Disturbed(run.ThreadRunMS, run.ThreadWaitMS, run.DurationS)
	run.Slowed = e.slowed(run.MemoryLoopMS)
	return run
}

// memoryLoop returns how long "load memloop" took on cpus, in
// milliseconds; 0 when it could not be run (the run is then not judged).
func (e *env) memoryLoop(ctx context.Context, cpus []int) float64 {
	out, err := exec.CommandContext(ctx, "taskset", "-c", cpuList(cpus), filepath.Join(e.bin, "load"), "memloop").Output()
	if err != nil {
		fmt.Fprintf(e.out, "  memory loop on CPU %s: %v (the run is not judged by it)\n", cpuList(cpus), err)
		return 0
	}
	var res struct {
		MS float64 `json:"memory_loop_ms"`
	}
	if err := json.Unmarshal(out, &res); err != nil || !(res.MS > 0) {
		fmt.Fprintf(e.out, "  memory loop on CPU %s printed %q (the run is not judged by it)\n", cpuList(cpus), out)
		return 0
	}
	return res.MS
}

// fastMemory runs the memory loop on cpus and returns its time; while
// that is slow (slowed), it runs it again every two seconds, within
// e.memWait and what is left of e.memBudget, and returns the last time:
// the VM's slow spells last minutes, so a run made at once after a slow
// loop would most often be slow too.
func (e *env) fastMemory(ctx context.Context, cpus []int) float64 {
	ms := e.memoryLoop(ctx, cpus)
	if !report.Slowed(ms, e.fastestLoop) || e.memWait <= 0 || e.memBudget <= 0 {
		return ms
	}
	start := time.Now()
	deadline := start.Add(min(e.memWait, e.memBudget))
	fmt.Fprintf(e.out, "  waiting up to %s for the machine's memory to be fast again (memory loop %.1f ms, the campaign's fastest %.1f ms)\n",
		time.Until(deadline).Round(time.Second), ms, e.fastestLoop)
	for report.Slowed(ms, e.fastestLoop) && time.Now().Before(deadline) && ctx.Err() == nil {
		sleep(ctx, 2*time.Second)
		ms = e.memoryLoop(ctx, cpus)
	}
	e.memBudget = max(0, e.memBudget-time.Since(start))
	return ms
}

// slowed reports whether a run whose memory loop took loopMS was made in
// a spell of slow memory (report.Slowed), against the fastest loop of the
// campaign so far, this one included.
func (e *env) slowed(loopMS float64) bool {
	if loopMS > 0 && (e.fastestLoop == 0 || loopMS < e.fastestLoop) {
		e.fastestLoop = loopMS
	}
	return report.Slowed(loopMS, e.fastestLoop)
}

// disturbedRetries is how many more runs a fixed-rate run disturbed by
// other work on the proxy core (report.Run.Disturbed) gets: the campaign
// makes it again, at most this many times, before it records the last
// one, marked.
const disturbedRetries = 2

// retryDisturbed returns the run that measure makes, made again while it
// is disturbed by other work on the proxy core, at most disturbedRetries
// more times: each disturbed run given up is logged with why it is made
// again, and not recorded. The run returned is the first undisturbed one,
// or the last one, still marked Disturbed. It stops early when ctx is
// done.
func (e *env) retryDisturbed(ctx context.Context, t testDef, measure func() report.Run) report.Run {
	run := measure()
	for try := 1; try <= disturbedRetries && (run.Disturbed || run.Slowed) && ctx.Err() == nil; try++ {
		e.logRun(run, t)
		if run.Disturbed {
			fmt.Fprintf(e.out, "  %-15s %-9s %5d conns retry %d of %d: the proxy's busiest thread waited %.0f ms for a CPU in %.1f s, in which it ran %.0f ms (over %.0f %%: other work on its core)\n",
				t.id, run.Proxy, run.Conns, try, disturbedRetries, run.ThreadWaitMS, run.DurationS, run.ThreadRunMS, report.DisturbedWait)
		} else {
			fmt.Fprintf(e.out, "  %-15s %-9s %5d conns retry %d of %d: the memory loop took %.1f ms, the campaign's fastest %.1f ms (over %.2f×: the machine's memory was slow)\n",
				t.id, run.Proxy, run.Conns, try, disturbedRetries, run.MemoryLoopMS, e.fastestLoop, report.SlowedFactor)
		}
		run = measure()
	}
	return run
}

// proxyCPU returns the proxy's CPU seconds between two samples, and
// "schedstat" when they come from its threads' schedstat (report.Run's
// ProxyCPUFrom). schedstat is exact but counts only the threads alive at
// the second sample; utime+stime count every thread, exited ones
// included, to a clock tick (each process's two fields rounded down at
// both samples: within 2 ticks a process). When the ticks say more than
// schedstat by more than that rounding, threads ran and exited in the
// window (Tinyproxy's thread per connection) and the ticks are the
// figure.
func proxyCPU(s0, s1 rateSample, clkTck float64) (float64, string) {
	ticks := float64(delta(s0.proxy.ticks, s1.proxy.ticks)) / clkTck
	if !s0.nsOK || !s1.nsOK {
		return ticks, ""
	}
	ns := float64(delta(s0.proxyNS, s1.proxyNS)) / 1e9
	slack := float64(2*max(s0.proxy.procs, s1.proxy.procs)+1) / clkTck
	if ns < ticks-slack {
		return ticks, ""
	}
	return ns, "schedstat"
}

// judgeRate fills run from the result of a fixed-rate run of t at rate:
// the latency rows, and whether it is clean (every exchange due completed
// without error, whole).
func judgeRate(t testDef, rate int, res rateResult, run *report.Run) {
	run.DurationS = float64(res.ElapsedUS) / 1e6
	run.Requests, run.Bytes = res.Completed, res.Bytes
	run.TLSHandshakes, run.TLSResumed = res.Handshakes, res.Resumed
	run.TLSCurves, run.TLSCert = res.Curves, res.Cert
	if res.Completed > 0 {
		run.Metrics[rateRowID(t.id, rate, "p50")] = float64(res.Latency.P50) / 1000
		run.Metrics[rateRowID(t.id, rate, "p99")] = float64(res.Latency.P99) / 1000
		run.Metrics[rateRowID(t.id, rate, "p999")] = float64(res.Latency.P999) / 1000
	}
	var problems []string
	if n := res.Errors.Total(); n > 0 {
		problems = append(problems, fmt.Sprintf("errors: connect %d, read %d, write %d, timeout %d, status>399 %d; first: %s",
			res.Errors.Connect, res.Errors.Read, res.Errors.Write, res.Errors.Timeout, res.Errors.Status, res.FirstError))
	}
	switch {
	case res.Scheduled == 0 || res.Completed == 0:
		problems = append(problems, "nothing completed")
	case res.Completed < res.Scheduled:
		problems = append(problems, fmt.Sprintf("%d of %d exchanges completed, %d never sent before the drain ended: the run fell behind the offered rate", res.Completed, res.Scheduled, res.Unsent))
	}
	if !t.newConn && res.Opened < int64(res.Conns) {
		problems = append(problems, fmt.Sprintf("%d of %d connections opened before the run", res.Opened, res.Conns))
	}
	switch {
	case t.proto == protoWS && res.Bytes != res.Completed*int64(t.wsSize):
		problems = append(problems, fmt.Sprintf("%d bytes echoed for %d messages of %d", res.Bytes, res.Completed, t.wsSize))
	case t.proto != protoWS && res.Bytes < res.Completed*t.body:
		problems = append(problems, fmt.Sprintf("short responses: %d bytes for %d requests of %d", res.Bytes, res.Completed, t.body))
	}
	run.Clean = len(problems) == 0
	run.Problem = strings.Join(problems, "; ")
}
