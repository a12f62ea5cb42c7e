package report

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Chart file names written beside report.md; the report links to them.
const (
	ThroughputChart = "throughput.svg"
	MemoryChart     = "memory.svg"
)

// Caveats are printed in every report under "What these numbers do not
// show".
var Caveats = []string{
	fmt.Sprintf("One machine with 2 cores: the proxy has one core; wrk or the Go load tool and the origin share the other. Where the load core is near 100 %% busy, the load side, not the proxy, set the number (see the busy %% table); in the sections \"At a fixed offered rate\" a latency measured with the load core more than %.0f %% busy is marked %s and compared with nothing. The \"no proxy\" column is the ceiling of the load core itself.", LoadBoundBusy, MarkLoadBound),
	"Loopback only: no NIC, no interrupts on a third core, no real RTT. Tunnel and large-body figures are memory-bandwidth figures, far above what a 25 Gbit/s network carries, and none of the absolute numbers compare with the seed campaign's dedicated hosts.",
	"Shared virtual machine: absolute numbers drift from one campaign to the next, typically by ±5 to 10 %. Compare proxies within one campaign (the ratio columns), and treat differences below the noise as no difference.",
	"Closed loop at each concurrency level, but in the sections \"At a fixed offered rate\": elsewhere CPU per request is measured with the proxy fully loaded, not at the same request rate for every proxy.",
	"CPU per request is utime+stime of all the proxy's processes from /proc/PID/stat, divided by completed requests; softirq time the kernel spends on the load core is not attributed.",
	"The origin is static with Content-Length. Chunked bodies, uploads, IPv6, many origins and large header sets are not measured here.",
	"The tunnel tests (CONNECT, CONNECT over TLS, SOCKS5) measure the upload direction only, as bytes the sink received.",
	"TLS rows: the load tool is Go's TLS client (TLS 1.3 with the campaign's ECDSA P-256 certificate) on the shared load core, so every handshake costs the load side too; the proxy decrypts in user space and forwards in the clear to the origin. \"No proxy\" is TLS straight to a TLS origin. Resumed sessions are offered from Go's client session cache; whether the proxy resumed them is in runs.json (tls_resumed) and in the notes below when it mostly did not.",
	"WebSocket rows: closed loop, one message in flight per connection; msg/s counts round trips (a message and its echo), Gbit/s the echoed payload the clients received (each byte crossed the proxy twice). Client frames carry the all-zero mask key, which costs the load side nothing and the proxy nothing different (a proxy relays frames without unmasking them).",
	"HTTP/2 rows: the Go load tool's HTTP/2 client (x/net/http2's framer and HPACK over Go's TLS, ALPN h2), one stream at a time per connection (no multiplexing, as in the seed), forwarded to the HTTP/1.1 origin by the proxy; a CONNECT tunnel is one connection with one stream. \"No proxy\" is HTTP/2 straight to an HTTP/2 origin (x/net/http2's server on the load core, heavier than the hand-written HTTP/1.1 origin), and for bulk transfer a POST stream to its sink, there being no CONNECT without a proxy. Squid, Tinyproxy and Dante offer no HTTP/2 to clients: their cells read \"—\".",
	"Memory is VmRSS summed over the proxy's processes; it includes shared pages (libraries) counted once per process.",
}

// Options says where a report's links point, for a copy published away
// from the campaign's output directory.
type Options struct {
	// ChartDir is put before the chart file names in the links ("" for
	// charts beside the report, "results-charts/" for the published copy).
	ChartDir string
	// RunsPath is the raw runs file as the report names it; "" names
	// runs.json beside the report.
	RunsPath string
	// Rerender, when set, is the command that renders the report again
	// from its runs, printed at the top.
	Rerender string
}

// Markdown writes the report of c. Chart links point to ThroughputChart and
// MemoryChart in the same directory.
func Markdown(w io.Writer, c Campaign) error { return MarkdownWith(w, c, Options{}) }

