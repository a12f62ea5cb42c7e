//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
)

// plan holds the settings of one campaign.
type plan struct {
	repeats  int
	duration time.Duration
	warmup   time.Duration
	settle   time.Duration // pause before reading memory
	quick    bool
}

// levels returns the concurrency levels of t under p.
func (p plan) levels(t testDef) []int {
	if p.quick && len(t.quickLevels) > 0 {
		return t.quickLevels
	}
	return t.levels
}

// runTest runs pair p, one test against one proxy, for p's repeat (or
// every repeat): for throughput tests a fresh proxy, a warm-up run, then
// every level once per repeat; for the memory test a fresh proxy per
// repeat. Every run is passed to record as soon as it ends. An error
// means the proxy could not be started or checked.
func (e *env) runTest(ctx context.Context, pl plan, p pair, record func(report.Run)) error {
	t, def := p.t, p.def
	first, last := p.span(pl)
	if t.kind == kindGoBench {
		return e.goBenchTest(ctx, pl, t, record) // no proxy
	}
	defer e.useResolver(t)()
	e.test = t
	split := e.split(t)
	if !slices.Equal(split.load, []int{e.loadCore}) {
		// The origin of the campaign runs on the base load core: a test
		// whose load side has other CPUs gets an origin of its own there.
		restore, err := e.useOrigin(ctx, t.id, split.load)
		if err != nil {
			return err
		}
		defer restore()
	}
	if t.parent != "" {
		stop, err := e.startParent(ctx, t, split)
		if err != nil {
			return err
		}
		defer stop()
	}
	if t.kind == kindHold {
		for rep := first; rep <= last; rep++ {
			r, err := e.startProxy(ctx, def, t.listener, split)
			if err != nil {
				return err
			}
			run := e.holdRun(ctx, pl, t, r)
			r.stop()
			if ctx.Err() != nil {
				return ctx.Err() // an interrupted run is not recorded
			}
			run.Repeat = rep
			e.logRun(run, t)
			record(run)
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		return nil
	}
	r, err := e.startProxy(ctx, def, t.listener, split)
	if err != nil {
		return err
	}
	defer r.stop()
	levels := pl.levels(t)
	warm := e.measure(ctx, t, r, levels[len(levels)/2], pl.warmup)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	warm.Warmup = true
	warm.Repeat = p.rep // the pair's, so that -resume finds it (0: every repeat's)
	e.logRun(warm, t)
	record(warm)
	for rep := first; rep <= last; rep++ {
		for _, conns := range levels {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			run := e.retryDisturbed(ctx, t, func() report.Run {
				run := e.measure(ctx, t, r, conns, pl.duration)
				run.Repeat = rep
				return run
			})
			if ctx.Err() != nil {
				return ctx.Err() // an interrupted run is not recorded
			}
			e.logRun(run, t)
			record(run)
		}
	}
	return nil
}

// parentUnused is the url of the parent the direct-route test declares
// and never uses (the discard port: nothing is sent to it).
const parentUnused = "http://127.0.0.1:9"

// startParent sets up the parent of a parent test t: for parentDirect
// nothing runs (the rustle configuration declares an unused parent and a
// direct route); otherwise the parent proxy (Squid or rustle) is started
// on the plain port, pinned to the load side's CPUs of split, and the
// rustle configuration written next routes every request through it with
// the campaign's credentials. The returned function stops the parent and
// clears the setting.
func (e *env) startParent(ctx context.Context, t testDef, split coreSplit) (func(), error) {
	if t.parent == parentDirect {
		e.parentURL, e.parentVia = parentUnused, "direct"
		return func() { e.parentURL, e.parentVia = "", "" }, nil
	}
	def := proxyByName(t.parent)
	if def == nil {
		return nil, fmt.Errorf("campaign: test %s: unknown parent %q", t.id, t.parent)
	}
	if def.binary != "" {
		if _, ok := e.lookPath[def.binary]; !ok {
			return nil, fmt.Errorf("campaign: test %s: parent %s is not installed (Debian package %s)", t.id, def.name, def.pkg)
		}
	}
	if t.parent == parentRustle && e.rustleBin == "" {
		return nil, fmt.Errorf("campaign: test %s: rustle is not built", t.id)
	}
	e.parentURL, e.parentVia = "", ""
	r, err := e.startProxy(ctx, def, lnHTTP, coreSplit{proxy: split.load, load: split.load, shared: true})
	if err != nil {
		return nil, fmt.Errorf("campaign: test %s: start the parent: %w", t.id, err)
	}
	u := url.URL{Scheme: "http", User: url.UserPassword(e.user, e.pass), Host: r.addr}
	e.parentURL, e.parentVia = u.String(), "parent"
	return func() {
		e.parentURL, e.parentVia = "", ""
		r.stop()
	}, nil
}

// measure runs one throughput run of t at conns against r, sampling the
// proxy's CPU and both cores around it.
func (e *env) measure(ctx context.Context, t testDef, r *running, conns int, d time.Duration) report.Run {
	run := report.Run{Test: t.id, Proxy: r.def.name, Conns: conns, Start: time.Now().UTC(), Metrics: map[string]float64{}}
	dnsBefore := e.dnsQueries(ctx, t)
	var u0 treeUsage
	if r.p != nil {
		var err error
		if u0, err = usage(r.p.pid()); err != nil {
			run.Problem = "proxy gone before the run: " + err.Error()
			return run
		}
	}
	o0, _ := usage(e.originPID)
	c0, _ := cpuSample()
	var err error
	var toolCPU float64
	switch t.kind {
	case kindWrk:
		toolCPU, err = e.wrkRun(ctx, t, r, conns, d, &run)
	case kindBulk:
		toolCPU, err = e.bulkRun(ctx, t, r, conns, d, &run)
	case kindHTTP, kindH2, kindH3:
		toolCPU, err = e.loadHTTPRun(ctx, t, r, conns, d, &run)
	case kindWS:
		toolCPU, err = e.wsRun(ctx, t, r, conns, d, &run)
	case kindUDP:
		toolCPU, err = e.udpRun(ctx, t, r, conns, d, &run)
	case kindRate:
		return e.measureRate(ctx, t, r, conns, d) // samples its own window
	}
	c1, _ := cpuSample()
	o1, _ := usage(e.originPID)
	run.CoreBusy = busy(r.split, c0, c1)
	ours := delta(o0.ticks, o1.ticks) + uint64(toolCPU*e.clkTck)
	if r.p != nil {
		u1, uerr := usage(r.p.pid())
		if uerr != nil {
			err = errors.Join(err, fmt.Errorf("proxy gone after the run: %w", uerr))
		} else {
			run.ProxyCPUSeconds = float64(delta(u0.ticks, u1.ticks)) / e.clkTck
			run.ProxyRSSKB = u1.rssKB
			ours += delta(u0.ticks, u1.ticks)
		}
	}
	run.OtherBusy = report.OtherPercent(c0, c1, r.split.all(), ours)
	if err != nil {
		run.Clean = false
		run.Problem = strings.TrimSpace(strings.Join([]string{run.Problem, err.Error()}, " "))
	}
	e.judgeDNS(ctx, t, dnsBefore, d, &run)
	// CPU per request, message or byte, for the rows that ask for it.
	for _, row := range t.rows {
		switch {
		case (row.Unit == "µs/req" || row.Unit == "µs/msg" || row.Unit == "µs/dgram") && r.p != nil && run.Requests > 0:
			run.Metrics[row.ID] = run.ProxyCPUSeconds * 1e6 / float64(run.Requests)
		case row.Unit == "µs/req" && r.p == nil && t.originCPU && run.Requests > 0:
			run.Metrics[row.ID] = float64(delta(o0.ticks, o1.ticks)) / e.clkTck * 1e6 / float64(run.Requests)
		case row.Unit == "ns/B" && r.p != nil && run.Bytes > 0:
			run.Metrics[row.ID] = run.ProxyCPUSeconds * 1e9 / float64(run.Bytes)
		}
	}
	return run
}

// wrkRun runs wrk through the proxy (or straight to the origin), fills run
// from its summary and returns the CPU seconds wrk used.
func (e *env) wrkRun(ctx context.Context, t testDef, r *running, conns int, d time.Duration, run *report.Run) (float64, error) {
	argv, env := e.wrkArgs(t, r, conns, d)
	out, cpu, err := runTool(ctx, r.split.load, d+60*time.Second, argv, env)
	run.Raw = out
	if err != nil {
		return cpu, err
	}
	w, err := report.ParseWrk(out)
	if err != nil {
		return cpu, err
	}
	judgeHTTP(t, r, conns, w, run)
	return cpu, nil
}

// wrkArgs returns wrk's command line and the environment of its script
// for a run of t at conns against r lasting d.
func (e *env) wrkArgs(t testDef, r *running, conns int, d time.Duration) (argv, env []string) {
	secs := int(math.Ceil(d.Seconds()))
	origin := e.originFor(t) // a host name in a DNS test
	target, url := "http://"+origin+t.path, "http://"+r.addr+"/"
	auth := r.authHeader(e)
	if r.addr == "" {
		target, url, auth = t.path, "http://"+e.origin.HTTP+"/", ""
	}
	closeEnv := "0"
	if t.newConn {
		closeEnv = "1"
	}
	// One wrk thread, or n for a test with n proxy cores.
	threads := max(1, t.proxyCores)
	argv = []string{e.lookPath["wrk"], "-t" + strconv.Itoa(threads), "-c" + strconv.Itoa(conns), "-d" + strconv.Itoa(secs) + "s",
		"--timeout", "10s", "-s", filepath.Join(e.benchDir, "wrk", "proxy.lua"), url}
	env = []string{"BENCH_TARGET=" + target, "BENCH_HOST=" + origin, "BENCH_AUTH=" + auth, "BENCH_CLOSE=" + closeEnv}
	return argv, env
}

// judgeHTTP fills run from a wrk-style summary (wrk's, or load http's) and
// decides whether it is clean.
func judgeHTTP(t testDef, r *running, conns int, w report.WrkResult, run *report.Run) {
	run.DurationS = float64(w.DurationUS) / 1e6
	run.Requests, run.Bytes = w.Requests, w.Bytes
	run.Metrics[t.rows[0].ID] = w.RequestsPerSec()
	var problems []string
	if r.closesSilently && w.Errors.Read > 0 && w.Errors.Read <= w.Requests+int64(conns) {
		// One read error per silent close after a complete response.
		run.ToleratedReadErrors = w.Errors.Read
		w.Errors.Read = 0
	}
	if n := w.Errors.Total(); n > 0 {
		problems = append(problems, fmt.Sprintf("errors: connect %d, read %d, write %d, timeout %d, status>399 %d",
			w.Errors.Connect, w.Errors.Read, w.Errors.Write, w.Errors.Timeout, w.Errors.Status))
	}
	if w.Requests == 0 {
		problems = append(problems, "no request completed")
	} else if w.Bytes < w.Requests*t.body {
		problems = append(problems, fmt.Sprintf("short responses: %d bytes for %d requests of %d", w.Bytes, w.Requests, t.body))
	}
	run.Clean = len(problems) == 0
	run.Problem = strings.Join(problems, "; ")
}

// httpResult mirrors the extra fields of the JSON line of "load http".
type httpResult struct {
	FirstError string           `json:"first_error"`
	Handshakes int64            `json:"tls_handshakes"`
	Resumed    int64            `json:"tls_resumed"`
	Curves     map[string]int64 `json:"tls_curves"`
	Cert       string           `json:"tls_cert"`
}

// loadArgs returns the flags that point the load tool at r: its port,
// credentials, TLS (with the campaign's CA; a session cache unless the
// test wants full handshakes) and SOCKS5; for "none", TLS straight to the
// origin's TLS listeners when the test talks TLS.
func (e *env) loadArgs(t testDef, r *running) []string {
	var args []string
	if r.addr != "" {
		args = append(args, "-proxy", r.addr)
		if r.auth != "" {
			args = append(args, "-auth", r.auth)
		}
	}
	if t.https {
		args = append(args, "-https", "-ca", e.rootsFile)
		if !t.fullHandshake && t.kind != kindHold {
			args = append(args, "-resume")
		}
		if t.altHost {
			args = append(args, "-alt-host", e.benchHost())
		}
	}
	if t.tls() {
		args = append(args, "-tls", "-ca", e.caFile)
		if !t.fullHandshake {
			args = append(args, "-resume")
		}
	}
	if t.listener == lnSOCKS && r.addr != "" {
		args = append(args, "-socks5")
	}
	if t.h2() {
		args = append(args, "-h2")
	}
	if t.curves != "" {
		args = append(args, "-curves", t.curves)
	}
	return args
}

// target returns the origin address the load tool aims t at: through a
// proxy the plain HTTP origin, sink, hold port or WebSocket echo (the
// proxy decrypts); straight to the origin ("none"), its TLS variant for a
// TLS test and its HTTP/2 listener for an HTTP/2 test (where a bulk run
// streams a POST to its sink).
func (e *env) target(t testDef, r *running) string {
	o := e.origin
	direct := r.addr == ""
	if t.https {
		if t.sniHost {
			if _, port, err := net.SplitHostPort(o.HTTPS); err == nil {
				return net.JoinHostPort(e.benchHost(), port)
			}
		}
		return o.HTTPS
	}
	switch t.kind {
	case kindBulk:
		switch {
		case direct && t.h2():
			return o.H2
		case direct && t.tls():
			return o.SinkTLS
		}
		return o.Sink
	case kindHold:
		switch t.hold {
		case holdH3:
			return o.HTTP
		case holdUDP:
			return o.UDP
		}
		return o.Hold
	case kindUDP:
		return o.UDP
	case kindWS, kindRate:
		if t.kind == kindRate && t.proto != protoWS {
			break // requests, as below
		}
		if direct && t.tls() {
			return o.WSS
		}
		return o.WS
	}
	switch {
	case direct && t.h2():
		return o.H2
	case direct && t.h3():
		return o.H3
	case direct && t.tls():
		return o.HTTPS
	}
	return o.HTTP
}

// loadHTTPRun runs "load http" through an HTTPS proxy (or TLS straight to
// the origin), or "load h2" for an HTTP/2 test (HTTP/2 straight to the
// origin's h2 listener without a proxy), judges it as a wrk run and
// returns the CPU seconds the load tool used.
func (e *env) loadHTTPRun(ctx context.Context, t testDef, r *running, conns int, d time.Duration, run *report.Run) (float64, error) {
	sub := "http"
	switch t.kind {
	case kindH2:
		sub = "h2"
	case kindH3:
		sub = "h3"
	}
	argv := append([]string{filepath.Join(e.bin, "load"), sub}, e.loadArgs(t, r)...)
	argv = append(argv, "-target", e.target(t, r), "-path", t.path, "-conns", strconv.Itoa(conns), "-duration", d.String())
	if t.newConn {
		argv = append(argv, "-newconn")
	}
	if t.inflight > 1 {
		argv = append(argv, "-inflight", strconv.Itoa(t.inflight))
	}
	out, cpu, err := runTool(ctx, r.split.load, d+60*time.Second, argv, nil)
	run.Raw = out
	if err != nil {
		return cpu, err
	}
	w, err := report.ParseWrk(out)
	if err != nil {
		return cpu, err
	}
	judgeHTTP(t, r, conns, w, run)
	var x httpResult
	if line, ok := strings.CutPrefix(lastLine(out), report.WrkMarker); ok && json.Unmarshal([]byte(line), &x) == nil {
		run.TLSHandshakes, run.TLSResumed = x.Handshakes, x.Resumed
		run.TLSCurves, run.TLSCert = x.Curves, x.Cert
		if !run.Clean && x.FirstError != "" {
			run.Problem += "; first: " + x.FirstError
		}
	}
	return cpu, nil
}

// wsResult mirrors the JSON line of "load ws".
type wsResult struct {
	Conns    int   `json:"conns"`
	Messages int64 `json:"messages"`
	Bytes    int64 `json:"bytes"`
	Errors   struct {
		Connect, Upgrade, Read, Write, Timeout int64
	} `json:"errors"`
	FirstError  string           `json:"first_error"`
	Upgrades    int64            `json:"upgrades"`
	CutConnects int64            `json:"cut_connects"`
	Handshakes  int64            `json:"tls_handshakes"`
	Resumed     int64            `json:"tls_resumed"`
	Curves      map[string]int64 `json:"tls_curves"`
	Cert        string           `json:"tls_cert"`
	DurationUS  int64            `json:"duration_us"`
	MsgPerSec   float64          `json:"msg_per_s"`
	Gbps        float64          `json:"gbps"`
	RTTP99US    int64            `json:"rtt_p99_us"`
}

// wsRun runs "load ws" through the proxy (or straight to the origin's
// echo) and returns the CPU seconds the load tool used. The first row of
// the test gets messages per second (Gbit/s for a Gbit/s row), a row in
// ms the round trip's 99th percentile.
func (e *env) wsRun(ctx context.Context, t testDef, r *running, conns int, d time.Duration, run *report.Run) (float64, error) {
	argv := append([]string{filepath.Join(e.bin, "load"), "ws"}, e.loadArgs(t, r)...)
	argv = append(argv, "-target", e.target(t, r), "-size", strconv.Itoa(t.wsSize), "-conns", strconv.Itoa(conns), "-duration", d.String())
	if t.newConn {
		argv = append(argv, "-newconn")
	}
	var w wsResult
	cpu, err := runLoadJSON(ctx, r, d, argv, run, &w)
	if err != nil {
		return cpu, err
	}
	run.DurationS = float64(w.DurationUS) / 1e6
	run.Requests, run.Bytes = w.Messages, w.Bytes
	run.TLSHandshakes, run.TLSResumed = w.Handshakes, w.Resumed
	run.TLSCurves, run.TLSCert = w.Curves, w.Cert
	for _, row := range t.rows {
		switch row.Unit {
		case "msg/s":
			run.Metrics[row.ID] = w.MsgPerSec
		case "Gbit/s":
			run.Metrics[row.ID] = w.Gbps
		case "ms":
			run.Metrics[row.ID] = float64(w.RTTP99US) / 1000
		}
	}
	er := w.Errors
	switch {
	case er.Connect+er.Upgrade+er.Read+er.Write+er.Timeout > 0:
		run.Problem = fmt.Sprintf("errors: connect %d, upgrade %d, read %d, write %d, timeout %d; first: %s", er.Connect, er.Upgrade, er.Read, er.Write, er.Timeout, w.FirstError)
	case w.Messages == 0:
		run.Problem = fmt.Sprintf("no message echoed (%d connection attempts still under way at the end)", w.CutConnects)
	case w.Upgrades < int64(w.Conns):
		run.Problem = fmt.Sprintf("%d of %d connections upgraded", w.Upgrades, w.Conns)
	default:
		run.Clean = true
	}
	return cpu, nil
}

// runLoadJSON runs the load tool with argv for a run of d, keeps its
// output in run.Raw and decodes its last line, the JSON of its result,
// into v. It returns the CPU seconds the tool used.
func runLoadJSON(ctx context.Context, r *running, d time.Duration, argv []string, run *report.Run, v any) (float64, error) {
	out, cpu, err := runTool(ctx, r.split.load, d+60*time.Second, argv, nil)
	run.Raw = out
	if err != nil {
		return cpu, err
	}
	if err := json.Unmarshal([]byte(lastLine(out)), v); err != nil {
		return cpu, fmt.Errorf("parse load %s output: %w", argv[1], err)
	}
	return cpu, nil
}

// udpResult mirrors the JSON line of "load udp".
type udpResult struct {
	Flows      int     `json:"flows"`
	Opened     int64   `json:"opened"`
	Datagrams  int64   `json:"datagrams"`
	Bytes      int64   `json:"bytes"`
	Lost       int64   `json:"lost"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error"`
	DurationUS int64   `json:"duration_us"`
	PerSec     float64 `json:"datagrams_per_s"`
	RTTP99US   int64   `json:"rtt_p99_us"`
}

// udpRun runs "load udp" through the proxy (CONNECT-UDP over HTTP/3 on
// its TLS port, SOCKS5 UDP ASSOCIATE on its SOCKS5 port) to the origin's
// UDP echo and returns the CPU seconds the load tool used. The first row
// gets datagrams per second, a row in ms the round trip's 99th
// percentile. A run that lost more than 1 in 1,000 datagrams, or opened
// fewer flows than asked, is not clean.
func (e *env) udpRun(ctx context.Context, t testDef, r *running, conns int, d time.Duration, run *report.Run) (float64, error) {
	argv := append([]string{filepath.Join(e.bin, "load"), "udp"}, e.loadArgs(t, r)...)
	argv = append(argv, "-target", e.target(t, r), "-size", strconv.Itoa(t.wsSize), "-conns", strconv.Itoa(conns), "-duration", d.String())
	var u udpResult
	cpu, err := runLoadJSON(ctx, r, d, argv, run, &u)
	if err != nil {
		return cpu, err
	}
	judgeUDP(t, u, run)
	return cpu, nil
}

// judgeUDP fills run from the result of "load udp" and decides whether it
// is clean.
func judgeUDP(t testDef, u udpResult, run *report.Run) {
	run.DurationS = float64(u.DurationUS) / 1e6
	run.Requests, run.Bytes = u.Datagrams, u.Bytes
	for _, row := range t.rows {
		switch row.Unit {
		case "dgram/s":
			run.Metrics[row.ID] = u.PerSec
		case "ms":
			run.Metrics[row.ID] = float64(u.RTTP99US) / 1000
		}
	}
	switch {
	case u.Errors > 0:
		run.Problem = fmt.Sprintf("%d errors, first: %s", u.Errors, u.FirstError)
	case u.Datagrams == 0:
		run.Problem = "no datagram echoed"
	case u.Opened < int64(u.Flows):
		run.Problem = fmt.Sprintf("%d of %d flows opened", u.Opened, u.Flows)
	case u.Lost*1000 > u.Datagrams:
		run.Problem = fmt.Sprintf("%d datagrams lost for %d echoed", u.Lost, u.Datagrams)
	default:
		run.Clean = true
	}
}

// bulkResult mirrors the JSON line of "load bulk".
type bulkResult struct {
	Conns       int     `json:"conns"`
	Established int     `json:"established"`
	Errors      int64   `json:"errors"`
	FirstError  string  `json:"first_error"`
	SinkBytes   int64   `json:"sink_bytes"`
	ClientBytes int64   `json:"client_bytes"`
	ElapsedS    float64 `json:"elapsed_s"`
	Gbps        float64 `json:"gbps"`
}

// bulkRun runs "load bulk" through the proxy (or straight to the sink,
// over TLS for a TLS test, over HTTP/2 for an HTTP/2 test) and returns the CPU seconds the load tool used.
func (e *env) bulkRun(ctx context.Context, t testDef, r *running, conns int, d time.Duration, run *report.Run) (float64, error) {
	argv := append([]string{filepath.Join(e.bin, "load"), "bulk"}, e.loadArgs(t, r)...)
	argv = append(argv, "-target", e.target(t, r), "-stats", "http://"+e.origin.HTTP+"/_stats",
		"-conns", strconv.Itoa(conns), "-duration", d.String())
	var b bulkResult
	cpu, err := runLoadJSON(ctx, r, d, argv, run, &b)
	if err != nil {
		return cpu, err
	}
	run.DurationS = b.ElapsedS
	run.Bytes = b.SinkBytes
	run.Metrics[t.rows[0].ID] = b.Gbps
	switch {
	case b.Errors > 0 || b.Established < b.Conns:
		run.Problem = fmt.Sprintf("%d of %d tunnels established, %d errors, first: %s", b.Established, b.Conns, b.Errors, b.FirstError)
	case b.SinkBytes <= 0:
		run.Problem = "the sink received nothing"
	default:
		run.Clean = true
	}
	return cpu, nil
}

// holdStep mirrors a JSON line of "load hold".
type holdStep struct {
	Step       int     `json:"step"`
	Open       int     `json:"open"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error"`
	ElapsedS   float64 `json:"elapsed_s"`
}

// holdRun measures the proxy's memory with no tunnel and at each step of
// open tunnels held by "load hold".
func (e *env) holdRun(ctx context.Context, pl plan, t testDef, r *running) report.Run {
	last := t.steps[len(t.steps)-1]
	run := report.Run{Test: t.id, Proxy: r.def.name, Conns: last, Start: time.Now().UTC(), Metrics: map[string]float64{}}
	fail := func(format string, args ...any) report.Run {
		run.Clean = false
		run.Problem = fmt.Sprintf(format, args...)
		return run
	}
	sleep(ctx, pl.settle)
	u, err := usage(r.p.pid())
	if err != nil {
		return fail("proxy gone: %v", err)
	}
	run.Metrics[t.memPrefix+"-0"] = float64(u.rssKB) / 1024
	base := u.rssKB
	o0, _ := usage(e.originPID)
	c0, _ := cpuSample()

	var steps []string
	for _, s := range t.steps {
		steps = append(steps, strconv.Itoa(s))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	args := append([]string{"-c", cpuList(r.split.load), filepath.Join(e.bin, "load"), "hold"}, e.loadArgs(t, r)...)
	args = append(args, "-target", e.target(t, r), "-steps", strings.Join(steps, ","), "-timeout", "9m")
	// QUIC handshakes 16 at a time: quic-go's listener refuses a
	// connection (CONNECTION_REFUSED) while 32 wait to be accepted, which
	// 64 at once on a busy proxy core reached in a smoke run.
	switch t.hold {
	case holdH3:
		args = append(args, "-h3", "-path", t.path, "-parallel", "16")
	case holdUDP:
		args = append(args, "-udp", "-parallel", "16")
	}
	if t.https {
		args = append(args, "-path", t.path, "-parallel", "16")
	}
	cmd := exec.CommandContext(ctx, "taskset", args...)
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
		return fail("start load hold: %v", err)
	}
	waited := false
	finish := func() {
		if !waited {
			waited = true
			stdin.Close()
			cmd.Wait()
		}
	}
	defer finish()
	sc := bufio.NewScanner(stdout)
	var raw []string
	var problems []string
	var rss int64
	for _, want := range t.steps {
		if !sc.Scan() {
			return fail("load hold ended before %d tunnels: %s", want, strings.TrimSpace(stderr.String()))
		}
		raw = append(raw, sc.Text())
		var st holdStep
		if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
			return fail("parse load hold output %q: %v", sc.Text(), err)
		}
		if st.Open < want || st.Errors > 0 {
			problems = append(problems, fmt.Sprintf("%d of %d tunnels open, %d errors, first: %s", st.Open, want, st.Errors, st.FirstError))
		}
		sleep(ctx, pl.settle)
		u, err := usage(r.p.pid())
		if err != nil {
			return fail("proxy gone at %d tunnels: %v", want, err)
		}
		rss = u.rssKB
		run.Metrics[fmt.Sprintf("%s-%d", t.memPrefix, want)] = float64(u.rssKB) / 1024
		if want == last {
			if kb, err := pss(r.p.pid()); err == nil {
				run.Metrics[fmt.Sprintf("%s-pss-%d", t.memPrefix, want)] = float64(kb) / 1024
			}
		}
		if want != last {
			io.WriteString(stdin, "next\n")
		}
	}
	// The proxy's CPU is read before the tunnels close, the load tool's
	// once it has exited.
	u1, _ := usage(r.p.pid())
	finish()
	c1, _ := cpuSample()
	o1, _ := usage(e.originPID)
	run.CoreBusy = busy(r.split, c0, c1)
	ours := delta(u.ticks, u1.ticks) + delta(o0.ticks, o1.ticks)
	if cmd.ProcessState != nil {
		ours += uint64((cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds() * e.clkTck)
	}
	run.OtherBusy = report.OtherPercent(c0, c1, r.split.all(), ours)
	run.ProxyRSSKB = rss
	run.Metrics[t.memPrefix+"-slope"] = float64(rss-base) / float64(last)
	run.Raw = strings.Join(raw, "\n")
	run.DurationS = time.Since(run.Start).Seconds()
	run.Clean = len(problems) == 0
	run.Problem = strings.Join(problems, "; ")
	return run
}

// logRun prints one line per run.
func (e *env) logRun(r report.Run, t testDef) {
	var figs []string
	for _, row := range t.rows {
		if v, ok := r.Metrics[row.ID]; ok {
			figs = append(figs, fmt.Sprintf("%s %s", report.FormatValue(v, max(row.Decimals, 1)), row.Unit))
		}
	}
	state := "clean"
	if !r.Clean {
		state = "NOT CLEAN: " + firstLines(r.Problem, 1)
	}
	kind := fmt.Sprintf("rep %d", r.Repeat)
	if r.Warmup {
		kind = "warm-up"
	}
	busy := ""
	if len(r.CoreBusy) == 2 {
		wait := ""
		if t.kind == kindRate && r.ProxyWaitMS > 0 {
			wait = fmt.Sprintf(", proxy waited %.0f ms for a CPU", r.ProxyWaitMS)
		}
		if t.kind == kindRate && r.MemoryLoopMS > 0 {
			wait += fmt.Sprintf(", memory loop %.1f ms", r.MemoryLoopMS)
		}
		busy = fmt.Sprintf(" [busy: proxy core %.0f%%, load core %.0f%%, other load %.0f%%%s]", r.CoreBusy[0], r.CoreBusy[1], r.OtherBusy, wait)
		if t.kind == kindRate && r.CoreBusy[1] > report.LoadBoundBusy {
			busy += fmt.Sprintf(" LOAD-BOUND (load core over %.0f%%: the latency is the load side's)", report.LoadBoundBusy)
		}
		if t.kind == kindRate && r.Slowed {
			busy += fmt.Sprintf(" SLOWED (the memory loop took over %.2f× the campaign's fastest: the machine's memory was slow)", report.SlowedFactor)
		}
		if t.kind == kindRate && r.Disturbed {
			busy += fmt.Sprintf(" DISTURBED (its busiest thread waited %.0f ms for a CPU, over %.0f%% of the %.0f ms it ran: the latency is other work's on its core)", r.ThreadWaitMS, report.DisturbedWait, r.ThreadRunMS)
		}
	}
	fmt.Fprintf(e.out, "  %-15s %-9s %5d conns %-7s %s %s%s\n", t.id, r.Proxy, r.Conns, kind, strings.Join(figs, ", "), state, busy)
}

// lastLine returns the last non-empty line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// writeFileAtomic writes data to path through a temporary file.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// delta returns after-before, or 0 when a counter went backwards (a process
// that exited between the two samples).
func delta(before, after uint64) uint64 {
	if after < before {
		return 0
	}
	return after - before
}
