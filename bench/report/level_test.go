package report

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// rateCampaign has a test at two fixed offered rates (1,000 and 5,000 per
// second): each rate has its own rows, read at that rate whatever the
// other one measured; Squid's run at 5,000 is not clean, and gost ran at
// 1,000 only.
func rateCampaign() Campaign {
	const sec = "At a fixed offered rate: plain HTTP, 1 KB"
	c := Campaign{
		Started: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC), Seed: 3, Repeats: 1, DurationS: 3,
		Proxies: []Proxy{
			{Name: "rustle", Label: "rustle"},
			{Name: "squid", Label: "Squid"},
			{Name: "gost", Label: "gost"},
		},
		Rows: []Row{
			{ID: "rate-1k-1000-cpu", Test: "rate-1k", Section: sec, Title: "1,000 req/s: CPU per request", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Selects: true, Level: 1000},
			{ID: "rate-1k-1000-p99", Test: "rate-1k", Section: sec, Title: "1,000 req/s: latency p99", Unit: "ms", Decimals: 2, LessIsBetter: true, Level: 1000},
			{ID: "rate-1k-5000-cpu", Test: "rate-1k", Section: sec, Title: "5,000 req/s: CPU per request", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Level: 5000},
			{ID: "rate-1k-5000-p99", Test: "rate-1k", Section: sec, Title: "5,000 req/s: latency p99", Unit: "ms", Decimals: 2, LessIsBetter: true, Level: 5000},
		},
	}
	add := func(proxy string, rate int, clean bool, m map[string]float64) {
		r := Run{Test: "rate-1k", Proxy: proxy, Conns: rate, Clean: clean, Metrics: m, CoreBusy: []float64{20, 30}}
		if !clean {
			r.Problem = "1,200 of 15,000 exchanges unsent"
		}
		c.Runs = append(c.Runs, r)
	}
	add("rustle", 1000, true, map[string]float64{"rate-1k-1000-cpu": 30, "rate-1k-1000-p99": 0.5})
	add("rustle", 5000, true, map[string]float64{"rate-1k-5000-cpu": 22, "rate-1k-5000-p99": 0.9})
	add("squid", 1000, true, map[string]float64{"rate-1k-1000-cpu": 90, "rate-1k-1000-p99": 0.6})
	add("squid", 5000, false, map[string]float64{"rate-1k-5000-cpu": 80, "rate-1k-5000-p99": 900})
	add("gost", 1000, true, map[string]float64{"rate-1k-1000-cpu": 150, "rate-1k-1000-p99": 2})
	// A warm-up never counts.
	c.Runs = append(c.Runs, Run{Test: "rate-1k", Proxy: "gost", Conns: 5000, Warmup: true, Clean: true, Metrics: map[string]float64{"rate-1k-5000-cpu": 1}})
	return c
}

func TestFiguresAtLevel(t *testing.T) {
	f := Figures(rateCampaign())
	got := map[string]string{}
	for row, m := range f {
		for p, c := range m {
			got[row+"/"+p] = c.Text
		}
	}
	// The 5,000 rows are not read at 1,000 (where rustle's and Squid's
	// CPU per request is worse), nor the 1,000 rows at 5,000; Squid's
	// unclean 5,000 is no figure; gost did not run at 5,000.
	want := map[string]string{
		"rate-1k-1000-cpu/rustle": "30.0", "rate-1k-1000-cpu/squid": "90.0", "rate-1k-1000-cpu/gost": "150.0",
		"rate-1k-1000-p99/rustle": "0.50", "rate-1k-1000-p99/squid": "0.60", "rate-1k-1000-p99/gost": "2.00",
		"rate-1k-5000-cpu/rustle": "22.0", "rate-1k-5000-cpu/squid": TextNoClean, "rate-1k-5000-cpu/gost": TextNotRun,
		"rate-1k-5000-p99/rustle": "0.90", "rate-1k-5000-p99/squid": TextNoClean, "rate-1k-5000-p99/gost": TextNotRun,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Figures texts (-want +got):\n%s", diff)
	}
	if l := f["rate-1k-5000-p99"]["rustle"].Level.Conns; l != 5000 {
		t.Errorf("the 5,000 row read at level %d", l)
	}
}