// MarkdownWith writes the report of c with the links of o.
func MarkdownWith(w io.Writer, c Campaign, o Options) error {
	bw := bufio.NewWriter(w)
	runsPath := "`runs.json` beside this file"
	if o.RunsPath != "" {
		runsPath = "[`" + o.RunsPath + "`](" + o.RunsPath + ")"
	}
	figs := Figures(c)
	labels := map[string]string{}
	for _, p := range c.Proxies {
		labels[p.Name] = p.Label
	}
	var names []string
	for _, p := range c.Proxies {
		if p.Name != NoProxy && p.Name != Reference {
			names = append(names, p.Label)
		}
	}
	title := "# Benchmarks: rustle against " + joinAnd(names)
	if c.Quick {
		title += " (quick mode: a smoke run)"
	}
	fmt.Fprintf(bw, "%s\n\n", title)
	if c.Quick {
		bw.WriteString("> **Quick mode**: one repeat of a few seconds at one or two concurrency levels per test. These figures show that the harness runs; they are not a campaign's figures and are not for comparison.\n\n")
	}
	fmt.Fprintf(bw, "One campaign on one machine, %s. Raw runs: %s.", when(c), runsPath)
	if o.Rerender != "" {
		fmt.Fprintf(bw, " Rendered again from them with `%s`.", o.Rerender)
	}
	bw.WriteString("\n\n")
	if c.Machine != "" {
		fmt.Fprintf(bw, "Machine: %s.\n\n", c.Machine)
	}
	if v := versions(c); v != "" {
		fmt.Fprintf(bw, "Versions: %s.\n\n", v)
	}
	fmt.Fprintf(bw, "%s\n\n", conditions(c))
	if lines := shortVersion(c, figs); len(lines) > 0 {
		bw.WriteString("## The short version\n\n")
		for _, l := range lines {
			fmt.Fprintf(bw, "- %s\n", l)
		}
		bw.WriteString("\n")
	}

	bw.WriteString("## How it was measured\n\n")
	for _, l := range procedure(c) {
		fmt.Fprintf(bw, "- %s\n", l)
	}
	bw.WriteString("\n## Versions and tuning\n\n")
	for _, p := range c.Proxies {
		if p.Name == NoProxy {
			continue
		}
		fmt.Fprintf(bw, "**%s** %s\n", p.Label, p.Version)
		if p.Skipped != "" {
			fmt.Fprintf(bw, "- not run: %s\n", p.Skipped)
		}
		if p.LacksWhy != "" {
			fmt.Fprintf(bw, "- “%s” on %d row(s): %s\n", TextUnsupported, len(p.Lacks), p.LacksWhy)
		}
		for _, t := range p.Tuning {
			fmt.Fprintf(bw, "- %s\n", t)
		}
		bw.WriteString("\n")
	}
	if len(c.Tools) > 0 {
		bw.WriteString("**Load and origin**\n")
		for _, t := range c.Tools {
			fmt.Fprintf(bw, "- %s\n", t)
		}
		bw.WriteString("\n")
	}

	bw.WriteString("## Results\n\n")
	fmt.Fprintf(bw, "Best clean concurrency level of each proxy, median of %d run(s). ", c.Repeats)
	fmt.Fprintf(bw, "“%s” means the proxy does not support that mode; “%s” that it was not measured; “%s” that every level tried saw errors. ", TextUnsupported, TextNotRun, TextNoClean)
	bw.WriteString("The ratio columns give rustle's figure against the peer's: how many times more or less (a table has no ratio column for a peer that lacks all its modes). For CPU, memory and round-trip latency, less is better.\n\n")
	refIn := false
	var peers []Proxy
	for _, p := range c.Proxies {
		switch p.Name {
		case Reference:
			refIn = true
		case NoProxy:
		default:
			peers = append(peers, p)
		}
	}
	if !refIn {
		peers = nil
	}
	for _, sec := range sections(c.Rows) {
		fmt.Fprintf(bw, "### %s\n\n", sec)
		if coresSection(c.Rows, sec) {
			coresTable(bw, c, figs, sec)
			continue
		}
		hdr := []string{"Test", "Unit"}
		for _, p := range c.Proxies {
			hdr = append(hdr, p.Label)
		}
		// A peer without the section's mode at all (every cell "—") gets
		// its "—" column but no ratio column.
		var secPeers []Proxy
		for _, p := range peers {
			for _, r := range c.Rows {
				if r.Section == sec && figs[r.ID][p.Name].Text != TextUnsupported {
					secPeers = append(secPeers, p)
					break
				}
			}
		}
		for _, p := range secPeers {
			hdr = append(hdr, labels[Reference]+" ÷ "+p.Label)
		}
		against := againstRows(c.Rows, sec)
		if len(against) > 0 {
			hdr = append(hdr, labels[Reference]+", row ÷ baseline row")
		}
		var rows [][]string
		var notes []string
		loadBound, disturbed := false, false
		for _, r := range c.Rows {
			if r.Section != sec {
				continue
			}
			title := r.Title
			at := 0
			if oneLevel(r) {
				at = commonLevel(figs[r.ID])
			}
			if at > 0 {
				title += fmt.Sprintf(", at %s connections", FormatValue(float64(at), 0))
			}
			line := []string{title, r.Unit}
			for _, p := range c.Proxies {
				line = append(line, figs[r.ID][p.Name].Text)
				loadBound = loadBound || figs[r.ID][p.Name].LoadBound
				disturbed = disturbed || figs[r.ID][p.Name].Disturbed
			}
			for _, p := range secPeers {
				line = append(line, RatioText(figs[r.ID][Reference], figs[r.ID][p.Name]))
			}
			if len(against) > 0 {
				line = append(line, againstText(r, against, figs))
			}
			rows = append(rows, line)
			if r.Note != "" {
				notes = append(notes, r.Title+": "+r.Note)
			}
			if at > 0 {
				notes = append(notes, fmt.Sprintf("%s: read at %s connections in flight for every column, the lowest of the levels kept for the proxies of this test, so that no column's latency comes from more connections than another's (in a closed loop more connections in flight mean longer round trips); the other rows of the test are at each proxy's own kept level (at_conns).", r.Title, FormatValue(float64(at), 0)))
			}
		}
		Table(bw, hdr, rows, 2)
		if loadBound {
			fmt.Fprintf(bw, "\n%s\n", loadBoundNote)
		}
		if disturbed {
			fmt.Fprintf(bw, "\n%s\n", disturbedNote)
		}
		for _, n := range notes {
			fmt.Fprintf(bw, "\n%s\n", n)
		}
		bw.WriteString("\n")
	}

	bw.WriteString("## Concurrency kept and core load\n\n")
	bw.WriteString("For every test and proxy: the levels tried (✓ clean, ✗ not clean), the level kept (at_conns) and the median busy % of the proxy core and of the load core over the runs at that level. A load core near 100 % means wrk or the load tool and the origin, not the proxy, were the limit. \"Other load\" is the share of both cores used by processes outside the benchmark during those runs (approximate): above a few % the figure was disturbed.")
	if hasLevelRows(c.Rows) {
		bw.WriteString(" A test at a fixed offered rate has a line per rate: the rate is its level (exchanges per second), measured on its own, never chosen.")
		fmt.Fprintf(bw, " %s beside the load core's busy %% marks a rate where a run had the load core more than %.0f %% busy: its latency figures are load-bound.", MarkLoadBound, LoadBoundBusy)
		fmt.Fprintf(bw, " %s beside the proxy core's busy %% marks a rate where, after the campaign's retries, a run's proxy still had its busiest thread wait for a CPU more than %.0f %% of the time it ran: its latency figures are disturbed by other work on the proxy core.", MarkDisturbed, DisturbedWait)
		fmt.Fprintf(bw, " %s beside it marks a rate where, after the campaign's retries, the memory loop run on the proxy core before a run still took more than %.2f times the campaign's fastest until then: the machine's memory was slow, and that run's CPU per exchange was higher for it.", MarkSlowed, SlowedFactor)
	}
	bw.WriteString("\n\n")
	var rows [][]string
	var problems []string
	shown := map[string]bool{} // test@level of the fixed-rate lines written
	for _, r := range c.Rows {
		if r.Level != 0 {
			key := fmt.Sprintf("%s@%d", r.Test, r.Level)
			if shown[key] {
				continue
			}
			shown[key] = true
			rows = append(rows, rateLines(c, figs, r, &problems)...)
			continue
		}
		if !r.Selects {
			continue
		}
		for _, p := range c.Proxies {
			cell := figs[r.ID][p.Name]
			if len(cell.Levels) == 0 {
				continue
			}
			var tried []string
			for _, l := range cell.Levels {
				mark := "✓"
				if !l.Clean {
					mark = "✗"
					problems = append(problems, fmt.Sprintf("%s, %s at %d: %s", r.Test, p.Label, l.Conns, l.Problem))
				}
				tried = append(tried, fmt.Sprintf("%d %s", l.Conns, mark))
			}
			at, pb, lb, ob := "—", "—", "—", "—"
			if cell.OK {
				at = fmt.Sprint(cell.Level.Conns)
				pb = fmt.Sprintf("%.0f %%", cell.Level.CoreBusy[0])
				lb = fmt.Sprintf("%.0f %%", cell.Level.CoreBusy[1])
				ob = fmt.Sprintf("%.0f %%", cell.Level.OtherBusy)
			}
			rows = append(rows, []string{r.Test, p.Label, strings.Join(tried, ", "), at, pb, lb, ob})
		}
	}
	Table(bw, []string{"Test", "Proxy", "Levels tried", "at_conns", "Proxy core busy", "Load core busy", "Other load"}, rows, 3)
	if len(problems) > 0 {
		bw.WriteString("\nWhy levels were not clean (first problem of each):\n\n")
		for _, p := range problems {
			fmt.Fprintf(bw, "- %s\n", p)
		}
	}

	bw.WriteString("\n## Charts\n\n")
	fmt.Fprintf(bw, "![Throughput by test and proxy](%s)\n\n", o.ChartDir+ThroughputChart)
	fmt.Fprintf(bw, "![Memory against open tunnels](%s)\n\n", o.ChartDir+MemoryChart)

	bw.WriteString("## What these numbers do not show\n\n")
	for _, l := range append(append([]string(nil), Caveats...), c.Notes...) {
		fmt.Fprintf(bw, "- %s\n", l)
	}
	return bw.Flush()
}

