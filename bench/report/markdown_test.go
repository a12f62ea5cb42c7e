package report

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// testCampaign is a small campaign: rustle, squid, tinyproxy (skipped) and
// no proxy, an HTTP test with a derived CPU row and a memory test.
func testCampaign() Campaign {
	c := Campaign{
		Started: time.Date(2026, 10, 28, 12, 0, 0, 0, time.UTC), Seed: 42, Repeats: 3, DurationS: 10,
		Machine: "AMD EPYC, 2 cores", ProxyCore: 0, LoadCore: 1,
		Proxies: []Proxy{
			{Name: "rustle", Label: "rustle"},
			{Name: "squid", Label: "Squid", Version: "5.7", Tuning: []string{"cache deny all"}},
			{Name: "tinyproxy", Label: "Tinyproxy", Skipped: "not installed"},
			{Name: NoProxy, Label: "no proxy"},
		},
		Rows: []Row{
			{ID: "http-1k", Test: "http-1k", Section: "Plain HTTP proxy port", Title: "HTTP, 1 KB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
			{ID: "cpu-1k", Test: "http-1k", Section: "Plain HTTP proxy port", Title: "CPU cost per request (1 KB)", Unit: "µs/req", LessIsBetter: true, Decimals: 1, Unsupported: []string{NoProxy}},
			{ID: "mem-1000", Test: "mem", Section: "Plain HTTP proxy port", Title: "Memory with 1,000 open tunnels", Unit: "MB", LessIsBetter: true, Selects: true, Unsupported: []string{NoProxy}, Chart: "memory", Tunnels: 1000},
		},
	}
	add := func(test, proxy string, conns int, clean bool, m map[string]float64) {
		c.Runs = append(c.Runs, Run{Test: test, Proxy: proxy, Conns: conns, Clean: clean, Metrics: m, CoreBusy: []float64{99, 60}})
	}
	for _, v := range []float64{50000, 55258, 56000} {
		add("http-1k", "rustle", 64, true, map[string]float64{"http-1k": v, "cpu-1k": 18.1})
	}
	add("http-1k", "rustle", 256, false, map[string]float64{"http-1k": 90000, "cpu-1k": 10})
	for _, v := range []float64{15140, 15000, 16000} {
		add("http-1k", "squid", 256, true, map[string]float64{"http-1k": v, "cpu-1k": 66.0})
	}
	add("http-1k", NoProxy, 64, true, map[string]float64{"http-1k": 120000})
	add("mem", "rustle", 1000, true, map[string]float64{"mem-1000": 14})
	add("mem", "squid", 1000, true, map[string]float64{"mem-1000": 150})
	return c
}

func TestFiguresCells(t *testing.T) {
	f := Figures(testCampaign())
	got := map[string]string{}
	for row, m := range f {
		for p, c := range m {
			got[row+"/"+p] = c.Text
		}
	}
	want := map[string]string{
		"http-1k/rustle": "55,258", "http-1k/squid": "15,140", "http-1k/tinyproxy": "not run", "http-1k/none": "120,000",
		"cpu-1k/rustle": "18.1", "cpu-1k/squid": "66.0", "cpu-1k/tinyproxy": "not run", "cpu-1k/none": "—",
		"mem-1000/rustle": "14", "mem-1000/squid": "150", "mem-1000/tinyproxy": "not run", "mem-1000/none": "—",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Figures texts (-want +got):\n%s", diff)
	}
	if at := f["http-1k"]["rustle"].Level.Conns; at != 64 {
		t.Errorf("rustle at_conns = %d, want 64 (256 had an unclean run)", at)
	}
}

func TestRatioText(t *testing.T) {
	ok := func(v float64) Cell { return Cell{OK: true, Value: v} }
	tests := []struct {
		ref, peer Cell
		want      string
	}{
		{ok(55258), ok(15140), "3.6× more"},
		{ok(14), ok(150), "11× less"},
		{Cell{Text: TextUnsupported}, ok(1), "—"},
		{ok(1), Cell{Text: TextUnsupported}, "—"},
		{Cell{Text: TextNotRun}, ok(1), "n/a"},
		{ok(1), Cell{Text: TextNoClean}, "n/a"},
	}
	for _, tt := range tests {
		if got := RatioText(tt.ref, tt.peer); got != tt.want {
			t.Errorf("RatioText(%+v, %+v) = %q, want %q", tt.ref, tt.peer, got, tt.want)
		}
	}
}

func TestTable(t *testing.T) {
	var b strings.Builder
	Table(&b, []string{"Test", "Unit", "a|b"}, [][]string{{"x", "req/s", "1,000"}}, 2)
	want := "| Test | Unit | a\\|b |\n|---|---|---:|\n| x | req/s | 1,000 |\n"
	if b.String() != want {
		t.Errorf("Table =\n%s\nwant\n%s", b.String(), want)
	}
}

func TestMarkdownResultsTable(t *testing.T) {
	var b bytes.Buffer
	if err := Markdown(&b, testCampaign()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# Benchmarks: rustle against Squid and Tinyproxy\n",
		"| Test | Unit | rustle | Squid | Tinyproxy | no proxy | rustle ÷ Squid | rustle ÷ Tinyproxy |\n",
		"| HTTP, 1 KB responses | req/s | 55,258 | 15,140 | not run | 120,000 | 3.6× more | n/a |\n",
		"| CPU cost per request (1 KB) | µs/req | 18.1 | 66.0 | not run | — | 3.6× less | n/a |\n",
		"| Memory with 1,000 open tunnels | MB | 14 | 150 | not run | — | 11× less | n/a |\n",
		"| http-1k | rustle | 64 ✓, 256 ✗ | 64 | 99 % | 60 % | 0 % |\n",
		"- not run: not installed\n",
		"- Against Squid: rustle had the better figure in 3 of the 3 rows measured cleanly on both, the worse in 0, and 0 were within 5 % of each other.\n",
		"- rustle and Tinyproxy have no row measured cleanly on both.\n",
		"seed 42",
		"(" + ThroughputChart + ")",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q; report:\n%s", want, out)
		}
	}
}

