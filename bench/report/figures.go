package report

import (
	"math"
	"slices"
)

// Cell is the figure of one row for one proxy, as the tables show it.
type Cell struct {
	// OK is true when Value holds a figure from a clean level.
	OK    bool
	Value float64
	// Text is what the table prints: the formatted value, "—" for an
	// unsupported mode, "not run" or "no clean run".
	Text string
	// Level is the concurrency level the figure comes from; its Conns is
	// the at_conns of the report.
	Level Level
	// Levels are all the levels measured for the row's test and the proxy.
	Levels []Level
	// LoadBound is true for the figure of a Row.LoadSensitive row read at a
	// level where the load core was saturated (Level.LoadBound): Text
	// carries MarkLoadBound, and no ratio, comparison or count of the
	// short version uses it (Comparable).
	LoadBound bool
	// Disturbed is true for the figure of a Row.LoadSensitive row read at
	// a level where other work on the proxy core made the proxy wait for
	// a CPU (Level.Disturbed): Text carries MarkDisturbed, and it is
	// compared with nothing either.
	Disturbed bool
}

// Comparable reports whether the cell's figure may be compared with
// another: measured cleanly and decided neither by the load side nor by
// other work on the proxy core.
func (c Cell) Comparable() bool { return c.OK && !c.LoadBound && !c.Disturbed }

// MarkLoadBound follows a load-bound figure in its cell and starts the
// footnote that explains it; TextLoadBound is the ratio or comparison cell
// that a load-bound figure leaves empty.
const (
	MarkLoadBound = "†"
	TextLoadBound = "load-bound " + MarkLoadBound
)

// MarkDisturbed follows a figure disturbed by other work on the proxy
// core and starts its footnote; TextDisturbed is the ratio or comparison
// cell that such a figure leaves empty.
const (
	MarkDisturbed = "‡"
	TextDisturbed = "disturbed " + MarkDisturbed
)

// MarkSlowed follows the proxy core's busy % in the core-load table where
// a run at that rate was Slowed: its CPU per exchange was measured while
// the machine's memory was slow.
const MarkSlowed = "§"

// uncompared returns the text of a ratio or comparison cell between a and
// b when either figure is marked (TextLoadBound, then TextDisturbed), or
// "" when neither is.
func uncompared(a, b Cell) string {
	switch {
	case a.LoadBound || b.LoadBound:
		return TextLoadBound
	case a.Disturbed || b.Disturbed:
		return TextDisturbed
	}
	return ""
}

// Cell texts other than figures.
const (
	TextUnsupported = "—"
	TextNotRun      = "not run"
	TextNoClean     = "no clean run"
)

// Figures computes the cell of every row and proxy of c, keyed by row ID
// and then proxy name. The level of a test is chosen once, on the row of
// the test that Selects, and every other row of the test reads its value
// at that level, but for a oneLevel row, read at its commonLevel.
func Figures(c Campaign) map[string]map[string]Cell {
	selector := map[string]Row{}
	for _, r := range c.Rows {
		if r.Selects {
			selector[r.Test] = r
		}
	}
	out := map[string]map[string]Cell{}
	for _, row := range c.Rows {
		out[row.ID] = map[string]Cell{}
		for _, p := range c.Proxies {
			out[row.ID][p.Name] = figure(c, row, selector[row.Test], p)
		}
	}
	for _, row := range c.Rows {
		if oneLevel(row) {
			atOneLevel(out[row.ID], row, c.Proxies)
		}
	}
	return out
}

// oneLevel reports whether row is a round-trip latency row of a
// closed-loop test (unit "ms", no Level of its own, not the row that
// selects its test's level). Such a row is read at one level for every
// proxy (commonLevel), not at each proxy's own kept level: in a closed
// loop more connections in flight mean longer round trips, so a proxy
// kept at 256 connections and a peer kept at 64 would have their
// latency compared at four times the load.
func oneLevel(row Row) bool {
	return row.Unit == "ms" && row.Level == 0 && !row.Selects
}

// commonLevel returns the level a oneLevel row is read at: the lowest of
// the levels its proxies' figures were kept at, which every proxy
// measured (each test runs the same levels for every proxy), and 0 when
// no proxy has a figure.
func commonLevel(cells map[string]Cell) int {
	lowest := 0
	for _, cell := range cells {
		if cell.OK && (lowest == 0 || cell.Level.Conns < lowest) {
			lowest = cell.Level.Conns
		}
	}
	return lowest
}

// atOneLevel reads every proxy's cell of the oneLevel row at its
// commonLevel.
func atOneLevel(cells map[string]Cell, row Row, proxies []Proxy) {
	at := commonLevel(cells)
	if at == 0 {
		return
	}
	for _, p := range proxies {
		cell := cells[p.Name]
		if cell.Text == TextUnsupported || len(cell.Levels) == 0 {
			continue
		}
		cells[p.Name] = levelFigure(row, cell.Levels, at)
	}
}

// figure computes one cell.
func figure(c Campaign, row, sel Row, p Proxy) Cell {
	if row.unsupported(p.Name) || slices.Contains(p.Lacks, row.ID) {
		return Cell{Text: TextUnsupported}
	}
	if p.Skipped != "" {
		return Cell{Text: TextNotRun}
	}
	levels := Levels(c.Runs, row.Test, p.Name)
	if len(levels) == 0 {
		return Cell{Text: TextNotRun}
	}
	if row.Level != 0 {
		return levelFigure(row, levels, row.Level)
	}
	if sel.ID == "" {
		sel = row
	}
	best, ok := Best(levels, sel.ID, sel.LessIsBetter)
	if !ok {
		return Cell{Text: TextNoClean, Levels: levels}
	}
	v, ok := best.Values[row.ID]
	if !ok {
		return Cell{Text: TextNoClean, Level: best, Levels: levels}
	}
	return Cell{OK: true, Value: v, Text: FormatValue(v, row.Decimals), Level: best, Levels: levels}
}

// levelFigure computes the cell of a row read at the level at: its own
// (Row.Level), or a oneLevel row's commonLevel.
func levelFigure(row Row, levels []Level, at int) Cell {
	i := slices.IndexFunc(levels, func(l Level) bool { return l.Conns == at })
	if i < 0 {
		return Cell{Text: TextNotRun, Levels: levels}
	}
	l := levels[i]
	v, ok := l.Values[row.ID]
	if !l.Clean || !ok || math.IsNaN(v) {
		return Cell{Text: TextNoClean, Level: l, Levels: levels}
	}
	cell := Cell{OK: true, Value: v, Text: FormatValue(v, row.Decimals), Level: l, Levels: levels}
	if row.LoadSensitive && l.LoadBound {
		cell.LoadBound = true
		cell.Text += " " + MarkLoadBound
	}
	if row.LoadSensitive && l.Disturbed {
		cell.Disturbed = true
		cell.Text += " " + MarkDisturbed
	}
	return cell
}

// RatioText returns the ratio cell of the reference proxy against peer for
// one row: "3.6× more", "11× less", "—" when either lacks the mode,
// TextLoadBound when either figure is load-bound, TextDisturbed when either
// is disturbed, or "n/a" when either has no figure.
func RatioText(ref, peer Cell) string {
	if ref.Text == TextUnsupported || peer.Text == TextUnsupported {
		return TextUnsupported
	}
	if u := uncompared(ref, peer); u != "" {
		return u
	}
	if !ref.OK || !peer.OK {
		return "n/a"
	}
	return Ratio(ref.Value, peer.Value)
}