// loadBoundNote is the footnote under a table with a load-bound figure.
var loadBoundNote = fmt.Sprintf("%s Load-bound: in a run at this rate the load core (the load tool and the origin) was more than %.0f %% busy, so the load side's queue, not the proxy, decided these latency figures. They are left out of the ratio and comparison columns (%q) and of the short version's count. The CPU per exchange beside them stands: it is the proxy's own CPU time, which does not wait in the load core's queue.", MarkLoadBound, LoadBoundBusy, TextLoadBound)

// disturbedNote is the footnote under a table with a figure disturbed by
// other work on the proxy core.
var disturbedNote = fmt.Sprintf("%s Disturbed: in a run at this rate the proxy's busiest thread waited in a run queue for a CPU more than %.0f %% of the time it ran (schedstat), and still did in the campaign's retries: other work on the proxy core, not the proxy, decided these latency figures. They are left out of the ratio and comparison columns (%q) and of the short version's count. The CPU per exchange beside them stands: it is the proxy's own CPU time, which does not count the wait.", MarkDisturbed, DisturbedWait, TextDisturbed)

// hasLevelRows reports whether any row is read at a level of its own
// (a fixed-rate row).
func hasLevelRows(rows []Row) bool {
	return slices.ContainsFunc(rows, func(r Row) bool { return r.Level != 0 })
}

