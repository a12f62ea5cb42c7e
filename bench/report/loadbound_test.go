package report

import (
	"fmt"
	"strings"
	"testing"
)

// loadBoundCampaign has one fixed-rate WebSocket rate with a CPU row and a
// latency row (LoadSensitive), measured for rustle and gost, the load
// core of each proxy's runs as given (one run each, or two for rustle
// when second is not 0).
func loadBoundCampaign(rustleLoad, rustleSecond, gostLoad float64) Campaign {
	const sec = "At a fixed offered rate: WebSocket over TLS"
	c := Campaign{
		Repeats: 1, DurationS: 3,
		Proxies: []Proxy{{Name: "rustle", Label: "rustle"}, {Name: "gost", Label: "gost"}},
		Rows: []Row{
			{ID: "wss-cpu", Test: "wss", Section: sec, Title: "at 20,000 msg/s: CPU per message", Unit: "µs/msg", Decimals: 1, LessIsBetter: true, Selects: true, Level: 20000, Against: "ws-cpu"},
			{ID: "wss-p50", Test: "wss", Section: sec, Title: "at 20,000 msg/s: latency p50", Unit: "ms", Decimals: 2, LessIsBetter: true, Level: 20000, LoadSensitive: true},
			{ID: "ws-cpu", Test: "ws", Section: "At a fixed offered rate: WebSocket", Title: "at 20,000 msg/s: CPU per message", Unit: "µs/msg", Decimals: 1, LessIsBetter: true, Selects: true, Level: 20000},
		},
	}
	add := func(proxy string, load float64, m map[string]float64) {
		c.Runs = append(c.Runs, Run{Test: "wss", Proxy: proxy, Conns: 20000, Clean: true, Metrics: m, CoreBusy: []float64{50, load}})
	}
	// rustle's CPU is the better, its median latency the worse (as when
	// the load core's queue decided it).
	add("rustle", rustleLoad, map[string]float64{"wss-cpu": 20, "wss-p50": 2.0})
	if rustleSecond != 0 {
		c.Repeats = 2
		add("rustle", rustleSecond, map[string]float64{"wss-cpu": 20, "wss-p50": 2.0})
	}
	add("gost", gostLoad, map[string]float64{"wss-cpu": 30, "wss-p50": 0.3})
	c.Runs = append(c.Runs, Run{Test: "ws", Proxy: "rustle", Conns: 20000, Clean: true, Metrics: map[string]float64{"ws-cpu": 16}, CoreBusy: []float64{40, 60}})
	return c
}

// TestLoadBound checks that a latency figure measured with the load core
// above LoadBoundBusy carries the mark, gets a footnote, and is left out
// of the ratio column and the short version's count, while the CPU row at
// the same rate and a latency measured below the threshold are compared
// as before.
func TestLoadBound(t *testing.T) {
	tests := []struct {
		name                 string
		rustle, second, gost float64
		rustleBound, gostBnd bool
		wants, unwanted      []string
	}{
		{
			name: "both below", rustle: 85, gost: LoadBoundBusy,
			wants: []string{
				"| at 20,000 msg/s: latency p50 | ms | 2.00 | 0.30 | 6.7× more |",
				"| at 20,000 msg/s: CPU per message | µs/msg | 20.0 | 30.0 | 1.5× less | ×1.25 |",
				"Against gost: rustle had the better figure in 1 of the 2 rows measured cleanly on both, the worse in 1, and 0 were within 5 % of each other.",
			},
			unwanted: []string{"2.00 †", "0.30 †", "| load-bound † |", "% † |", "left out"},
		},
		{
			name: "rustle above", rustle: 98, gost: 60, rustleBound: true,
			wants: []string{
				"| at 20,000 msg/s: latency p50 | ms | 2.00 † | 0.30 | load-bound † |",
				"| at 20,000 msg/s: CPU per message | µs/msg | 20.0 | 30.0 | 1.5× less | ×1.25 |",
				"Against gost: rustle had the better figure in 1 of the 1 rows measured cleanly on both, the worse in 0, and 0 were within 5 % of each other. 1 latency row(s) load-bound (†) on either side are left out.",
				"\n† Load-bound: in a run at this rate the load core (the load tool and the origin) was more than 90 % busy",
				"| wss at 20,000/s | rustle | 20,000/s ✓ | 20,000/s | 50 % | 98 % † | 0 % |",
				"| wss at 20,000/s | gost | 20,000/s ✓ | 20,000/s | 50 % | 60 % | 0 % |",
			},
		},
		{
			name: "gost above", rustle: 60, gost: 95.4, gostBnd: true,
			wants: []string{
				"| at 20,000 msg/s: latency p50 | ms | 2.00 | 0.30 † | load-bound † |",
				"1 of the 1 rows measured cleanly on both",
			},
		},
		{
			// One saturated run of two is enough: the median may be its.
			name: "one run of two above", rustle: 60, second: 99, gost: 60, rustleBound: true,
			wants: []string{"| at 20,000 msg/s: latency p50 | ms | 2.00 † | 0.30 | load-bound † |"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := loadBoundCampaign(tt.rustle, tt.second, tt.gost)
			figs := Figures(c)
			for _, cc := range []struct {
				row, proxy string
				want       bool
			}{
				{"wss-p50", "rustle", tt.rustleBound},
				{"wss-p50", "gost", tt.gostBnd},
				{"wss-cpu", "rustle", false},
				{"wss-cpu", "gost", false},
			} {
				cell := figs[cc.row][cc.proxy]
				if cell.LoadBound != cc.want || cell.Comparable() == cc.want || !cell.OK {
					t.Errorf("%s/%s: load-bound %v, comparable %v, OK %v; want load-bound %v", cc.row, cc.proxy, cell.LoadBound, cell.Comparable(), cell.OK, cc.want)
				}
			}
			out := markdownHas(t, c, tt.wants, tt.unwanted)
			if n := strings.Count(out, "\n"+MarkLoadBound+" Load-bound:"); n != map[bool]int{true: 1}[tt.rustleBound || tt.gostBnd] {
				t.Errorf("load-bound footnote %d times", n)
			}
		})
	}
}

// TestLoadBoundAgainst checks that a load-bound latency row compared with
// another (Row.Against) reads TextLoadBound in the comparison column, on
// either side.
func TestLoadBoundAgainst(t *testing.T) {
	for _, load := range []float64{LoadBoundBusy + 1, LoadBoundBusy} {
		t.Run(fmt.Sprint(load), func(t *testing.T) {
			c := loadBoundCampaign(load, 0, 50)
			c.Rows[1].Against = "ws-p50"
			c.Rows = append(c.Rows, Row{ID: "ws-p50", Test: "ws", Section: c.Rows[2].Section, Title: "at 20,000 msg/s: latency p50", Unit: "ms", Decimals: 2, LessIsBetter: true, Level: 20000, LoadSensitive: true})
			c.Runs[len(c.Runs)-1].Metrics["ws-p50"] = 1.0
			got := againstText(c.Rows[1], nil, Figures(c))
			want := "×2.00"
			if load > LoadBoundBusy {
				want = TextLoadBound
			}
			if got != want {
				t.Errorf("comparison cell %q, want %q", got, want)
			}
		})
	}
}
