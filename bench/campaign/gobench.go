//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
)

// The tests of rustle's own code (kindGoBench): Go benchmarks of one of
// its packages, run from a test binary built with go test -c, pinned to
// the proxy core with GOMAXPROCS 1 (-test.cpu 1), no proxy started. Their
// rows are rustle's alone: no other column runs the code.

// featLists is the feature of the destination-list rows: hosts_file
// lists decided in rustle's ACL (issue 31 item 2). Only rustle has it.
const featLists = "lists"

// secLists is the section of the destination-list rows.
const secLists = "Destination lists (hosts_file): a decision and a load, rustle's code alone"

// goBenchDef describes a test made of Go benchmarks.
type goBenchDef struct {
	// pkg is the package whose test binary holds the benchmarks
	// ("./internal/acl").
	pkg string
	// runs are the test binary's invocations of one measured run, in
	// order.
	runs []goBenchRun
	// metrics map the benchmarks' figures to the test's rows.
	metrics []goBenchMetric
}

// goBenchRun is one invocation of a test binary: the benchmarks it runs
// (-test.bench), for how long (-test.benchtime, a duration or "Nx"), and
// how long it takes in all with the benchmarks' setup and calibration
// (measured here, for the campaign's estimate).
type goBenchRun struct {
	bench                string
	benchtime, quickTime string
	took, quickTook      time.Duration
}

// goBenchEstimate returns how long the invocation r takes.
func goBenchEstimate(r goBenchRun, quick bool) time.Duration {
	if quick {
		return r.quickTook
	}
	return r.took
}

// goBenchMetric is where a row's figure comes from: the benchmark name as
// go test prints it, the unit of the figure on its line, and the factor
// that turns it into the row's unit.
type goBenchMetric struct {
	row, bench, unit string
	scale            float64
}

// listsNote is the note of the first row of the list section.
const listsNote = "rustle's own code, no proxy running: BenchmarkDecideList and BenchmarkParseList of internal/acl (go test -c, run pinned to the proxy core with -test.cpu 1). A decision is acl.Policy.Decide for a CONNECT to port 443 against one deny rule whose hosts are a list of N domains (the list's format: one \".name\" a line, names hN.dM.example): a name under a listed domain (found at its third lookup), a name listed nowhere (four lookups, all misses), and 65,536 names under listed domains taken in turn, spread over the list, so that the table's memory is out of the CPU's caches as under real traffic. The load is acl.ParseList of the million lines from memory (no file read); the memory is the heap the parsed set keeps after a collection. Issue 31's bounds: a decision under 1 µs, a million domains loaded in under 5 s and kept in under 100 MB."

// listTest is the destination-list test: the time of a decision against
// a list of 1,000 and 1,000,000 domains, and the load time and memory of
// the million.
func listTest() testDef {
	row := func(id, title, unit string, decimals int) report.Row {
		return report.Row{ID: id, Section: secLists, Title: title, Unit: unit, Decimals: decimals, LessIsBetter: true}
	}
	var rows []report.Row
	var metrics []goBenchMetric
	for _, n := range []struct {
		id, label string
		entries   int
	}{{"1k", "1,000", 1_000}, {"1m", "1,000,000", 1_000_000}} {
		for _, c := range []struct{ id, what string }{
			{"hit", "a name under a listed domain"},
			{"miss", "a name listed nowhere"},
			{"spread", "listed names spread over the list, in turn"},
		} {
			id := "list-" + n.id + "-" + c.id
			rows = append(rows, row(id, "A decision against "+n.label+" domains: "+c.what, "ns/decision", 0))
			metrics = append(metrics, goBenchMetric{row: id, bench: fmt.Sprintf("BenchmarkDecideList/entries=%d/%s", n.entries, c.id), unit: "ns/op", scale: 1})
		}
	}
	rows[0].Note = listsNote
	rows[len(rows)-1].Selects = true
	rows = append(rows,
		row("list-1m-load", "Loading 1,000,000 domains", "s", 2),
		row("list-1m-mem", "Memory of 1,000,000 domains (heap kept)", "MB", 1))
	metrics = append(metrics,
		goBenchMetric{row: "list-1m-load", bench: "BenchmarkParseList", unit: "ns/op", scale: 1e-9},
		goBenchMetric{row: "list-1m-mem", bench: "BenchmarkParseList", unit: "MB-heap/set", scale: 1})
	return testDef{
		id: "lists", kind: kindGoBench, needs: []string{featLists}, group: "lists",
		levels: []int{1}, quickLevels: []int{1},
		goBench: &goBenchDef{
			pkg: "./internal/acl",
			runs: []goBenchRun{
				// Six sub-benchmarks, and two lists built and parsed.
				{bench: "^BenchmarkDecideList$", benchtime: "1s", quickTime: "200ms", took: 12 * time.Second, quickTook: 6 * time.Second},
				// The million lines built, parsed once for the heap and
				// then N times.
				{bench: "^BenchmarkParseList$", benchtime: "3x", quickTime: "1x", took: 8 * time.Second, quickTook: 4 * time.Second},
			},
			metrics: metrics,
		},
		rows: rows,
	}
}