// rateLines returns the lines of the core-load table for the rate of the
// fixed-rate row r, one per proxy measured at it, and adds the problem of
// an unclean one to problems.
func rateLines(c Campaign, figs map[string]map[string]Cell, r Row, problems *[]string) [][]string {
	rate := FormatValue(float64(r.Level), 0) + "/s"
	var out [][]string
	for _, p := range c.Proxies {
		cell := figs[r.ID][p.Name]
		l := cell.Level
		if l.Conns != r.Level {
			continue // not measured at this rate
		}
		mark := "✓"
		if !l.Clean {
			mark = "✗"
			*problems = append(*problems, fmt.Sprintf("%s, %s at %s: %s", r.Test, p.Label, rate, l.Problem))
		}
		lb := fmt.Sprintf("%.0f %%", l.CoreBusy[1])
		if l.LoadBound {
			lb += " " + MarkLoadBound
		}
		pb := fmt.Sprintf("%.0f %%", l.CoreBusy[0])
		if l.Disturbed {
			pb += " " + MarkDisturbed
		}
		if l.Slowed {
			pb += " " + MarkSlowed
		}
		out = append(out, []string{r.Test + " at " + rate, p.Label, rate + " " + mark, rate,
			pb, lb, fmt.Sprintf("%.0f %%", l.OtherBusy)})
	}
	return out
}

