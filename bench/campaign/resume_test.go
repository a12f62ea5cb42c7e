//go:build linux

package main

import (
	"slices"
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
			Order:   []string{"http-1k/squid", "ws-64/rustle", "http-1k/rustle", "ws-64/squid"},
			Runs: []report.Run{
				{Test: "http-1k", Proxy: "squid", Conns: 64, MemoryLoopMS: 90},
				{Test: "ws-64", Proxy: "rustle", Conns: 16},
				{Test: "ws-64", Proxy: "rustle", Conns: 64, MemoryLoopMS: 80},
				{Test: "http-1k", Proxy: "rustle", Conns: 16, MemoryLoopMS: 70}, // cut short
			},
			Notes: []string{"core note", "Squid closes ...", interruptedNote},
			Parts: []report.Part{{Started: t0, Finished: t0.Add(time.Hour)}},
			Resume: &report.Resume{Tests: "plain,websocket", PairsDone: 2, Notes: []string{"core note", "part one's own note", interruptedNote},
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
				kept = append(kept, r.Test+"/"+r.Proxy)
			}
			if want := []string{"http-1k/squid", "ws-64/rustle", "ws-64/rustle"}; !slices.Equal(kept, want) {
				t.Errorf("runs kept %q, want %q (the cut-short pair's dropped)", kept, want)
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
			if c.Resume.PairsDone != 2 {
				t.Errorf("pairs done %d, want 2", c.Resume.PairsDone)
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