// wsCampaign has a WebSocket section whose latency and CPU rows are costs,
// a SOCKS5 section that Squid lacks and Dante has, a Squid that lacks the
// TLS rows on this machine, and Dante lacking every WebSocket row.
func wsCampaign() Campaign {
	c := Campaign{
		Started: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), Seed: 7, Repeats: 1, DurationS: 3,
		Proxies: []Proxy{
			{Name: "rustle", Label: "rustle"},
			{Name: "squid", Label: "Squid", Lacks: []string{"wss-64"}, LacksWhy: "built without a TLS library"},
			{Name: "dante", Label: "Dante"},
			{Name: NoProxy, Label: "no proxy"},
		},
		Rows: []Row{
			{ID: "ws-64", Test: "ws-64", Section: "WebSocket, plain", Title: "WebSocket, 64-byte messages", Unit: "msg/s", Selects: true, Unsupported: []string{"dante"}},
			{ID: "ws-p99", Test: "ws-64", Section: "WebSocket, plain", Title: "WebSocket round trip, 64-byte messages (p99)", Unit: "ms", Decimals: 1, LessIsBetter: true, Unsupported: []string{"dante"}},
			{ID: "ws-cpu", Test: "ws-64", Section: "WebSocket, plain", Title: "CPU cost per WebSocket message", Unit: "µs/msg", Decimals: 1, LessIsBetter: true, Unsupported: []string{"dante", NoProxy}},
			{ID: "wss-64", Test: "wss-64", Section: "WebSocket over TLS", Title: "WebSocket, 64-byte messages", Unit: "msg/s", Selects: true, Unsupported: []string{"dante"}},
			{ID: "socks-bulk", Test: "socks-bulk", Section: "SOCKS5 port", Title: "SOCKS5 CONNECT tunnels, bulk transfer", Unit: "Gbit/s", Decimals: 1, Selects: true, Unsupported: []string{"squid"}},
		},
	}
	add := func(test, proxy string, conns int, m map[string]float64) {
		c.Runs = append(c.Runs, Run{Test: test, Proxy: proxy, Conns: conns, Clean: true, Metrics: m, CoreBusy: []float64{99, 80}})
	}
	// Squid's best msg/s is at 256 connections, with a worse p99 there
	// than at 64: its msg/s and CPU are the ones at its kept level, its
	// p99 the one at 64, rustle's kept level, for the p99 of every column
	// comes from the same level.
	add("ws-64", "rustle", 64, map[string]float64{"ws-64": 58506, "ws-p99": 1.3, "ws-cpu": 17.1})
	add("ws-64", "squid", 64, map[string]float64{"ws-64": 40000, "ws-p99": 1.1, "ws-cpu": 24})
	add("ws-64", "squid", 256, map[string]float64{"ws-64": 43710, "ws-p99": 1.5, "ws-cpu": 22.9})
	add("ws-64", NoProxy, 64, map[string]float64{"ws-64": 90000, "ws-p99": 0.8})
	add("wss-64", "rustle", 64, map[string]float64{"wss-64": 56955})
	add("socks-bulk", "rustle", 4, map[string]float64{"socks-bulk": 12.5})
	add("socks-bulk", "dante", 4, map[string]float64{"socks-bulk": 8.8})
	return c
}