// noise is the relative difference below which two figures are called
// even in the short version.
const noise = 0.05

// shortVersion counts, for every peer, the rows where the reference proxy
// had the better figure, the worse one, or one within noise of the peer's.
func shortVersion(c Campaign, figs map[string]map[string]Cell) []string {
	ref := false
	for _, p := range c.Proxies {
		if p.Name == Reference && p.Skipped == "" {
			ref = true
		}
	}
	if !ref {
		return nil
	}
	var out []string
	for _, p := range c.Proxies {
		if p.Name == Reference || p.Name == NoProxy {
			continue
		}
		var both, better, worse, even, bound, disturbed int
		for _, r := range c.Rows {
			a, b := figs[r.ID][Reference], figs[r.ID][p.Name]
			switch {
			case !a.OK || !b.OK:
			case a.LoadBound || b.LoadBound:
				bound++
			case a.Disturbed || b.Disturbed:
				disturbed++
			}
			if !a.Comparable() || !b.Comparable() || !(a.Value > 0) || !(b.Value > 0) {
				continue
			}
			both++
			rel := a.Value/b.Value - 1
			if r.LessIsBetter {
				rel = b.Value/a.Value - 1
			}
			switch {
			case rel > noise:
				better++
			case rel < -noise:
				worse++
			default:
				even++
			}
		}
		if both == 0 {
			out = append(out, fmt.Sprintf("rustle and %s have no row measured cleanly on both.", p.Label))
			continue
		}
		line := fmt.Sprintf("Against %s: rustle had the better figure in %d of the %d rows measured cleanly on both, the worse in %d, and %d were within %.0f %% of each other.",
			p.Label, better, both, worse, even, noise*100)
		if bound > 0 {
			line += fmt.Sprintf(" %d latency row(s) load-bound (%s) on either side are left out.", bound, MarkLoadBound)
		}
		if disturbed > 0 {
			line += fmt.Sprintf(" %d latency row(s) disturbed by other work on the proxy core (%s) on either side are left out.", disturbed, MarkDisturbed)
		}
		out = append(out, line)
	}
	return out
}

// versions names the proxies' versions and the load generator's, for the
// top of the report.
func versions(c Campaign) string {
	var parts []string
	for _, p := range c.Proxies {
		switch {
		case p.Name == NoProxy || p.Version == "":
		case strings.HasPrefix(strings.ToLower(p.Version), strings.ToLower(p.Label)):
			parts = append(parts, p.Version) // "Squid Cache: Version 5.7", "tinyproxy 1.11.1"
		default:
			parts = append(parts, p.Label+" "+p.Version)
		}
	}
	for _, t := range c.Tools {
		if head, _, _ := strings.Cut(t, ","); strings.HasPrefix(head, "wrk") {
			parts = append(parts, head)
		}
	}
	for _, t := range c.Tools {
		if i := strings.Index(t, "(go1"); i >= 0 {
			if j := strings.IndexByte(t[i:], ')'); j > 0 {
				parts = append(parts, "load tool and origin built with "+t[i+1:i+j])
				break
			}
		}
	}
	return strings.Join(parts, "; ")
}

