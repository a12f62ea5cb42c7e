//go:build linux

package main

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
)

// TestContinueFrom checks what -resume keeps of the campaign it goes on
// with (its start, parts, notes and the runs of the pairs that ran to
// their end) and that it refuses another machine, other tools, another
// proxy version, another order or a campaign with nothing left to run.
func TestContinueFrom(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 14, 50, 0, 0, time.UTC)
	t1 := t0.Add(24 * time.Hour)
	prev := func() report.Campaign {
		return report.Campaign{
			Started: t0, Machine: "AMD EPYC, 2 cores", Tools: []string{"wrk 4.1.0", "bench/load (go1.26.8)"},
			Proxies: []report.Proxy{{Name: "rustle", Version: "at v0.0.0-abc"}, {Name: "squid", Version: "5.7"}},
			Order:   []string{"http-1k/squid#1", "list-match/none", "ws-64/rustle#1", "ws-64/rustle#2", "http-1k/rustle#1"},
			Runs: []report.Run{
				{Test: "http-1k", Proxy: "squid", Conns: 64, Repeat: 1, MemoryLoopMS: 90},
				{Test: "list-match", Proxy: "none", Repeat: 1},
				{Test: "list-match", Proxy: "none", Repeat: 2},
				{Test: "ws-64", Proxy: "rustle", Conns: 16, Repeat: 1, Warmup: true},
				{Test: "ws-64", Proxy: "rustle", Conns: 64, Repeat: 1, MemoryLoopMS: 80},
				{Test: "ws-64", Proxy: "rustle", Conns: 16, Repeat: 2, Warmup: true}, // cut short
				{Test: "ws-64", Proxy: "rustle", Conns: 64, Repeat: 2, MemoryLoopMS: 70},
			},
			Notes: []string{"core note", "Squid closes ...", interruptedNote},
			Parts: []report.Part{{Started: t0, Finished: t0.Add(time.Hour)}},
			Resume: &report.Resume{Tests: "plain,websocket", PairsDone: 3, Notes: []string{"core note", "part one's own note", interruptedNote},
				SilentClosers: []string{"Squid"}, Skipped: map[string]string{"squid/https": "did not start"}},
		}
	}
	// now is the campaign as this part set it up: the same settings, one
	// part begun at t1, the core note and a note of its own.
	now := func() report.Campaign {
		p := prev()
		return report.Campaign{
			Started: t1, Machine: p.Machine, Tools: slices.Clone(p.Tools), Proxies: slices.Clone(p.Proxies), Order: slices.Clone(p.Order),
			Notes: []string{"core note", "part two's own note"}, Parts: []report.Part{{Started: t1}}, Resume: &report.Resume{Tests: "plain,websocket"},
		}
	}
	tests := []struct {
		name    string
		change  func(prev, now *report.Campaign)
		wantErr string
	}{
		{"goes on", func(*report.Campaign, *report.Campaign) {}, ""},
		{"another machine", func(_, c *report.Campaign) { c.Machine = "Intel Xeon, 2 cores" }, "the campaign ran on"},
		{"other tools", func(_, c *report.Campaign) { c.Tools[1] = "bench/load (go1.27.0)" }, "the tools differ"},
		{"another rustle", func(_, c *report.Campaign) { c.Proxies[0].Version = "at v0.0.0-def" }, `rustle is "at v0.0.0-def"`},
		{"a proxy skipped now", func(_, c *report.Campaign) { c.Proxies[1].Skipped = "not installed" }, "squid is"},
		{"another order", func(_, c *report.Campaign) { c.Order[0], c.Order[1] = c.Order[1], c.Order[0] }, "not in the campaign's order"},
		{"nothing left", func(p, _ *report.Campaign) { p.Resume.PairsDone = len(p.Order) }, "nothing is left"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := prev(), now()
			tt.change(&p, &c)
			st, err := continueFrom(&c, p, 1)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("continueFrom: %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var kept []string
			for _, r := range c.Runs {
				kept = append(kept, r.Test+"/"+r.Proxy+"#"+strconv.Itoa(r.Repeat))
			}
			if want := []string{"http-1k/squid#1", "list-match/none#1", "list-match/none#2", "ws-64/rustle#1", "ws-64/rustle#1"}; !slices.Equal(kept, want) {
				t.Errorf("runs kept %q, want %q (the cut-short pair's, repeat 2's, dropped)", kept, want)
			}
			if !c.Started.Equal(t0) {
				t.Errorf("started %v, want the first part's %v", c.Started, t0)
			}
			if len(c.Parts) != 2 || !c.Parts[0].Started.Equal(t0) || !c.Parts[1].Started.Equal(t1) {
				t.Errorf("parts %v, want the first part's and one begun at %v", c.Parts, t1)
			}
			if want := []string{"core note", "part one's own note", "part two's own note"}; !slices.Equal(c.Notes, want) {
				t.Errorf("notes %q, want %q", c.Notes, want)
			}
			if c.Resume.PairsDone != 3 {
				t.Errorf("pairs done %d, want 3", c.Resume.PairsDone)
			}
			if st.fastestLoop != 80 {
				t.Errorf("fastest memory loop %v ms, want 80 (the cut-short pair's 70 is not kept)", st.fastestLoop)
			}
			if !slices.Equal(st.silentClosers, []string{"Squid"}) || st.skipped["squid/https"] != "did not start" {
				t.Errorf("silent closers %q, skipped %q: want the campaign's", st.silentClosers, st.skipped)
			}
		})
	}
}