func TestMarkdownNewSections(t *testing.T) {
	var b bytes.Buffer
	if err := Markdown(&b, wsCampaign()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		// Throughput: more is better; latency and CPU: less is better.
		"| WebSocket, 64-byte messages | msg/s | 58,506 | 43,710 | — | 90,000 | 1.3× more |\n",
		"| WebSocket round trip, 64-byte messages (p99), at 64 connections | ms | 1.3 | 1.1 | — | 0.8 | 1.2× more |\n",
		"WebSocket round trip, 64-byte messages (p99): read at 64 connections in flight for every column",
		"| CPU cost per WebSocket message | µs/msg | 17.1 | 22.9 | — | — | 1.3× less |\n",
		// Dante lacks every WebSocket mode: no ratio column for it there.
		"| Test | Unit | rustle | Squid | Dante | no proxy | rustle ÷ Squid |\n",
		// Squid lacks TLS on this machine: "—", not "not run" or zero;
		// with Dante lacking it too, the table has no ratio column.
		"| Test | Unit | rustle | Squid | Dante | no proxy |\n|---|---|---:|---:|---:|---:|\n| WebSocket, 64-byte messages | msg/s | 56,955 | — | — | not run |\n",
		"- “—” on 1 row(s): built without a TLS library\n",
		// Squid lacks SOCKS5: only Dante's ratio column.
		"| Test | Unit | rustle | Squid | Dante | no proxy | rustle ÷ Dante |\n",
		"| SOCKS5 CONNECT tunnels, bulk transfer | Gbit/s | 12.5 | — | 8.8 | not run | 1.4× more |\n",
		"- Against Squid: rustle had the better figure in 2 of the 3 rows measured cleanly on both, the worse in 1, and 0 were within 5 % of each other.\n",
		"- Against Dante: rustle had the better figure in 1 of the 1 rows measured cleanly on both",
		"For CPU, memory and round-trip latency, less is better.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q; report:\n%s", want, out)
		}
	}
}

// h2Campaign has the HTTP/2 section as the campaign fills it: rows that
// Squid and Tinyproxy lack (rustle and "no proxy" only; memory rows
// rustle only), beside an HTTPS row Squid has.
func h2Campaign() Campaign {
	peers := []string{"squid", "tinyproxy"}
	c := Campaign{
		Started: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC), Seed: 5, Repeats: 1, DurationS: 3,
		Proxies: []Proxy{
			{Name: "rustle", Label: "rustle"},
			{Name: "squid", Label: "Squid"},
			{Name: "tinyproxy", Label: "Tinyproxy"},
			{Name: NoProxy, Label: "no proxy"},
		},
		Rows: []Row{
			{ID: "https-1k", Test: "https-1k", Section: "HTTPS proxy (resumed TLS sessions)", Title: "HTTP, 1 KB responses", Unit: "req/s", Selects: true, Unsupported: []string{"tinyproxy"}},
			{ID: "h2-1k", Test: "h2-1k", Section: "HTTP/2 over TLS", Title: "HTTP, 1 KB responses", Unit: "req/s", Selects: true, Unsupported: peers, Chart: "throughput"},
			{ID: "h2-connect-bulk", Test: "h2-connect-bulk", Section: "HTTP/2 over TLS", Title: "CONNECT tunnels, bulk transfer", Unit: "Gbit/s", Decimals: 1, Selects: true, Unsupported: peers, Chart: "throughput"},
			{ID: "h2-mem-1000", Test: "h2-mem", Section: "HTTP/2 over TLS", Title: "Memory with 1,000 open HTTP/2 tunnels", Unit: "MB", LessIsBetter: true, Selects: true, Unsupported: append([]string{NoProxy}, peers...), Tunnels: 1000},
			{ID: "h2-mem-slope", Test: "h2-mem", Section: "HTTP/2 over TLS", Title: "Memory per open tunnel (0 to 9,000)", Unit: "KB/tunnel", Decimals: 1, LessIsBetter: true, Unsupported: append([]string{NoProxy}, peers...)},
		},
	}
	add := func(test, proxy string, conns int, m map[string]float64) {
		c.Runs = append(c.Runs, Run{Test: test, Proxy: proxy, Conns: conns, Clean: true, Metrics: m, CoreBusy: []float64{99, 90}})
	}
	add("https-1k", "rustle", 64, map[string]float64{"https-1k": 20000})
	add("https-1k", "squid", 64, map[string]float64{"https-1k": 8000})
	add("h2-1k", "rustle", 64, map[string]float64{"h2-1k": 18000})
	add("h2-1k", NoProxy, 64, map[string]float64{"h2-1k": 25000})
	add("h2-connect-bulk", "rustle", 4, map[string]float64{"h2-connect-bulk": 6.3})
	add("h2-connect-bulk", NoProxy, 4, map[string]float64{"h2-connect-bulk": 9.1})
	add("h2-mem", "rustle", 9000, map[string]float64{"h2-mem-1000": 40, "h2-mem-slope": 21.5})
	return c
}