// againstRows returns the IDs of the rows of sec that another row of sec
// is compared with (Row.Against), or nil when none is.
func againstRows(rows []Row, sec string) map[string]bool {
	var out map[string]bool
	for _, r := range rows {
		if r.Section == sec && r.Against != "" {
			if out == nil {
				out = map[string]bool{}
			}
			out[r.Against] = true
		}
	}
	return out
}

// againstText is the cell of r in the "row ÷ baseline row" column: the
// reference proxy's figure on r divided by its figure on r.Against
// ("×0.91"), "baseline" on a row others are compared with, "n/a" when
// either figure is missing, "" on a row outside any comparison.
func againstText(r Row, baselines map[string]bool, figs map[string]map[string]Cell) string {
	if r.Against == "" {
		if baselines[r.ID] {
			return "baseline"
		}
		return ""
	}
	cell, base := figs[r.ID][Reference], figs[r.Against][Reference]
	if u := uncompared(cell, base); u != "" {
		return u
	}
	if !cell.OK || !base.OK || !(base.Value > 0) {
		return "n/a"
	}
	return fmt.Sprintf("×%.2f", cell.Value/base.Value)
}

// maxCores returns the largest proxy core count of the rows, 0 without a
// "More cores" row.
func maxCores(rows []Row) int {
	n := 0
	for _, r := range rows {
		n = max(n, r.Cores)
	}
	return n
}

// coresSection reports whether every row of sec is a "More cores" row.
func coresSection(rows []Row, sec string) bool {
	found := false
	for _, r := range rows {
		if r.Section == sec {
			if r.Cores == 0 {
				return false
			}
			found = true
		}
	}
	return found
}

// coresTable writes the "More cores" table of sec: one line per proxy core
// count with every proxy's figure (the seed's columns), then each proxy's
// figure divided by its own with 1 core, and the CPUs the proxy and the
// load side had.
func coresTable(bw *bufio.Writer, c Campaign, figs map[string]map[string]Cell, sec string) {
	var rows []Row
	for _, r := range c.Rows {
		if r.Section == sec {
			rows = append(rows, r)
		}
	}
	slices.SortStableFunc(rows, func(a, b Row) int { return a.Cores - b.Cores })
	var base *Row
	for i := range rows {
		if rows[i].Cores == 1 {
			base = &rows[i]
		}
	}
	var cols, scaled []Proxy
	for _, p := range c.Proxies {
		if p.Name == NoProxy {
			continue
		}
		cols = append(cols, p)
		if base != nil && figs[base.ID][p.Name].OK {
			scaled = append(scaled, p)
		}
	}
	splits := map[string]CoreSplit{}
	for _, s := range c.CoreSplits {
		splits[s.Test] = s
	}
	unit := rows[0].Unit
	hdr := []string{"Proxy cores"}
	for _, p := range cols {
		hdr = append(hdr, p.Label+" ("+unit+")")
	}
	for _, p := range scaled {
		hdr = append(hdr, p.Label+" vs 1 core")
	}
	hdr = append(hdr, "CPUs: proxy; load and origin")
	var lines [][]string
	var notes []string
	for _, r := range rows {
		line := []string{fmt.Sprint(r.Cores)}
		for _, p := range cols {
			line = append(line, figs[r.ID][p.Name].Text)
		}
		for _, p := range scaled {
			cell, one := figs[r.ID][p.Name], figs[base.ID][p.Name]
			switch {
			case cell.Text == TextUnsupported:
				line = append(line, TextUnsupported)
			case cell.OK && one.Value > 0:
				line = append(line, fmt.Sprintf("×%.2f", cell.Value/one.Value))
			default:
				line = append(line, "n/a")
			}
		}
		where := "—"
		if s, ok := splits[r.Test]; ok {
			where = CPURanges(s.ProxyCPUs) + "; " + CPURanges(s.LoadCPUs)
			if s.Shared {
				where += " (shared with the proxy)"
			}
		}
		lines = append(lines, append(line, where))
		if r.Note != "" {
			notes = append(notes, "More cores: "+r.Note)
		}
	}
	Table(bw, hdr, lines, 1)
	for _, n := range notes {
		fmt.Fprintf(bw, "\n%s\n", n)
	}
	bw.WriteString("\n")
}