// TestOrderPairs checks the campaign's order: the tests shuffled, a
// test's pairs together, each repeat against every proxy of the test
// before the next repeat (the proxies' order reversed every other
// repeat), a Go benchmark test one pair of every repeat, the same order
// for the same seed, and the pairs' names in runs.json's order.
func TestOrderPairs(t *testing.T) {
	ws, http, list := testDef{id: "ws-64"}, testDef{id: "http-1k"}, testDef{id: "list-match", kind: kindGoBench}
	a, b, c := &proxyDef{name: "a"}, &proxyDef{name: "b"}, &proxyDef{name: "c"}
	runs := func(td testDef, d *proxyDef) bool {
		if td.kind == kindGoBench {
			return d == c
		}
		return td.id == "http-1k" || d != b // b lacks what ws-64 needs
	}
	order := func(seed uint64, repeats int) []string {
		var keys []string
		for _, p := range orderPairs([]testDef{ws, http, list}, []*proxyDef{a, b, c}, repeats, rand.New(rand.NewPCG(seed, 1)), runs) {
			keys = append(keys, p.key())
		}
		return keys
	}
	for seed := range uint64(20) {
		keys := order(seed, 3)
		if !slices.Equal(keys, order(seed, 3)) {
			t.Fatalf("seed %d: two orders, %q and %q", seed, keys, order(seed, 3))
		}
		if len(keys) != 3*2+3*3+1 {
			t.Fatalf("seed %d: %d pairs %q, want 16: ws-64 against a and c, http-1k against all three, 3 repeats each, list-match once", seed, len(keys), keys)
		}
		// Group by test, in the order they come.
		var tests []string
		byTest := map[string][]string{}
		for _, k := range keys {
			test, _, _ := strings.Cut(k, "/")
			if len(tests) == 0 || tests[len(tests)-1] != test {
				if _, seen := byTest[test]; seen {
					t.Fatalf("seed %d: %s's pairs are not together: %q", seed, test, keys)
				}
				tests = append(tests, test)
			}
			byTest[test] = append(byTest[test], k)
		}
		if got := byTest["list-match"]; !slices.Equal(got, []string{"list-match/c"}) {
			t.Errorf("seed %d: list-match's pairs %q, want one pair of every repeat", seed, got)
		}
		for test, n := range map[string]int{"ws-64": 2, "http-1k": 3} {
			got := byTest[test]
			turn := func(rep int) []string {
				var proxies []string
				for _, k := range got[(rep-1)*n : rep*n] {
					_, rest, _ := strings.Cut(k, "/")
					proxy, r, _ := strings.Cut(rest, "#")
					if r != strconv.Itoa(rep) {
						t.Fatalf("seed %d: %s's pairs %q: %s in the turn of repeat %d", seed, test, got, k, rep)
					}
					proxies = append(proxies, proxy)
				}
				return proxies
			}
			first := turn(1)
			reversed := slices.Clone(first)
			slices.Reverse(reversed)
			if !slices.Equal(turn(2), reversed) || !slices.Equal(turn(3), first) {
				t.Errorf("seed %d: %s's pairs %q, want the proxies of repeat 1, reversed, then again", seed, test, got)
			}
		}
	}
	// The seed decides the order of the tests and of the proxies.
	orders := map[string]bool{}
	for seed := range uint64(20) {
		orders[strings.Join(order(seed, 1), " ")] = true
	}
	if len(orders) < 4 {
		t.Errorf("20 seeds gave %d orders, want the tests and proxies shuffled", len(orders))
	}
}

// TestBinaryVersion checks which outputs of "rustle version" name a
// version the campaign can report for a -rustle binary.
func TestBinaryVersion(t *testing.T) {
	for _, tt := range []struct{ out, want string }{
		{"rustle v0.0.0-20261207131938-df8a2f0f50ae\n", "v0.0.0-20261207131938-df8a2f0f50ae"},
		{"rustle dev-df8a2f0f50ae-dirty\n", "dev-df8a2f0f50ae-dirty"},
		{"rustle v1.2.0\n", "v1.2.0"},
		{"rustle dev\n", ""},
		{"", ""},
		{"Usage:\n  rustle [-c FILE]\n", ""},
	} {
		if got := binaryVersion(tt.out); got != tt.want {
			t.Errorf("binaryVersion(%q) = %q, want %q", tt.out, got, tt.want)
		}
	}
}