func TestMarkdownH2Section(t *testing.T) {
	var b bytes.Buffer
	if err := Markdown(&b, h2Campaign()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		// Squid and Tinyproxy read "—" on every HTTP/2 row, and the
		// section has no ratio column for either.
		"### HTTP/2 over TLS\n\n| Test | Unit | rustle | Squid | Tinyproxy | no proxy |\n|---|---|---:|---:|---:|---:|\n",
		"| HTTP, 1 KB responses | req/s | 18,000 | — | — | 25,000 |\n",
		"| CONNECT tunnels, bulk transfer | Gbit/s | 6.3 | — | — | 9.1 |\n",
		"| Memory with 1,000 open HTTP/2 tunnels | MB | 40 | — | — | — |\n",
		"| Memory per open tunnel (0 to 9,000) | KB/tunnel | 21.5 | — | — | — |\n",
		// The HTTPS section keeps Squid's ratio column.
		"| HTTP, 1 KB responses | req/s | 20,000 | 8,000 | — | not run | 2.5× more |\n",
		// Rows Squid lacks do not count in the short version.
		"- Against Squid: rustle had the better figure in 1 of the 1 rows measured cleanly on both",
		"- rustle and Tinyproxy have no row measured cleanly on both.\n",
		"HTTP/2 rows: the Go load tool's HTTP/2 client",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q; report:\n%s", want, out)
		}
	}
	f := Figures(h2Campaign())
	for _, row := range []string{"h2-1k", "h2-connect-bulk", "h2-mem-1000", "h2-mem-slope"} {
		for _, p := range []string{"squid", "tinyproxy"} {
			if c := f[row][p]; c.OK || c.Text != TextUnsupported {
				t.Errorf("%s/%s = %+v, want %q and no figure", row, p, c, TextUnsupported)
			}
		}
	}
	if c := f["h2-1k"]["rustle"]; !c.OK || c.Level.Conns != 64 {
		t.Errorf("h2-1k/rustle = %+v, want a figure at 64 connections", c)
	}
}

// wellFormed fails the test unless svg parses as XML.
func wellFormed(t *testing.T, svg []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg)
		}
	}
}

func TestCharts(t *testing.T) {
	c := testCampaign()
	var tp, mem bytes.Buffer
	if err := ThroughputSVG(&tp, c); err != nil {
		t.Fatal(err)
	}
	if err := MemorySVG(&mem, c); err != nil {
		t.Fatal(err)
	}
	wellFormed(t, tp.Bytes())
	wellFormed(t, mem.Bytes())
	// Three proxies have an HTTP 1 KB figure, so three bars.
	if n := strings.Count(tp.String(), "<rect x=\"110\""); n != 3 {
		t.Errorf("throughput chart has %d bars, want 3", n)
	}
	if n := strings.Count(mem.String(), "<polyline"); n != 2 {
		t.Errorf("memory chart has %d lines, want 2 (rustle and Squid)", n)
	}
}