// CPURanges prints CPU numbers with runs collapsed: "0", "0-7", "1,3-5".
func CPURanges(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		switch {
		case j == i:
			parts = append(parts, fmt.Sprint(cpus[i]))
		case j == i+1:
			parts = append(parts, fmt.Sprint(cpus[i]), fmt.Sprint(cpus[j]))
		default:
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

// when says when the campaign ran: its start, or the stretches of time of
// a campaign run in parts (continued with -resume).
func when(c Campaign) string {
	if len(c.Parts) < 2 {
		return c.Started.UTC().Format("2006-01-02 15:04 MST")
	}
	var spans []string
	for _, p := range c.Parts {
		a, b := p.Started.UTC(), p.Finished.UTC()
		end := b.Format("15:04")
		if b.YearDay() != a.YearDay() || b.Year() != a.Year() {
			end = b.Format("2006-01-02 15:04")
		}
		spans = append(spans, a.Format("2006-01-02 15:04")+" to "+end+" UTC")
	}
	return fmt.Sprintf("run in %d parts (each went on with -resume where the one before stopped, with the same machine, tools, proxy versions and test order): %s", len(c.Parts), strings.Join(spans, "; "))
}

// conditions is the one-line summary under the title, as in the seed.
func conditions(c Campaign) string {
	perProxy := "1 core per proxy"
	if n := maxCores(c.Rows); n > 1 {
		perProxy = fmt.Sprintf("1 core per proxy (1 to %d in the More cores table)", n)
	}
	parts := []string{perProxy, "authentication on"}
	parts = append(parts, "loopback")
	parts = append(parts, fmt.Sprintf("median of %d run(s) of %s", c.Repeats, durationText(c.DurationS)))
	parts = append(parts, fmt.Sprintf("seed %d", c.Seed))
	if c.Quick {
		parts = append(parts, "quick mode")
	}
	parts = append(parts, "campaign of "+c.Started.UTC().Format("2006-01-02"))
	return strings.Join(parts, " · ") + "."
}

// orderText says in what order the campaign ran its tests: a campaign
// whose order names repeats ("test/proxy#2") ran each test's repeats in
// turns across the proxies; an older one ran every repeat of a test
// against a proxy at once, its test/proxy pairs shuffled together.
func orderText(c Campaign) string {
	for _, pair := range c.Order {
		if strings.Contains(pair, "#") {
			return fmt.Sprintf("Tests in an order shuffled with seed %d; a test's repeats run in turns, each turn against every proxy once (the proxies' order reversed every other turn), so that a slow stretch of a shared machine falls on every proxy's runs alike; the proxy is restarted for each repeat, which starts with a warm-up run that is recorded apart and never counted.", c.Seed)
		}
	}
	return fmt.Sprintf("Test order shuffled with seed %d; the proxy is restarted before each test and each test starts with a warm-up run that is recorded apart and never counted.", c.Seed)
}

// procedure lists how the runs were made.
func procedure(c Campaign) []string {
	out := []string{
		fmt.Sprintf("Each proxy pinned to CPU %d with taskset, one worker; wrk or the Go load tool and the origin pinned to CPU %d%s.", c.ProxyCore, c.LoadCore, map[bool]string{true: " (but in the More cores tests, below)"}[len(c.CoreSplits) > 0]),
		"Authentication on for every proxy (HTTP Basic, Proxy-Authorization on every request; SOCKS5 username/password), unless its tuning below says otherwise.",
		orderText(c),
		fmt.Sprintf("A concurrency sweep per test: every level runs %d time(s) for %s; a level with any error, non-2xx response, short body or failed tunnel is not clean; the clean level with the best median is kept (at_conns).", c.Repeats, durationText(c.DurationS)),
		"Throughput: requests completed per second as wrk counts them; tunnels: bytes the sink received over the measuring window, in Gbit/s.",
		"CPU per request: utime+stime of all the proxy's processes (/proc/PID/stat) over the HTTP 1 KB runs at the kept level, divided by the requests completed; per WebSocket message the same over the 64-byte runs, divided by the messages echoed.",
		"Every test talks to one port of a freshly started proxy: the plain HTTP port, the HTTPS port (HTTP proxy over TLS; HTTP/2 when the client offers only h2 with ALPN) or the SOCKS5 port; WebSocket tests use the plain or the TLS port. HTTPS-proxy and HTTP/2 requests and WebSocket messages come from the Go load tool (wrk cannot speak TLS to a proxy), counted like wrk.",
		"Memory: VmRSS summed over all the proxy's processes with N open tunnels (CONNECT answered, one small exchange through each, then idle); the slope is (RSS at the largest N − RSS with none open) ÷ N.",
		"The busy % of both cores is recorded for every run from /proc/stat.",
	}
	if hasLevelRows(c.Rows) {
		out = append(out, "At a fixed offered rate: the Go load tool sends the same number of exchanges per second to every proxy (open loop), due at fixed times over the run, taken in order by a fixed set of connections opened before it; the latency of each runs from the time it was due, not from the time it was sent, so a proxy that holds a connection up makes every exchange due meanwhile late (no coordinated omission). The proxy's CPU is read from the first exchange due to the last one's end (its threads' schedstat, in nanoseconds; utime+stime, in clock ticks, where threads that exited during the run took more than schedstat still shows, as Tinyproxy's thread per connection does: runs.json's proxy_cpu_from says which) and divided by the exchanges completed. A run is clean when every exchange due completed without error within the run and a drain of one request timeout after it.")
		if hasMemoryLoop(c.Runs) {
			out = append(out, fmt.Sprintf("Before each fixed-rate run the load tool reads a 64 MiB array at random on the proxy's core and takes the CPU time that took (load memloop; runs.json's memory_loop_ms): on a VM whose host slows its memory for minutes at a time the same proxy work can take up to 1.8 times the CPU, and a run whose loop took more than %.2f times the fastest of the campaign until then is made again, up to twice, like a disturbed one (%s in the core-load table where it stayed slow).", SlowedFactor, MarkSlowed))
		}
	}
	if len(c.CoreSplits) > 0 {
		var where []string
		for _, s := range c.CoreSplits {
			w := fmt.Sprintf("%s: proxy on CPUs %s, load and origin on %s", s.Test, CPURanges(s.ProxyCPUs), CPURanges(s.LoadCPUs))
			if s.Shared {
				w += " (shared with the proxy)"
			}
			where = append(where, w)
		}
		out = append(out, "More cores: with n proxy cores the proxy is pinned to n CPUs, one per physical core, with n workers; wrk runs n threads, and it and an origin of the test's own (Go sizes it to its CPUs) are pinned to the other CPUs ("+strings.Join(where, "; ")+"). In the core-load table the busy % of the proxy and of the load side are averages over their CPUs.")
	}
	return out
}

// durationText prints seconds as "10 s".
func durationText(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(100 * time.Millisecond).String()
}

// sections returns the row sections in first-seen order.
func sections(rows []Row) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rows {
		if !seen[r.Section] {
			seen[r.Section] = true
			out = append(out, r.Section)
		}
	}
	return out
}

// joinAnd joins names as "A", "A and B", "A, B and C".
func joinAnd(names []string) string {
	switch len(names) {
	case 0:
		return "no peer"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// Table writes a markdown table. Columns from index numericFrom on are
// right-aligned. Pipes in cells are escaped.
func Table(w io.Writer, header []string, rows [][]string, numericFrom int) {
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	line := func(cells []string) {
		var b strings.Builder
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + esc(c) + " |")
		}
		b.WriteString("\n")
		io.WriteString(w, b.String())
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = "---"
		if i >= numericFrom {
			sep[i] = "---:"
		}
	}
	io.WriteString(w, "|"+strings.Join(sep, "|")+"|\n")
	for _, r := range rows {
		line(r)
	}
}

// hasMemoryLoop reports whether any run has a memory loop's time.
func hasMemoryLoop(runs []Run) bool {
	for _, r := range runs {
		if r.MemoryLoopMS > 0 {
			return true
		}
	}
	return false
}
