//go:build linux

// Command campaign re-runs the benchmark campaign of the seed on this
// machine: rustle built from the tree against Squid and Tinyproxy from
// Debian (and Dante for the SOCKS5 rows), and the client straight to the
// origin ("no proxy"), and gost when -gost names a binary built from its
// source (gost.go), every proxy pinned to one core with authentication
// on, and the load generator with the origin pinned to the other core.
// Plain HTTP, HTTPS-proxy, HTTP/2-over-TLS, WebSocket (plain and over TLS)
// and SOCKS5 rows; a proxy without a mode shows "—" there. The "More
// cores" table (-tests cores) gives the proxy 1, 2, 4 and 8 cores, and 16,
// 32 and 64, as many as the machine allows with as many load cores beside
// them.
//
// It installs what is missing (wrk, squid, tinyproxy, dante-server, with
// apt-get, as root, without letting the packages start their services), builds the
// origin, the load tool and rustle, shuffles the tests with a printed
// seed, runs each test's repeats in turns across the proxies (every proxy
// once per turn), restarts the proxy for each repeat, runs a warm-up and
// a concurrency sweep in it, and writes under -out:
//
//	runs.json       every run, raw, with the campaign's settings
//	report.md       the tables, ratios, levels kept and core load
//	throughput.svg  throughput by test and proxy
//	memory.svg      proxy memory against open tunnels
//
// Every process it starts is stopped by PID when a test ends, on exit and
// on interrupt. A campaign interrupted (or stopped with Ctrl-C, to run a
// long one in parts) goes on where it stopped with -resume DIR, on the same
// machine with the same versions. See bench/README.md.
//
// Usage:
//
//	go run ./bench/campaign [-quick] [-tests http-1k,connect-bulk] [-proxies rustle,squid]
//	go run ./bench/campaign -report bench/results/DIR   # re-render a report
//	go run ./bench/campaign -resume bench/results/DIR [-rustle BIN] [-gost BIN]  # go on with it
//	go run ./bench/campaign -publish bench/results/DIR  # copy it to bench/RESULTS.md and bench/results-charts/
//	go run ./bench/campaign -report bench/results-charts   # re-render the published copy
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run() error {
	testsFlag := flag.String("tests", "all", "comma-separated groups ("+strings.Join(groups(), ", ")+"), tests ("+testIDs()+") or row IDs such as cpu-1k")
	proxiesFlag := flag.String("proxies", "", "comma-separated proxies ("+proxyNames()+"); default "+defaultProxies+", with gost before none when -gost is given")
	quick := flag.Bool("quick", false, "fewer levels, 1 repeat, 3 s runs: under 10 minutes in all")
	repeats := flag.Int("repeats", 0, "runs per level (default 3, quick 1)")
	duration := flag.Duration("duration", 0, "length of a measured run (default 10s, quick 3s)")
	seed := flag.Int64("seed", 0, "seed of the test order shuffle (default: from the clock)")
	outFlag := flag.String("out", "", "output directory (default bench/results/<date-time>)")
	rustleBin := flag.String("rustle", "", "rustle binary to use instead of building ./cmd/rustle")
	gostFlag := flag.String("gost", "", "gost binary, which the gost column needs (default $"+gostEnv+"; see bench/README.md)")
	install := flag.Bool("install", true, "install missing packages (wrk, squid, tinyproxy, dante-server) with apt-get when root")
	reportDir := flag.String("report", "", "only re-render report.md and the charts from DIR/runs.json (DIR bench/results-charts: the published bench/RESULTS.md)")
	publishDir := flag.String("publish", "", "only publish the campaign in DIR: its runs.json to bench/results-charts/, its report rendered again as bench/RESULTS.md with its charts beside the runs (tracked paths)")
	quietWait := flag.Duration("quiet-wait", 0, "before each test, wait up to this long for other load on the cores to drop below 15 % (default 60s, quick 15s; negative: never wait)")
	resumeDir := flag.String("resume", "", "go on with the campaign in DIR where it stopped (interrupted, or cut short with Ctrl-C to run in parts): its tests, proxies, seed, repeats and run length; the machine, the tool versions and every proxy's version must be the ones it ran with (checked), so give -rustle a binary of the same commit. Its runs are kept, the test it stopped in is made again")
	flag.Parse()

	switch {
	case *reportDir != "" && *publishDir != "":
		return errors.New("campaign: -report and -publish are exclusive")
	case *reportDir != "":
		return rerender(*reportDir)
	case *publishDir != "":
		return publish(*publishDir)
	}

	// prev is the campaign -resume goes on with: its settings replace the
	// flags', which may not be given beside it.
	var prev *report.Campaign
	if *resumeDir != "" {
		_, p, err := readRuns(*resumeDir)
		if err != nil {
			return err
		}
		if p.Resume == nil {
			return fmt.Errorf("campaign: -resume %s: its runs.json has no resume state (a campaign from before -resume)", *resumeDir)
		}
		var clash []string
		flag.Visit(func(f *flag.Flag) {
			switch f.Name {
			case "tests", "proxies", "quick", "repeats", "duration", "seed", "out":
				clash = append(clash, "-"+f.Name)
			}
		})
		if len(clash) > 0 {
			return fmt.Errorf("campaign: -resume takes the campaign's own settings; %s cannot be given with it", strings.Join(clash, ", "))
		}
		var names []string
		for _, px := range p.Proxies {
			names = append(names, px.Name)
		}
		*testsFlag, *proxiesFlag, *quick, *repeats, *seed, *outFlag = p.Resume.Tests, strings.Join(names, ","), p.Quick, p.Repeats, p.Seed, *resumeDir
		*duration = time.Duration(p.DurationS * float64(time.Second))
		prev = &p
	}

	pl := plan{repeats: 3, duration: 10 * time.Second, warmup: 3 * time.Second, settle: 2 * time.Second, quick: *quick}
	// maxQuiet bounds each wait for other load to leave, quietBudget all
	// of them together.
	maxQuiet, quietBudget := time.Minute, 15*time.Minute
	if *quick {
		quietBudget = 90 * time.Second
		pl.repeats, pl.duration, pl.warmup, pl.settle = 1, 3*time.Second, time.Second, time.Second
		maxQuiet = 15 * time.Second
	}
	if *quietWait != 0 {
		maxQuiet = max(0, *quietWait)
	}
	// A fixed-rate run whose memory loop is slow waits for it as a test
	// waits for other load, within a budget of the same size.
	memWait, memBudget := maxQuiet, quietBudget
	if *repeats > 0 {
		pl.repeats = *repeats
	}
	if *duration > 0 {
		pl.duration = *duration
	}
	if *seed == 0 {
		*seed = time.Now().UnixNano() % 1e10
	}
	selected, err := selectTests(*testsFlag)
	if err != nil {
		return err
	}
	gostBin := gostBinary(*gostFlag)
	if *proxiesFlag == "" {
		*proxiesFlag = defaultProxyList(gostBin != "")
	}
	var defs []*proxyDef
	for _, name := range strings.Split(*proxiesFlag, ",") {
		d := proxyByName(strings.TrimSpace(name))
		if d == nil {
			return fmt.Errorf("campaign: unknown proxy %q (%s)", name, proxyNames())
		}
		defs = append(defs, d)
	}
	if err := checkGost(defs, gostBin); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	defer stopAll()

	root, err := findRoot()
	if err != nil {
		return err
	}
	e := &env{root: root, benchDir: filepath.Join(root, "bench"), out: os.Stdout, rustleBin: *rustleBin, gostBin: gostBin, silentClosers: map[string]bool{}, memWait: memWait, memBudget: memBudget,
		lacking: map[string]map[string]string{}, extraTuning: map[string][]string{}}
	if err := e.pickCores(); err != nil {
		return err
	}
	// The "More cores" tests that do not fit on this machine are left out,
	// with a note.
	var coreNotes []string
	if wanted := coresWanted(selected); len(wanted) > 0 {
		coreNotes = coresNotes(e.corePlan, wanted, len(e.cpus))
		for _, n := range coreNotes {
			fmt.Fprintln(e.out, "NOTE: "+n)
		}
	}
	if selected = fitTests(selected, e.corePlan); len(selected) == 0 {
		return errors.New("campaign: no selected test fits on this machine")
	}
	e.clkTck = clockTicks(ctx)
	e.setIdentity()
	out := *outFlag
	if out == "" {
		out = filepath.Join(root, "bench", "results", time.Now().Format("2006-01-02T150405"))
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	if e.tmp, err = os.MkdirTemp("", "rustle-bench-"); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	defer os.RemoveAll(e.tmp)
	// Squid and Tinyproxy switch to an unprivileged user when run as root
	// and must reach their directories and the htpasswd file.
	if err := os.Chmod(e.tmp, 0o755); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	e.bin = filepath.Join(e.tmp, "bin")
	if err := os.Mkdir(e.bin, 0o755); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}

	fmt.Fprintf(e.out, "campaign: seed %d, %d test(s), proxies %s, %d repeat(s) of %s, output %s\n",
		*seed, len(selected), *proxiesFlag, pl.repeats, pl.duration, out)
	if err := e.ensureTools(ctx, append(slices.Clone(defs), parentDefs(selected)...), *install); err != nil {
		return err
	}
	if err := e.buildTools(ctx); err != nil {
		return err
	}
	if err := e.makeCredentials(); err != nil {
		return err
	}
	if err := e.makeCerts(); err != nil {
		return err
	}
	defer e.removeSystemUser()

	c := report.Campaign{
		Started: time.Now().UTC(), Seed: *seed, Quick: *quick, Repeats: pl.repeats, DurationS: pl.duration.Seconds(),
		Machine: machine(), ProxyCore: e.proxyCore, LoadCore: e.loadCore, Notes: coreNotes,
		Resume: &report.Resume{Tests: *testsFlag},
	}
	c.Parts = []report.Part{{Started: c.Started}}
	coresRun := false
	for _, t := range selected {
		if t.proxyCores > 0 {
			s := e.split(t)
			c.CoreSplits = append(c.CoreSplits, report.CoreSplit{Test: t.id, ProxyCPUs: s.proxy, LoadCPUs: s.load, Shared: s.shared})
			coresRun = true
		}
	}
	c.Tools = e.toolVersions(ctx)
	for _, t := range selected {
		c.Rows = append(c.Rows, t.rows...)
	}
	// skipped holds why a proxy is not run at all (by name), or not on one
	// of its ports (by name/listener).
	skipped := map[string]string{}
	for _, d := range defs {
		p := report.Proxy{Name: d.name, Label: d.label}
		v, err := d.prepare(ctx, e)
		if err != nil {
			p.Skipped = err.Error()
			skipped[d.name] = p.Skipped
			fmt.Fprintf(e.out, "SKIP %s: %s\n", d.name, p.Skipped)
		}
		p.Version = v
		p.Tuning = append(append([]string(nil), d.tuning...), e.extraTuning[d.name]...)
		if line := coresTuning[d.name]; line != "" && coresRun {
			p.Tuning = append(p.Tuning, line)
		}
		for _, t := range selected {
			if why := e.lacks(d.name, t); why != "" && d.has(t.needs) {
				for _, r := range t.rows {
					p.Lacks = append(p.Lacks, r.ID)
				}
				p.LacksWhy = why
			}
		}
		if p.LacksWhy != "" {
			fmt.Fprintf(e.out, "%s: %d row(s) read \"—\": %s\n", d.name, len(p.Lacks), p.LacksWhy)
		}
		c.Proxies = append(c.Proxies, p)
	}
	if idle := idleLoad(ctx); idle > 10 {
		note := fmt.Sprintf("Before the campaign the two cores were already %.0f %% busy with other work over one second: figures from this campaign are noisier than usual.", idle)
		fmt.Fprintln(e.out, "WARNING: "+note)
		c.Notes = append(c.Notes, note)
	}

	originProc, addrs, err := e.startOrigin(ctx, "origin", []int{e.loadCore})
	if err != nil {
		return err
	}
	e.origin = addrs
	defer originProc.stop(2 * time.Second)
	e.originPID = originProc.pid()
	fmt.Fprintf(e.out, "origin: http %s, sink %s, hold %s\n", e.origin.HTTP, e.origin.Sink, e.origin.Hold)

	rng := rand.New(rand.NewPCG(uint64(*seed), uint64(*seed)>>1|1))
	pairs := orderPairs(selected, defs, pl.repeats, rng, func(t testDef, d *proxyDef) bool {
		return runs(t, d) && e.lacks(d.name, t) == ""
	})
	for _, p := range pairs {
		c.Order = append(c.Order, p.key())
	}
	fmt.Fprintf(e.out, "order (seed %d): %s\n", *seed, strings.Join(c.Order, " "))
	done := 0
	if prev != nil {
		st, err := continueFrom(&c, *prev, len(coreNotes))
		if err != nil {
			return fmt.Errorf("campaign: -resume %s: %w", *resumeDir, err)
		}
		done = c.Resume.PairsDone
		e.fastestLoop = st.fastestLoop
		for _, label := range st.silentClosers {
			e.silentClosers[label] = true
		}
		maps.Copy(skipped, st.skipped)
		fmt.Fprintf(e.out, "resuming: %d of %d test/proxy pairs done, %d run(s) kept\n", done, len(pairs), len(c.Runs))
	}
	fmt.Fprintf(e.out, "estimated time: %s\n", estimate(pl, pairs[done:]).Round(10*time.Second))

	save := func() error {
		c.Finished = time.Now().UTC()
		c.Parts[len(c.Parts)-1].Finished = c.Finished
		final := c
		final.Parts = slices.Clone(c.Parts)
		final.Notes = append([]string(nil), c.Notes...)
		closers := slices.Sorted(maps.Keys(e.silentClosers))
		for _, label := range closers {
			final.Notes = append(final.Notes, label+" closes the client connection after every response without a \"Connection: close\" header (no keep-alive to clients). wrk counts each such close as a read error and reconnects; up to one such read error per request is not held against "+label+" (runs.json: tolerated_read_errors), any other error is.")
		}
		final.Notes = append(final.Notes, resumptionNotes(c)...)
		final.Notes = append(final.Notes, keyExchangeNotes(c)...)
		final.Resume = &report.Resume{Tests: c.Resume.Tests, PairsDone: c.Resume.PairsDone, Notes: slices.Clone(c.Notes), SilentClosers: closers, Skipped: maps.Clone(skipped)}
		return writeOutputs(out, final)
	}
	start := time.Now()
	for i, p := range pairs {
		if i < done {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		// The pairs before this one ran to their end (or were skipped).
		c.Resume.PairsDone = i
		if _, ok := skipped[p.def.name]; ok {
			c.Resume.PairsDone = i + 1
			continue
		}
		portKey := p.def.name + "/" + p.t.listener
		if _, ok := skipped[portKey]; ok {
			c.Resume.PairsDone = i + 1
			continue
		}
		if p.t.proxyCores > 1 {
			// A proxy that fails with n workers is skipped on that test
			// only: its one-worker port may be fine.
			portKey += "/" + p.t.id
		}
		waitStart := time.Now()
		other := e.waitQuiet(ctx, e.split(p.t).all(), min(maxQuiet, quietBudget))
		quietBudget = max(0, quietBudget-time.Since(waitStart))
		if other > quietLimit {
			note := fmt.Sprintf("%s against %s started while other processes used %.0f %% of the cores.", p.t.id, p.def.label, other)
			fmt.Fprintln(e.out, "WARNING: "+note)
			c.Notes = append(c.Notes, note)
		}
		fmt.Fprintf(e.out, "[%d/%d %s] %s against %s%s\n", i+1, len(pairs), time.Since(start).Round(time.Second), p.t.id, p.def.label, p.round(pl))
		err := e.runTest(ctx, pl, p, func(r report.Run) { c.Runs = append(c.Runs, r) })
		if err != nil && ctx.Err() == nil {
			// A proxy that cannot start or fails its check on a port is
			// skipped on that port for the rest of the campaign, with the
			// reason in the report; its other ports still run.
			reason := "did not start or failed its check: " + firstLines(err.Error(), 12)
			fmt.Fprintf(e.out, "SKIP %s on its %s port from now on: %v\n", p.def.name, p.t.listener, err)
			skipped[portKey] = reason
			for j := range c.Proxies {
				if c.Proxies[j].Name == p.def.name {
					c.Notes = append(c.Notes, fmt.Sprintf("%s stopped being run on its %s port during the campaign: %s", c.Proxies[j].Label, p.t.listener, reason))
				}
			}
		}
		if ctx.Err() == nil {
			c.Resume.PairsDone = i + 1
		}
		if err := save(); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		c.Notes = append(c.Notes, interruptedNote)
		fmt.Fprintln(e.out, "interrupted: writing what was measured")
	}
	if err := save(); err != nil {
		return err
	}
	fmt.Fprintf(e.out, "done in %s: %s\n", time.Since(start).Round(time.Second), filepath.Join(out, "report.md"))
	printSummary(e, c)
	if ctx.Err() != nil {
		return fmt.Errorf("campaign: interrupted after %d of %d test/proxy pairs (go on with -resume %s)", c.Resume.PairsDone, len(pairs), out)
	}
	return nil
}

// interruptedNote is the note of a campaign cut short; -resume drops it.
const interruptedNote = "The campaign was interrupted: some tests did not run."

// resumed is what continueFrom gives back for the env of a campaign that
// goes on: the campaign's fastest memory loop so far, the proxies seen
// closing connections silently, and the proxies and ports skipped.
type resumed struct {
	fastestLoop   float64
	silentClosers []string
	skipped       map[string]string
}

// continueFrom makes c, a campaign just set up from prev's settings, the
// continuation of prev: the same machine, tools, proxy versions and order
// (else an error naming what differs), prev's start, parts, notes and the
// runs of the pairs that ran to their end (those of a pair cut short are
// dropped, to be made again). c's notes from coreNotes on are this part's
// own and follow prev's.
func continueFrom(c *report.Campaign, prev report.Campaign, coreNotes int) (resumed, error) {
	var st resumed
	if c.Machine != prev.Machine {
		return st, fmt.Errorf("the campaign ran on %q, this is %q", prev.Machine, c.Machine)
	}
	if !slices.Equal(c.Tools, prev.Tools) {
		return st, fmt.Errorf("the tools differ: the campaign ran with %q, these are %q", prev.Tools, c.Tools)
	}
	if len(c.Proxies) != len(prev.Proxies) {
		return st, fmt.Errorf("%d proxies, the campaign had %d", len(c.Proxies), len(prev.Proxies))
	}
	for i, p := range c.Proxies {
		q := prev.Proxies[i]
		if p.Name != q.Name || p.Version != q.Version || p.Skipped != q.Skipped {
			return st, fmt.Errorf("%s is %q (%s) now, the campaign ran %s %q (%s)", p.Name, p.Version, runState(p.Skipped), q.Name, q.Version, runState(q.Skipped))
		}
	}
	if !slices.Equal(c.Order, prev.Order) {
		return st, errors.New("the tests and proxies it selects are not in the campaign's order (a campaign binary with other tests?)")
	}
	done := prev.Resume.PairsDone
	if done < 0 || done > len(prev.Order) {
		return st, fmt.Errorf("it records %d pairs done of %d", done, len(prev.Order))
	}
	if done == len(prev.Order) {
		return st, errors.New("every test/proxy pair has run: nothing is left to do")
	}
	finished := map[string]bool{}
	for _, pair := range prev.Order[:done] {
		finished[pair] = true
	}
	c.Runs = nil
	for _, r := range prev.Runs {
		// A run belongs to the pair of its repeat, or, for a test whose
		// repeats run as one pair, to the test's pair.
		if finished[pairKey(r.Test, r.Proxy, 0)] || finished[pairKey(r.Test, r.Proxy, r.Repeat)] {
			c.Runs = append(c.Runs, r)
			if r.MemoryLoopMS > 0 && (st.fastestLoop == 0 || r.MemoryLoopMS < st.fastestLoop) {
				st.fastestLoop = r.MemoryLoopMS
			}
		}
	}
	part := c.Parts[len(c.Parts)-1]
	c.Started = prev.Started
	c.Parts = append(slices.Clone(prev.Parts), part)
	own := c.Notes[min(coreNotes, len(c.Notes)):]
	var notes []string
	for _, n := range prev.Resume.Notes {
		if n != interruptedNote {
			notes = append(notes, n)
		}
	}
	c.Notes = append(notes, own...)
	c.Resume.PairsDone = done
	st.silentClosers = slices.Clone(prev.Resume.SilentClosers)
	st.skipped = maps.Clone(prev.Resume.Skipped)
	return st, nil
}

// runState describes a proxy by its skip reason: "running" when it has
// none.
func runState(s string) string {
	if s == "" {
		return "running"
	}
	return "skipped: " + s
}

// pair is one repeat of one test against one proxy, the unit of the
// campaign's order: a fresh proxy, a warm-up and every level once.
type pair struct {
	t   testDef
	def *proxyDef
	// rep is the repeat the pair runs, from 1; 0 runs every repeat in
	// one pair (the Go benchmarks, which run no proxy).
	rep int
}

// key names p in the campaign's order (runs.json's order).
func (p pair) key() string { return pairKey(p.t.id, p.def.name, p.rep) }

// pairKey names the pair of test and proxy with repeat rep: "test/proxy"
// for a pair of every repeat (rep 0), "test/proxy#rep" for one repeat.
func pairKey(test, proxy string, rep int) string {
	if rep == 0 {
		return test + "/" + proxy
	}
	return test + "/" + proxy + "#" + strconv.Itoa(rep)
}

// span returns the first and last repeat p runs: every repeat of pl for
// a pair of every repeat, else p's own.
func (p pair) span(pl plan) (first, last int) {
	if p.rep == 0 {
		return 1, pl.repeats
	}
	return p.rep, p.rep
}

// repeats returns how many repeats p runs.
func (p pair) repeats(pl plan) int {
	first, last := p.span(pl)
	return last - first + 1
}

// round describes p's repeat for the progress lines: "" for a pair of
// every repeat or a campaign of one repeat.
func (p pair) round(pl plan) string {
	if p.rep == 0 || pl.repeats == 1 {
		return ""
	}
	return fmt.Sprintf(" (repeat %d of %d)", p.rep, pl.repeats)
}

// orderPairs returns the campaign's order: the selected tests shuffled
// with rng, and within a test its repeats in turn, each of them against
// every proxy that runs the test (runs reports which) before the next
// repeat starts, the proxies in a shuffled order and then in the reverse
// order, alternately (A B C, C B A, A B C). A test's runs against every
// proxy are so made close together in time and in the same turns, and
// what slows a shared machine for minutes at a time (a neighbour's load,
// a host that slows its memory) falls on each proxy's repeats alike
// rather than on one proxy's, as it did when each pair ran all its
// repeats at once and the pairs of all tests were shuffled together.
// A Go benchmark test (no proxy) is one pair of every repeat.
func orderPairs(selected []testDef, defs []*proxyDef, repeats int, rng *rand.Rand, runs func(testDef, *proxyDef) bool) []pair {
	order := slices.Clone(selected)
	rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	var pairs []pair
	for _, t := range order {
		var ds []*proxyDef
		for _, d := range defs {
			if runs(t, d) {
				ds = append(ds, d)
			}
		}
		if t.kind == kindGoBench {
			for _, d := range ds {
				pairs = append(pairs, pair{t: t, def: d})
			}
			continue
		}
		rng.Shuffle(len(ds), func(i, j int) { ds[i], ds[j] = ds[j], ds[i] })
		for rep := 1; rep <= repeats; rep++ {
			for k := range ds {
				d := ds[k]
				if rep%2 == 0 {
					d = ds[len(ds)-1-k]
				}
				pairs = append(pairs, pair{t: t, def: d, rep: rep})
			}
		}
	}
	return pairs
}

// runs reports whether test t is run against proxy d: d has what t needs,
// and a memory test needs a proxy.
func runs(t testDef, d *proxyDef) bool {
	if !d.has(t.needs) {
		return false
	}
	if t.proxyCores > 0 && d.name == "none" {
		return false // "no proxy" has no proxy cores
	}
	return t.kind != kindHold || d.name != "none"
}

// defaultProxies are the columns a campaign runs without -proxies (and
// gost, when a gost binary is given: defaultProxyList); the rustle-ldap,
// rustle-jwt, rustle-limits, rustle-redis and rustle-authz columns are
// asked for by name.
const defaultProxies = "rustle,squid,tinyproxy,dante,mitmproxy,none"

// parentDefs returns the proxies the selected tests run as parents.
func parentDefs(selected []testDef) []*proxyDef {
	var out []*proxyDef
	for _, t := range selected {
		if d := proxyByName(t.parent); d != nil && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// proxyNames lists the proxies the campaign knows, for messages.
func proxyNames() string {
	var names []string
	for _, p := range proxies {
		names = append(names, p.name)
	}
	return strings.Join(names, ", ")
}

// estimate guesses the campaign's length from its runs, with a few seconds
// per run for setup and a proxy restart per test. Opening 9,000 TLS
// tunnels (a handshake each) takes longer than plain ones.
func estimate(pl plan, pairs []pair) time.Duration {
	var total time.Duration
	for _, p := range pairs {
		switch p.t.kind {
		case kindGoBench:
			// The test binary's build, then per repeat each invocation's
			// benchmarks with their calibration (b.Loop: about the
			// benchtime, or N iterations), and their setup.
			total += 15 * time.Second
			for _, r := range p.t.goBench.runs {
				total += time.Duration(pl.repeats) * goBenchEstimate(r, pl.quick)
			}
		case kindHold:
			if p.def.name != "none" {
				open := 2 * time.Second
				if p.t.tls() {
					open = 5 * time.Second
				}
				total += time.Duration(p.repeats(pl)) * (5*time.Second + time.Duration(len(p.t.steps)+1)*(pl.settle+open))
			}
		default:
			// Start, check and stop: about 2 s for rustle, 5 s for Squid
			// (measured in quick campaigns here).
			n := len(pl.levels(p.t)) * p.repeats(pl)
			total += 3500*time.Millisecond + pl.warmup + time.Duration(n)*(pl.duration+time.Second)
			if p.t.kind == kindRate {
				// Each run and the warm-up: connections opened before
				// the window, the drain and the pauses for the CPU
				// samples.
				total += time.Duration(n+1) * time.Second
			}
			if p.t.proxyCores > 0 {
				// An origin of its own, and Squid's SMP kids.
				total += 2 * time.Second
			}
		}
	}
	return total
}

// resumptionNotes says, for every proxy that resumed fewer than half of
// the TLS sessions the load tool offered in the tests with a session
// cache, how many it resumed: its figures there are full handshakes.
func resumptionNotes(c report.Campaign) []string {
	offered := map[string]bool{}
	for _, t := range tests {
		if t.tls() && t.newConn && !t.fullHandshake {
			offered[t.id] = true
		}
	}
	hs, res := map[string]int64{}, map[string]int64{}
	for _, r := range c.Runs {
		if offered[r.Test] {
			hs[r.Proxy] += r.TLSHandshakes
			res[r.Proxy] += r.TLSResumed
		}
	}
	var out []string
	for _, p := range c.Proxies {
		if n := hs[p.Name]; n > 0 && res[p.Name]*2 < n {
			out = append(out, fmt.Sprintf("%s resumed %s of the %s TLS handshakes in the tests that offer a session to resume (HTTPS, HTTP/2 and WebSocket, a new connection each): its figures there are full handshakes.",
				p.Label, report.FormatValue(float64(res[p.Name]), 0), report.FormatValue(float64(n), 0)))
		}
	}
	return out
}

// quietLimit is the share of the cores other processes may use when a test
// starts, in percent.
const quietLimit = 15

// waitQuiet samples the load of other processes on cpus (the next test's)
// for half a second at a time until it is at most quietLimit or maxWait
// has passed, and returns the last sample.
func (e *env) waitQuiet(ctx context.Context, cpus []int, maxWait time.Duration) float64 {
	deadline := time.Now().Add(maxWait)
	said := false
	for {
		o0, _ := usage(e.originPID)
		a, err := cpuSample()
		if err != nil {
			return 0
		}
		sleep(ctx, 500*time.Millisecond)
		b, err := cpuSample()
		if err != nil {
			return 0
		}
		o1, _ := usage(e.originPID)
		other := report.OtherPercent(a, b, cpus, delta(o0.ticks, o1.ticks))
		if other <= quietLimit || ctx.Err() != nil || time.Now().After(deadline) {
			return other
		}
		if !said {
			fmt.Fprintf(e.out, "waiting up to %s for other processes to leave the cores (%.0f %% busy)\n", time.Until(deadline).Round(time.Second), other)
			said = true
		}
	}
}

// idleLoad returns how busy the CPUs are over one second before anything
// runs, in percent of all cores.
func idleLoad(ctx context.Context) float64 {
	a, err := cpuSample()
	if err != nil {
		return 0
	}
	sleep(ctx, time.Second)
	b, err := cpuSample()
	if err != nil {
		return 0
	}
	var sum float64
	for cpu := range a {
		sum += report.BusyPercent(a[cpu], b[cpu])
	}
	return sum / float64(len(a))
}

// writeOutputs writes runs.json, report.md and the charts into dir.
func writeOutputs(dir string, c report.Campaign) error {
	js, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return fmt.Errorf("campaign: encode runs: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, "runs.json"), js); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	return render(dir, c)
}

// render writes report.md and the charts of c into dir.
func render(dir string, c report.Campaign) error {
	var b bytes.Buffer
	if err := report.Markdown(&b, c); err != nil {
		return fmt.Errorf("campaign: render report.md: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, "report.md"), b.Bytes()); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	return renderCharts(dir, c)
}

// renderCharts writes the charts of c into dir.
func renderCharts(dir string, c report.Campaign) error {
	for _, f := range []struct {
		name string
		fn   func(*bytes.Buffer, report.Campaign) error
	}{
		{report.ThroughputChart, func(b *bytes.Buffer, c report.Campaign) error { return report.ThroughputSVG(b, c) }},
		{report.MemoryChart, func(b *bytes.Buffer, c report.Campaign) error { return report.MemorySVG(b, c) }},
	} {
		var b bytes.Buffer
		if err := f.fn(&b, c); err != nil {
			return fmt.Errorf("campaign: render %s: %w", f.name, err)
		}
		if err := writeFileAtomic(filepath.Join(dir, f.name), b.Bytes()); err != nil {
			return fmt.Errorf("campaign: %w", err)
		}
	}
	return nil
}

// rerender rebuilds the report of an earlier campaign from its runs.json;
// for the published copy (bench/results-charts) it rebuilds
// bench/RESULTS.md and the charts beside the runs.
func rerender(dir string) error {
	root, _ := findRoot() // outside the repository: no published copy
	return rerenderIn(root, dir)
}

// rerenderIn is rerender for the repository at root.
func rerenderIn(root, dir string) error {
	_, c, err := readRuns(dir)
	if err != nil {
		return err
	}
	if root != "" && samePath(dir, publishedDir(root)) {
		return renderPublished(root, c)
	}
	if err := render(dir, c); err != nil {
		return err
	}
	fmt.Println(filepath.Join(dir, "report.md"))
	return nil
}

// readRuns reads and decodes dir/runs.json, returning its bytes too.
func readRuns(dir string) ([]byte, report.Campaign, error) {
	var c report.Campaign
	b, err := os.ReadFile(filepath.Join(dir, "runs.json"))
	if err != nil {
		return nil, c, fmt.Errorf("campaign: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, c, fmt.Errorf("campaign: decode %s/runs.json: %w", dir, err)
	}
	return b, c, nil
}

// The published copy of a campaign, tracked in git where bench/results is
// not: bench/RESULTS.md, and the runs and charts in bench/results-charts.
const (
	publishedReport = "RESULTS.md"
	publishedCharts = "results-charts"
)

// publishedDir returns the directory of the published runs and charts.
func publishedDir(root string) string { return filepath.Join(root, "bench", publishedCharts) }

// samePath reports whether a and b name the same directory.
func samePath(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// publish copies the campaign in dir to the tracked paths: its runs.json,
// byte for byte, into bench/results-charts, and its report and charts
// rendered again from them as bench/RESULTS.md (the chart and runs links
// pointing into bench/results-charts) and bench/results-charts/*.svg.
func publish(dir string) error {
	root, err := findRoot()
	if err != nil {
		return err
	}
	return publishTo(root, dir)
}

// publishTo is publish for the repository at root.
func publishTo(root, dir string) error {
	raw, c, err := readRuns(dir)
	if err != nil {
		return err
	}
	dest := publishedDir(root)
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	if !samePath(dir, dest) {
		if err := writeFileAtomic(filepath.Join(dest, "runs.json"), raw); err != nil {
			return fmt.Errorf("campaign: %w", err)
		}
	}
	if err := renderPublished(root, c); err != nil {
		return err
	}
	fmt.Printf("published %s: commit bench/%s and bench/%s/\n", dir, publishedReport, publishedCharts)
	return nil
}

// renderPublished writes bench/RESULTS.md and the charts of c into
// bench/results-charts.
func renderPublished(root string, c report.Campaign) error {
	dest := publishedDir(root)
	opts := report.Options{
		ChartDir: publishedCharts + "/", RunsPath: publishedCharts + "/runs.json",
		Rerender: "go run ./bench/campaign -report bench/" + publishedCharts,
	}
	var b bytes.Buffer
	if err := report.MarkdownWith(&b, c, opts); err != nil {
		return fmt.Errorf("campaign: render %s: %w", publishedReport, err)
	}
	if err := writeFileAtomic(filepath.Join(root, "bench", publishedReport), b.Bytes()); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	if err := renderCharts(dest, c); err != nil {
		return err
	}
	fmt.Println(filepath.Join(root, "bench", publishedReport))
	return nil
}

// printSummary prints the figures of every row, as in the report.
func printSummary(e *env, c report.Campaign) {
	figs := report.Figures(c)
	var hdr []string
	hdr = append(hdr, "row")
	for _, p := range c.Proxies {
		hdr = append(hdr, p.Label)
	}
	fmt.Fprintln(e.out, strings.Join(hdr, " | "))
	for _, r := range c.Rows {
		line := []string{r.ID + " (" + r.Unit + ")"}
		for _, p := range c.Proxies {
			cell := figs[r.ID][p.Name]
			txt := cell.Text
			if cell.OK && r.Selects {
				txt += fmt.Sprintf(" @%d", cell.Level.Conns)
			}
			line = append(line, txt)
		}
		fmt.Fprintln(e.out, strings.Join(line, " | "))
	}
}