// featTransparent is the feature of the transparent rows: a listener
// the kernel redirects connections to (issue 30). Only rustle has it.
const featTransparent = "transparent"

// secTransparent is the section of the transparent rows.
const secTransparent = "Transparent listener: the same traffic redirected by nftables and through the plain port, rustle's code alone"

// transparentNote is the note of the first row of the transparent section.
const transparentNote = "BenchmarkTransparent of internal/server (go test -c, run pinned to the proxy core with -test.cpu 1; root, ip and nft): one rustle with one worker, its origins and its clients in one process in a network namespace the benchmark makes, so that a figure is the wall time of the whole exchange with client, rustle and origin sharing one core (waits included), and the two rows of a pair differ by what rustle does. The plain-port rows send what a configured client sends (an absolute-form GET, a CONNECT); the transparent rows connect to the origin's address with no proxy configured, and nftables REDIRECT sends them to rustle's transparent listener, which reads the original destination (SO_ORIGINAL_DST) and the first bytes: origin-form GETs pinned to it; a plain TCP stream; a ClientHello whose server name it learns. Issue 30 asks for these rows beside the plain port's, in the same run."

// transparentTest is the transparent listener's test: keep-alive 1 KiB
// GETs, a 16 MiB bulk connection, and a TLS connection's setup, each
// through the plain port and through a redirect.
func transparentTest() testDef {
	row := func(id, title, unit string, decimals int, less bool) report.Row {
		return report.Row{ID: id, Section: secTransparent, Title: title, Unit: unit, Decimals: decimals, LessIsBetter: less}
	}
	rows := []report.Row{
		row("transparent-1k-plain", "1 KiB keep-alive GET, absolute form to the plain port", "µs/request", 1, true),
		row("transparent-1k", "1 KiB keep-alive GET, origin form redirected to the transparent listener", "µs/request", 1, true),
		row("transparent-bulk-connect", "16 MiB from the origin, a CONNECT tunnel per transfer", "MB/s", 0, false),
		row("transparent-bulk", "16 MiB from the origin, a redirected TCP connection per transfer", "MB/s", 0, false),
		row("transparent-tls-connect", "A new TLS connection (hello out, 1 KiB back), through CONNECT", "µs/connection", 0, true),
		row("transparent-tls", "A new TLS connection, redirected: the destination and the SNI learnt", "µs/connection", 0, true),
	}
	rows[0].Note = transparentNote
	rows[len(rows)-1].Selects = true
	const b = "BenchmarkTransparent/"
	return testDef{
		id: "transparent", kind: kindGoBench, needs: []string{featTransparent}, group: "transparent",
		levels: []int{1}, quickLevels: []int{1},
		goBench: &goBenchDef{
			pkg: "./internal/server",
			runs: []goBenchRun{
				// 16 MiB transfers dominate: 2 × N of them at about
				// 500 MB/s, plus the namespace and a rustle started.
				{bench: "^BenchmarkTransparent$", benchtime: "500x", quickTime: "100x", took: 45 * time.Second, quickTook: 12 * time.Second},
			},
			metrics: []goBenchMetric{
				{row: "transparent-1k-plain", bench: b + "http-1k/plain", unit: "ns/op", scale: 1e-3},
				{row: "transparent-1k", bench: b + "http-1k/transparent", unit: "ns/op", scale: 1e-3},
				{row: "transparent-bulk-connect", bench: b + "bulk-16m/connect", unit: "MB/s", scale: 1},
				{row: "transparent-bulk", bench: b + "bulk-16m/transparent", unit: "MB/s", scale: 1},
				{row: "transparent-tls-connect", bench: b + "tls-setup/connect", unit: "ns/op", scale: 1e-3},
				{row: "transparent-tls", bench: b + "tls-setup/transparent", unit: "ns/op", scale: 1e-3},
			},
		},
		rows: rows,
	}
}

