//go:build linux

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
)

// TestListTest checks the destination-list test: rustle's column alone
// runs it, every other column's cells read "—", and every row has a
// figure of a benchmark.
func TestListTest(t *testing.T) {
	td := testByID(t, "lists")
	for _, p := range proxies {
		if got := runs(td, p); got != (p.name == report.Reference) {
			t.Errorf("lists runs against %s: %v", p.name, got)
		}
	}
	for _, r := range td.rows {
		for _, p := range proxies {
			if slices.Contains(r.Unsupported, p.name) == (p.name == report.Reference) {
				t.Errorf("row %s: unsupported for %v", r.ID, r.Unsupported)
			}
		}
		if !slices.ContainsFunc(td.goBench.metrics, func(m goBenchMetric) bool { return m.row == r.ID }) {
			t.Errorf("row %s: no benchmark figure", r.ID)
		}
	}
}

// TestListRows reads the output of internal/acl's list benchmarks (as the
// campaign runs them, kept in bench/report/testdata) into the rows of the
// lists test, and renders them: rustle's figures in its column, "—" in
// Squid's and no proxy's, no ratio column.
func TestListRows(t *testing.T) {
	out, err := os.ReadFile("../report/testdata/gobench/lists.txt")
	if err != nil {
		t.Fatal(err)
	}
	td := testByID(t, "lists")
	metrics := map[string]float64{}
	if problems := goBenchMetrics(td.goBench.metrics, string(out), metrics); len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	want := map[string]float64{
		"list-1k-hit": 787.1, "list-1k-miss": 818.4, "list-1k-spread": 869.0,
		"list-1m-hit": 311.0, "list-1m-miss": 347.6, "list-1m-spread": 1274,
		"list-1m-load": 0.791641831, "list-1m-mem": 37.84,
	}
	for id, v := range want {
		if got := metrics[id]; got < v*(1-1e-9) || got > v*(1+1e-9) {
			t.Errorf("%s = %v, want %v", id, got, v)
		}
	}
	if len(metrics) != len(want) {
		t.Errorf("metrics %v, want %d", metrics, len(want))
	}

	c := report.Campaign{
		Started: time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC), Repeats: 1,
		Proxies: []report.Proxy{{Name: "rustle", Label: "rustle"}, {Name: "squid", Label: "Squid"}, {Name: "none", Label: "no proxy"}},
		Rows:    td.rows,
		Runs:    []report.Run{{Test: "lists", Proxy: "rustle", Conns: 1, Repeat: 1, Clean: true, Metrics: metrics}},
	}
	var b bytes.Buffer
	if err := report.Markdown(&b, c); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, line := range []string{
		"### " + secLists + "\n\n| Test | Unit | rustle | Squid | no proxy |\n",
		"| A decision against 1,000 domains: a name under a listed domain | ns/decision | 787 | — | — |\n",
		"| A decision against 1,000,000 domains: listed names spread over the list, in turn | ns/decision | 1,274 | — | — |\n",
		"| Loading 1,000,000 domains | s | 0.79 | — | — |\n",
		"| Memory of 1,000,000 domains (heap kept) | MB | 37.8 | — | — |\n",
	} {
		if !strings.Contains(md, line) {
			t.Errorf("report lacks %q:\n%s", line, md)
		}
	}

	// A benchmark that did not run is a problem of the run, not a zero.
	if problems := goBenchMetrics(td.goBench.metrics, strings.ReplaceAll(string(out), "BenchmarkParseList", "BenchmarkOther"), map[string]float64{}); len(problems) != 2 {
		t.Errorf("without BenchmarkParseList: problems %v, want 2", problems)
	}
}

// TestListBenchRun builds internal/acl's test binary and makes a run of
// the lists test with one iteration of each benchmark: the benchmarks the
// rows name exist and report the units the rows read.
func TestListBenchRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds internal/acl's test binary and parses a million-line list")
	}
	root, err := findRoot()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{root: root, bin: t.TempDir(), out: io.Discard, clkTck: 100}
	if err := e.pickCores(); err != nil {
		t.Skip(err)
	}
	td := testByID(t, "lists")
	gb := *td.goBench
	gb.runs = slices.Clone(gb.runs)
	for i := range gb.runs {
		gb.runs[i].quickTime = "1x"
	}
	td.goBench = &gb
	var got []report.Run
	if err := e.goBenchTest(context.Background(), plan{repeats: 1, quick: true}, td, func(r report.Run) { got = append(got, r) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[0].Clean {
		t.Fatalf("runs %+v", got)
	}
	for _, r := range td.rows {
		if v, ok := got[0].Metrics[r.ID]; !ok || v <= 0 {
			t.Errorf("%s = %v, %v", r.ID, v, ok)
		}
	}
}

// TestTransparentRows reads the output of internal/server's
// BenchmarkTransparent (as the campaign runs it, kept in
// bench/report/testdata) into the transparent test's rows: rustle's
// column alone, a figure for every row.
func TestTransparentRows(t *testing.T) {
	out, err := os.ReadFile("../report/testdata/gobench/transparent.txt")
	if err != nil {
		t.Fatal(err)
	}
	td := testByID(t, "transparent")
	for _, p := range proxies {
		if got := runs(td, p); got != (p.name == report.Reference) {
			t.Errorf("transparent runs against %s: %v", p.name, got)
		}
	}
	metrics := map[string]float64{}
	if problems := goBenchMetrics(td.goBench.metrics, string(out), metrics); len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	want := map[string]float64{
		"transparent-1k-plain": 23.765, "transparent-1k": 26.495,
		"transparent-bulk-connect": 615.56, "transparent-bulk": 475.71,
		"transparent-tls-connect": 435.004, "transparent-tls": 588.408,
	}
	for _, r := range td.rows {
		v, ok := want[r.ID]
		if !ok {
			t.Errorf("row %s: no expected figure", r.ID)
			continue
		}
		if got := metrics[r.ID]; got < v*(1-1e-9) || got > v*(1+1e-9) {
			t.Errorf("%s = %v, want %v", r.ID, got, v)
		}
	}
}