func TestNiceCeil(t *testing.T) {
	for _, tt := range []struct{ in, want float64 }{{0, 1}, {1, 1}, {1.2, 2}, {3, 5}, {7, 10}, {9000, 10000}, {150, 200}} {
		if got := niceCeil(tt.in); got != tt.want {
			t.Errorf("niceCeil(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// coresCampaign adds the "More cores" rows to testCampaign: rustle and
// Squid at 1 and 2 proxy cores, the 2-core split shared as on a 2-CPU
// machine.
func coresCampaign() Campaign {
	c := testCampaign()
	sec := "More cores: plain HTTP, 1 KB responses, 1 to 8 proxy cores"
	for _, n := range []int{2, 1} { // out of order: the table sorts by cores
		c.Rows = append(c.Rows, Row{ID: fmt.Sprintf("cores-%d", n), Test: fmt.Sprintf("cores-%d", n), Section: sec, Title: fmt.Sprint(n), Unit: "req/s",
			Selects: true, Cores: n, Unsupported: []string{NoProxy}, Note: map[int]string{1: "the seed's http-1kb.", 2: ""}[n]})
	}
	c.CoreSplits = []CoreSplit{
		{Test: "cores-1", ProxyCPUs: []int{0}, LoadCPUs: []int{1}},
		{Test: "cores-2", ProxyCPUs: []int{0, 1}, LoadCPUs: []int{0, 1}, Shared: true},
	}
	add := func(test, proxy string, conns int, v float64) {
		c.Runs = append(c.Runs, Run{Test: test, Proxy: proxy, Conns: conns, Clean: true, Metrics: map[string]float64{test: v}, CoreBusy: []float64{99, 60}})
	}
	add("cores-1", "rustle", 256, 40000)
	add("cores-1", "rustle", 1024, 38000)
	add("cores-2", "rustle", 1024, 58000)
	add("cores-1", "squid", 256, 10000)
	add("cores-2", "squid", 256, 19000)
	return c
}

func TestMarkdownCoresTable(t *testing.T) {
	var b bytes.Buffer
	if err := Markdown(&b, coresCampaign()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"### More cores: plain HTTP, 1 KB responses, 1 to 8 proxy cores\n\n" +
			"| Proxy cores | rustle (req/s) | Squid (req/s) | Tinyproxy (req/s) | rustle vs 1 core | Squid vs 1 core | CPUs: proxy; load and origin |\n" +
			"|---|---:|---:|---:|---:|---:|---:|\n" +
			"| 1 | 40,000 | 10,000 | not run | ×1.00 | ×1.00 | 0; 1 |\n" +
			"| 2 | 58,000 | 19,000 | not run | ×1.45 | ×1.90 | 0,1; 0,1 (shared with the proxy) |\n",
		"More cores: the seed's http-1kb.",
		"1 core per proxy (1 to 2 in the More cores table)",
		"cores-2: proxy on CPUs 0,1, load and origin on 0,1 (shared with the proxy)",
		"pinned to CPU 1 (but in the More cores tests, below).",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q; report:\n%s", want, out)
		}
	}
	// The kept level of each count is in the core-load table.
	if want := "| cores-1 | rustle | 256 ✓, 1024 ✓ | 256 |"; !strings.Contains(out, want) {
		t.Errorf("report lacks %q", want)
	}
	// A campaign without the table says one core per proxy.
	b.Reset()
	if err := Markdown(&b, testCampaign()); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "More cores") || !strings.Contains(out, "1 core per proxy · ") {
		t.Errorf("report without cores rows mentions them, or not one core per proxy:\n%s", out)
	}
}

func TestCPURanges(t *testing.T) {
	for _, tt := range []struct {
		in   []int
		want string
	}{
		{nil, ""}, {[]int{0}, "0"}, {[]int{0, 1}, "0,1"}, {[]int{0, 1, 2, 3}, "0-3"},
		{[]int{1, 3, 4, 5, 9, 10}, "1,3-5,9,10"}, {[]int{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26}, "8-15,24-26"},
	} {
		if got := CPURanges(tt.in); got != tt.want {
			t.Errorf("CPURanges(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestMarkdownTopAndLinks(t *testing.T) {
	c := testCampaign()
	c.Proxies[0].Version = "at 9497fdd"
	c.Proxies[2] = Proxy{Name: "tinyproxy", Label: "Tinyproxy", Version: "tinyproxy 1.11.1 (Debian 1.11.1-2.1)"}
	c.Tools = []string{"wrk debian/4.1.0-3+b2, 1 thread, --timeout 10s", "bench/load (go1.26.8): CONNECT and SOCKS5 bulk", "bench/origin (go1.26.8): hand-written"}
	var b bytes.Buffer
	if err := MarkdownWith(&b, c, Options{ChartDir: "results-charts/", RunsPath: "results-charts/runs.json", Rerender: "go run ./bench/campaign -report bench/results-charts"}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"Raw runs: [`results-charts/runs.json`](results-charts/runs.json). Rendered again from them with `go run ./bench/campaign -report bench/results-charts`.\n",
		"Machine: AMD EPYC, 2 cores.\n",
		"Versions: rustle at 9497fdd; Squid 5.7; tinyproxy 1.11.1 (Debian 1.11.1-2.1); wrk debian/4.1.0-3+b2; load tool and origin built with go1.26.8.\n",
		"![Throughput by test and proxy](results-charts/throughput.svg)",
		"![Memory against open tunnels](results-charts/memory.svg)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q; report:\n%s", want, out)
		}
	}
	if strings.Contains(out, "smoke") {
		t.Error("a full campaign's report calls itself a smoke run")
	}
	// Quick mode says so in the title.
	c.Quick = true
	b.Reset()
	if err := Markdown(&b, c); err != nil {
		t.Fatal(err)
	}
	if title, _, _ := strings.Cut(b.String(), "\n"); title != "# Benchmarks: rustle against Squid and Tinyproxy (quick mode: a smoke run)" {
		t.Errorf("quick report title %q", title)
	}
	if !strings.Contains(b.String(), "![Throughput by test and proxy](throughput.svg)") {
		t.Error("a report without options does not link its charts beside it")
	}
}

// TestMarkdownParts checks that a campaign run in parts (-resume) says
// when each part ran, and that one run at once keeps its start alone.
func TestMarkdownParts(t *testing.T) {
	at := func(day, h, m int) time.Time { return time.Date(2026, 12, day, h, m, 0, 0, time.UTC) }
	tests := []struct {
		name  string
		parts []Part
		want  string
	}{
		{"none recorded", nil, "One campaign on one machine, 2026-12-07 14:50 UTC. Raw runs:"},
		{"one part", []Part{{at(7, 14, 50), at(7, 16, 25)}}, "One campaign on one machine, 2026-12-07 14:50 UTC. Raw runs:"},
		{"three parts", []Part{{at(7, 14, 50), at(7, 16, 25)}, {at(7, 23, 10), at(8, 1, 5)}, {at(8, 9, 0), at(8, 10, 30)}},
			"One campaign on one machine, run in 3 parts (each went on with -resume where the one before stopped, with the same machine, tools, proxy versions and test order): 2026-12-07 14:50 to 16:25 UTC; 2026-12-07 23:10 to 2026-12-08 01:05 UTC; 2026-12-08 09:00 to 10:30 UTC. Raw runs:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testCampaign()
			c.Started = at(7, 14, 50)
			c.Parts = tt.parts
			var b bytes.Buffer
			if err := Markdown(&b, c); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), tt.want) {
				t.Errorf("report lacks %q; its top:\n%s", tt.want, b.String()[:min(800, b.Len())])
			}
		})
	}
}

// TestOrderText checks the procedure's line on the order: repeats in
// turns for a campaign whose order names repeats, the older wording for
// one whose pairs ran all their repeats at once.
func TestOrderText(t *testing.T) {
	for _, tt := range []struct {
		name  string
		order []string
		want  string
	}{
		{"no order", nil, "the proxy is restarted before each test"},
		{"pairs of every repeat", []string{"http-1k/rustle", "http-1k/squid"}, "the proxy is restarted before each test"},
		{"repeats in turns", []string{"list-match/none", "http-1k/rustle#1", "http-1k/squid#1"}, "a test's repeats run in turns"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := orderText(Campaign{Seed: 7, Order: tt.order})
			if !strings.Contains(got, tt.want) || !strings.Contains(got, "seed 7") {
				t.Errorf("orderText = %q, want it to say %q and the seed", got, tt.want)
			}
		})
	}
}