// goBenchTimeout bounds one invocation of a test binary.
const goBenchTimeout = 5 * time.Minute

// goBenchTest runs the Go benchmark test t: its test binary built once,
// then pl.repeats measured runs, each passed to record.
func (e *env) goBenchTest(ctx context.Context, pl plan, t testDef, record func(report.Run)) error {
	bin, err := e.buildGoTest(ctx, t.goBench.pkg)
	if err != nil {
		return err
	}
	for rep := 1; rep <= pl.repeats; rep++ {
		run := e.goBenchRun(ctx, pl, t, bin)
		if ctx.Err() != nil {
			return ctx.Err() // an interrupted run is not recorded
		}
		run.Repeat = rep
		e.logRun(run, t)
		record(run)
	}
	return nil
}

// buildGoTest builds the test binary of pkg into e.bin, once, and returns
// its path.
func (e *env) buildGoTest(ctx context.Context, pkg string) (string, error) {
	bin := filepath.Join(e.bin, filepath.Base(pkg)+".test")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	cmd := exec.CommandContext(ctx, "go", "test", "-c", "-trimpath", "-o", bin, pkg)
	cmd.Dir = e.root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("campaign: go test -c %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// goBenchArgs returns the command line of one invocation of the test
// binary bin.
func goBenchArgs(bin string, r goBenchRun, quick bool) []string {
	bt := r.benchtime
	if quick {
		bt = r.quickTime
	}
	return []string{bin, "-test.run", "^$", "-test.bench", r.bench, "-test.benchtime", bt, "-test.cpu", "1", "-test.benchmem"}
}

// goBenchRun makes one measured run of t with the test binary bin: its
// invocations in turn on the proxy core, the cores' busy % around them.
func (e *env) goBenchRun(ctx context.Context, pl plan, t testDef, bin string) report.Run {
	run := report.Run{Test: t.id, Proxy: "rustle", Conns: 1, Start: time.Now().UTC(), Metrics: map[string]float64{}}
	split := e.split(t)
	c0, _ := cpuSample()
	var outs []string
	var toolCPU float64
	var errs []string
	for _, r := range t.goBench.runs {
		out, cpu, err := runTool(ctx, split.proxy, goBenchTimeout, goBenchArgs(bin, r, pl.quick), nil)
		outs = append(outs, out)
		toolCPU += cpu
		if err != nil {
			errs = append(errs, fmt.Sprintf("%v: %s", err, lastLine(out)))
		}
	}
	c1, _ := cpuSample()
	run.DurationS = time.Since(run.Start).Seconds()
	run.CoreBusy = busy(split, c0, c1)
	run.OtherBusy = report.OtherPercent(c0, c1, split.all(), uint64(toolCPU*e.clkTck))
	run.Raw = strings.Join(outs, "\n")
	errs = append(errs, goBenchMetrics(t.goBench.metrics, run.Raw, run.Metrics)...)
	run.Clean = len(errs) == 0
	run.Problem = strings.Join(errs, "; ")
	return run
}

// goBenchMetrics fills metrics from the output of go test -bench, and
// returns a problem for every figure it lacks.
func goBenchMetrics(want []goBenchMetric, out string, metrics map[string]float64) []string {
	results, err := report.ParseGoBench(out)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, m := range want {
		found := false
		for _, r := range results {
			if v, ok := r.Values[m.unit]; ok && r.Name == m.bench {
				metrics[m.row] = v * m.scale
				found = true
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("no %s from %s", m.unit, m.bench))
		}
	}
	return problems
}
