package report

import (
	"strings"
	"testing"
)

// TestDisturbedRule checks the rule: a run is disturbed when the proxy's
// busiest thread waited for a CPU more than DisturbedWait % of the time
// it ran and more than DisturbedFloor % of the window.
func TestDisturbedRule(t *testing.T) {
	at := DisturbedWait / 100 * 1000     // the most a thread that ran 1 s may wait, in ms
	floor := DisturbedFloor / 100 * 3000 // the least wait that counts in 3 s, in ms
	for _, tt := range []struct {
		name                string
		runMS, waitMS, winS float64
		want                bool
	}{
		{"no wait", 1000, 0, 3, false},
		{"quiet rustle", 1000, 30, 3, false},
		{"at the threshold", 1000, at, 3, false},
		{"just above", 1000, at + 1, 3, true},
		{"a busy loop on the core", 1000, 950, 3, true},
		{"above, under the floor", 4, floor, 3, false},
		{"above, just over the floor", 4, floor + 1, 3, true},
		{"no run, no window", 0, 0, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Disturbed(tt.runMS, tt.waitMS, tt.winS); got != tt.want {
				t.Errorf("Disturbed(%v, %v, %v) = %v, want %v", tt.runMS, tt.waitMS, tt.winS, got, tt.want)
			}
		})
	}
}

// TestDisturbed checks that a latency figure from a run disturbed by other
// work on the proxy core carries its mark, gets a footnote, a mark beside
// the proxy core's busy % and is left out of the ratio and comparison
// columns and of the short version's count, while the CPU row at the
// same rate stands and an undisturbed run is compared as before.
func TestDisturbed(t *testing.T) {
	tests := []struct {
		name                  string
		rustle, second, gost  bool // Run.Disturbed of each run
		rustleDist, gostDist  bool
		wants, unwanted       []string
		wantComparisonColumns string
	}{
		{
			name: "neither",
			wants: []string{
				"| at 20,000 msg/s: latency p50 | ms | 2.00 | 0.30 | 6.7× more | ×2.00 |",
				"| at 20,000 msg/s: CPU per message | µs/msg | 20.0 | 30.0 | 1.5× less | ×1.25 |",
				"Against gost: rustle had the better figure in 1 of the 2 rows measured cleanly on both, the worse in 1, and 0 were within 5 % of each other.",
				"| wss at 20,000/s | rustle | 20,000/s ✓ | 20,000/s | 50 % | 60 % | 0 % |",
			},
			unwanted: []string{"2.00 ‡", "0.30 ‡", TextDisturbed, "% ‡ |", "left out", "\n‡ Disturbed:"},
		},
		{
			name: "rustle disturbed", rustle: true, rustleDist: true,
			wants: []string{
				"| at 20,000 msg/s: latency p50 | ms | 2.00 ‡ | 0.30 | disturbed ‡ | disturbed ‡ |",
				"| at 20,000 msg/s: CPU per message | µs/msg | 20.0 | 30.0 | 1.5× less | ×1.25 |",
				"Against gost: rustle had the better figure in 1 of the 1 rows measured cleanly on both, the worse in 0, and 0 were within 5 % of each other. 1 latency row(s) disturbed by other work on the proxy core (‡) on either side are left out.",
				"\n‡ Disturbed: in a run at this rate the proxy's busiest thread waited in a run queue for a CPU more than 25 % of the time it ran",
				"| wss at 20,000/s | rustle | 20,000/s ✓ | 20,000/s | 50 % ‡ | 60 % | 0 % |",
				"| wss at 20,000/s | gost | 20,000/s ✓ | 20,000/s | 50 % | 60 % | 0 % |",
			},
			unwanted: []string{"0.30 ‡", "20.0 ‡"},
		},
		{
			name: "gost disturbed", gost: true, gostDist: true,
			wants: []string{
				"| at 20,000 msg/s: latency p50 | ms | 2.00 | 0.30 ‡ | disturbed ‡ | ×2.00 |",
				"1 of the 1 rows measured cleanly on both",
			},
		},
		{
			// One disturbed run of two is enough: the median may be its.
			name: "one run of two", second: true, rustleDist: true,
			wants: []string{"| at 20,000 msg/s: latency p50 | ms | 2.00 ‡ | 0.30 | disturbed ‡ |"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := loadBoundCampaign(60, 0, 60)
			// A latency row of the plain WebSocket test, which the WSS
			// latency row is compared with (Row.Against).
			c.Rows[1].Against = "ws-p50"
			c.Rows = append(c.Rows, Row{ID: "ws-p50", Test: "ws", Section: c.Rows[2].Section, Title: "at 20,000 msg/s: latency p50", Unit: "ms", Decimals: 2, LessIsBetter: true, Level: 20000, LoadSensitive: true})
			c.Runs[len(c.Runs)-1].Metrics["ws-p50"] = 1.0
			c.Runs[0].Disturbed = tt.rustle
			c.Runs[1].Disturbed = tt.gost
			if tt.second {
				second := c.Runs[0]
				second.Disturbed = true
				c.Runs = append(c.Runs, second)
				c.Repeats = 2
			}
			figs := Figures(c)
			for _, cc := range []struct {
				row, proxy string
				want       bool
			}{
				{"wss-p50", "rustle", tt.rustleDist},
				{"wss-p50", "gost", tt.gostDist},
				{"wss-cpu", "rustle", false},
				{"wss-cpu", "gost", false},
			} {
				cell := figs[cc.row][cc.proxy]
				if cell.Disturbed != cc.want || cell.Comparable() == cc.want || !cell.OK || cell.LoadBound {
					t.Errorf("%s/%s: disturbed %v, comparable %v, OK %v, load-bound %v; want disturbed %v", cc.row, cc.proxy, cell.Disturbed, cell.Comparable(), cell.OK, cell.LoadBound, cc.want)
				}
			}
			out := markdownHas(t, c, tt.wants, tt.unwanted)
			if n := strings.Count(out, "\n"+MarkDisturbed+" Disturbed:"); n != map[bool]int{true: 1}[tt.rustleDist || tt.gostDist] {
				t.Errorf("disturbed footnote %d times", n)
			}
		})
	}
}

// TestUncomparedLoadBoundFirst checks that a figure both load-bound and
// disturbed reads as load-bound in a ratio cell, whichever side it is on.
func TestUncomparedLoadBoundFirst(t *testing.T) {
	bound := Cell{OK: true, Value: 1, LoadBound: true}
	dist := Cell{OK: true, Value: 1, Disturbed: true}
	both := Cell{OK: true, Value: 1, LoadBound: true, Disturbed: true}
	plain := Cell{OK: true, Value: 2}
	for _, tt := range []struct {
		name string
		a, b Cell
		want string
	}{
		{"load-bound and disturbed", bound, dist, TextLoadBound},
		{"disturbed and load-bound", dist, bound, TextLoadBound},
		{"both on one side", both, plain, TextLoadBound},
		{"disturbed", plain, dist, TextDisturbed},
		{"neither", plain, Cell{OK: true, Value: 1}, "2.0× more"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := RatioText(tt.a, tt.b); got != tt.want {
				t.Errorf("RatioText = %q, want %q", got, tt.want)
			}
		})
	}
}