func TestMarkdownRateLines(t *testing.T) {
	var b bytes.Buffer
	if err := Markdown(&b, rateCampaign()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| 1,000 req/s: CPU per request | µs/req | 30.0 | 90.0 | 150.0 | 3.0× less | 5.0× less |\n",
		"| 5,000 req/s: latency p99 | ms | 0.90 | no clean run | not run | n/a | n/a |\n",
		"| rate-1k at 1,000/s | rustle | 1,000/s ✓ | 1,000/s | 20 % | 30 % | 0 % |\n",
		"| rate-1k at 5,000/s | Squid | 5,000/s ✗ | 5,000/s | 20 % | 30 % | 0 % |\n",
		"- rate-1k, Squid at 5,000/s: 1,200 of 15,000 exchanges unsent\n",
		"A test at a fixed offered rate has a line per rate",
		"- At a fixed offered rate: the Go load tool sends",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q; report:\n%s", want, out)
		}
	}
	if strings.Contains(out, "| rate-1k at 5,000/s | gost |") {
		t.Error("a line for gost at 5,000/s, where only its warm-up ran")
	}
}

// TestOneLevelLatency: a closed-loop latency row is read at one level for
// every column, the lowest of the levels the proxies were kept at, while
// the test's other rows stay at each proxy's own; a proxy whose runs at
// that level were not clean has no figure on the row.
func TestOneLevelLatency(t *testing.T) {
	const sec = "WebSocket over TLS"
	c := Campaign{
		Started: time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC), Seed: 3, Repeats: 1, DurationS: 3,
		Proxies: []Proxy{
			{Name: "rustle", Label: "rustle"},
			{Name: "squid", Label: "Squid"},
			{Name: "gost", Label: "gost"},
		},
		Rows: []Row{
			{ID: "wss-64", Test: "wss-64", Section: sec, Title: "WebSocket, 64-byte messages", Unit: "msg/s", Selects: true},
			{ID: "wss-p99", Test: "wss-64", Section: sec, Title: "WebSocket round trip, 64-byte messages (p99)", Unit: "ms", Decimals: 1, LessIsBetter: true},
			{ID: "wss-cpu", Test: "wss-64", Section: sec, Title: "CPU cost per WebSocket message", Unit: "µs/msg", Decimals: 1, LessIsBetter: true},
		},
	}
	add := func(proxy string, conns int, clean bool, msgs, p99, cpu float64) {
		r := Run{Test: "wss-64", Proxy: proxy, Conns: conns, Clean: clean, CoreBusy: []float64{90, 90},
			Metrics: map[string]float64{"wss-64": msgs, "wss-p99": p99, "wss-cpu": cpu}}
		if !clean {
			r.Problem = "3 connections failed"
		}
		c.Runs = append(c.Runs, r)
	}
	// As in the campaign of 2026-12-07: rustle kept at 256, Squid at 64.
	add("rustle", 16, true, 20000, 1.1, 40)
	add("rustle", 64, true, 25000, 4.1, 37)
	add("rustle", 256, true, 26454, 16.5, 36.4)
	add("squid", 16, true, 21000, 1.0, 38)
	add("squid", 64, true, 28191, 3.9, 35.1)
	add("squid", 256, true, 27000, 15, 36)
	// gost kept at 256; its runs at 64 saw errors.
	add("gost", 16, true, 20000, 1.2, 40)
	add("gost", 64, false, 26000, 4.8, 36)
	add("gost", 256, true, 26500, 17, 36.2)
	f := Figures(c)
	got := map[string]string{}
	for row, m := range f {
		for p, cell := range m {
			got[row+"/"+p] = fmt.Sprintf("%s@%d", cell.Text, cell.Level.Conns)
		}
	}
	want := map[string]string{
		"wss-64/rustle": "26,454@256", "wss-64/squid": "28,191@64", "wss-64/gost": "26,500@256",
		"wss-cpu/rustle": "36.4@256", "wss-cpu/squid": "35.1@64", "wss-cpu/gost": "36.2@256",
		"wss-p99/rustle": "4.1@64", "wss-p99/squid": "3.9@64", "wss-p99/gost": TextNoClean + "@64",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Figures (-want +got):\n%s", diff)
	}
	var b bytes.Buffer
	if err := Markdown(&b, c); err != nil {
		t.Fatal(err)
	}
	if want := "| WebSocket round trip, 64-byte messages (p99), at 64 connections | ms | 4.1 | 3.9 | no clean run | 1.1× more | n/a |\n"; !strings.Contains(b.String(), want) {
		t.Errorf("report lacks %q; report:\n%s", want, b.String())
	}
}
