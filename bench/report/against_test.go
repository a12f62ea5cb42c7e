package report

import (
	"bytes"
	"strings"
	"testing"
)

// againstCampaign has a section of two tests whose rows compare with each
// other (Row.Against) and that only rustle runs, and a plain row outside
// any comparison.
func againstCampaign() Campaign {
	const sec = "Host names"
	c := Campaign{
		Repeats: 1, DurationS: 3,
		Proxies: []Proxy{{Name: "rustle", Label: "rustle"}, {Name: "squid", Label: "Squid"}, {Name: NoProxy, Label: "no proxy"}},
		Rows: []Row{
			{ID: "sys", Test: "sys", Section: sec, Title: "system resolver", Unit: "req/s", Selects: true, Unsupported: []string{"squid", NoProxy}},
			{ID: "cpu-sys", Test: "sys", Section: sec, Title: "system resolver, CPU", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: []string{"squid", NoProxy}},
			{ID: "dns", Test: "dns", Section: sec, Title: "cached [dns]", Unit: "req/s", Selects: true, Against: "sys", Unsupported: []string{"squid", NoProxy}},
			{ID: "cpu-dns", Test: "dns", Section: sec, Title: "cached [dns], CPU", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Against: "cpu-sys", Unsupported: []string{"squid", NoProxy}},
			{ID: "lone", Test: "lone", Section: sec, Title: "no comparison", Unit: "req/s", Selects: true, Unsupported: []string{"squid", NoProxy}},
			{ID: "plain", Test: "plain", Section: "Plain", Title: "plain", Unit: "req/s", Selects: true},
		},
	}
	add := func(test string, m map[string]float64) {
		c.Runs = append(c.Runs, Run{Test: test, Proxy: "rustle", Conns: 16, Clean: true, Metrics: m, CoreBusy: []float64{99, 50}})
	}
	add("sys", map[string]float64{"sys": 8000, "cpu-sys": 100})
	add("dns", map[string]float64{"dns": 10000, "cpu-dns": 80})
	add("plain", map[string]float64{"plain": 1})
	c.Runs = append(c.Runs, Run{Test: "plain", Proxy: "squid", Conns: 16, Clean: true, Metrics: map[string]float64{"plain": 1}, CoreBusy: []float64{99, 50}})
	return c
}

func TestMarkdownAgainstColumn(t *testing.T) {
	tests := []struct {
		name  string
		drop  string // a test whose runs are removed
		wants []string
	}{
		{
			name: "both measured",
			wants: []string{
				"| Test | Unit | rustle | Squid | no proxy | rustle, row ÷ baseline row |\n",
				"| system resolver | req/s | 8,000 | — | — | baseline |\n",
				"| system resolver, CPU | µs/req | 100.0 | — | — | baseline |\n",
				"| cached [dns] | req/s | 10,000 | — | — | ×1.25 |\n",
				"| cached [dns], CPU | µs/req | 80.0 | — | — | ×0.80 |\n",
				"| no comparison | req/s | not run | — | — |  |\n",
				// A section without comparisons keeps its columns.
				"| Test | Unit | rustle | Squid | no proxy | rustle ÷ Squid |\n",
			},
		},
		{
			name:  "baseline not measured",
			drop:  "sys",
			wants: []string{"| cached [dns] | req/s | 10,000 | — | — | n/a |\n", "| system resolver | req/s | not run | — | — | baseline |\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := againstCampaign()
			var runs []Run
			for _, r := range c.Runs {
				if r.Test != tt.drop {
					runs = append(runs, r)
				}
			}
			c.Runs = runs
			out := markdownHas(t, c, tt.wants, nil)
			if strings.Count(out, "row ÷ baseline row") != 1 {
				t.Errorf("the comparison column appears %d times, want once (its section only)", strings.Count(out, "row ÷ baseline row"))
			}
		})
	}
}

// markdownHas renders c and fails t for each of wants the report lacks
// and each of unwanted it has; it returns the report.
func markdownHas(t *testing.T, c Campaign, wants, unwanted []string) string {
	t.Helper()
	var b bytes.Buffer
	if err := Markdown(&b, c); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q; report:\n%s", want, out)
		}
	}
	for _, no := range unwanted {
		if strings.Contains(out, no) {
			t.Errorf("report has %q; report:\n%s", no, out)
		}
	}
	return out
}
