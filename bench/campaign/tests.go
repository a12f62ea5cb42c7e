package main

import (
	"fmt"
	"strings"

	"github.com/rustle-proxy/rustle/bench/report"
)

// kind says which tool runs a test and how.
type kind int

const (
	// kindWrk runs wrk with bench/wrk/proxy.lua: requests per second.
	kindWrk kind = iota
	// kindBulk runs "load bulk": CONNECT tunnels to the sink, Gbit/s.
	kindBulk
	// kindHold runs "load hold": memory with N open tunnels.
	kindHold
)

// testDef is one test of the campaign: how to run it and the rows of the
// report its runs fill. Adding a test (an HTTPS, HTTP/2 or WebSocket row)
// is one more entry in tests, with a kind that knows how to run it.
type testDef struct {
	id   string
	kind kind
	// path and body are the origin resource of a wrk test and its size.
	path string
	body int64
	// newConn sends "Connection: close": one request per connection.
	newConn bool
	// levels are the concurrency levels of the sweep (connections or
	// tunnels), quickLevels those of -quick.
	levels, quickLevels []int
	// steps are the tunnel counts of a hold test.
	steps []int
	rows  []report.Row
}

// Sections of the report.
const secPlain = "Plain HTTP proxy port"

// notNone marks rows that have no "no proxy" figure (proxy CPU, proxy
// memory).
var notNone = []string{report.NoProxy}

// tests is the campaign, in the order of the report.
var tests = []testDef{
	{
		id: "http-1k", kind: kindWrk, path: "/1k", body: 1 << 10,
		levels: []int{16, 64, 256, 1024}, quickLevels: []int{64, 256},
		rows: []report.Row{
			{ID: "http-1k", Title: "HTTP, 1 KB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
			{ID: "cpu-1k", Title: "CPU cost per request (1 KB)", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone,
				Note: "derived from the HTTP 1 KB runs at their kept level: proxy CPU (utime+stime of all its processes) over each run divided by the requests it completed, median of the runs."},
		},
	},
	{
		id: "http-10k", kind: kindWrk, path: "/10k", body: 10 << 10,
		levels: []int{16, 64, 256, 1024}, quickLevels: []int{64, 256},
		rows: []report.Row{
			{ID: "http-10k", Title: "HTTP, 10 KB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "http-1k-newconn", kind: kindWrk, path: "/1k", body: 1 << 10, newConn: true,
		levels: []int{16, 64, 256}, quickLevels: []int{16, 64},
		rows: []report.Row{
			{ID: "http-1k-newconn", Title: "HTTP, 1 KB responses, a new connection per request", Unit: "req/s", Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "http-1m", kind: kindWrk, path: "/1m", body: 1 << 20,
		levels: []int{4, 16, 64}, quickLevels: []int{4, 16},
		rows: []report.Row{
			{ID: "http-1m", Title: "HTTP, 1 MB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "http-10m", kind: kindWrk, path: "/10m", body: 10 << 20,
		levels: []int{1, 4, 16}, quickLevels: []int{1, 4},
		rows: []report.Row{
			{ID: "http-10m", Title: "HTTP, 10 MB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "connect-bulk", kind: kindBulk,
		levels: []int{1, 4, 16}, quickLevels: []int{1, 4},
		rows: []report.Row{
			{ID: "connect-bulk", Title: "CONNECT tunnels, bulk transfer", Unit: "Gbit/s", Decimals: 1, Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "mem-tunnels", kind: kindHold, steps: []int{1000, 5000, 9000},
		rows: []report.Row{
			{ID: "mem-0", Title: "Memory with no tunnel open", Unit: "MB", LessIsBetter: true, Unsupported: notNone, Chart: "memory", Tunnels: 0},
			{ID: "mem-1000", Title: "Memory with 1,000 open tunnels", Unit: "MB", LessIsBetter: true, Unsupported: notNone, Selects: true, Chart: "memory", Tunnels: 1000},
			{ID: "mem-5000", Title: "Memory with 5,000 open tunnels", Unit: "MB", LessIsBetter: true, Unsupported: notNone, Chart: "memory", Tunnels: 5000},
			{ID: "mem-9000", Title: "Memory with 9,000 open tunnels", Unit: "MB", LessIsBetter: true, Unsupported: notNone, Chart: "memory", Tunnels: 9000},
			{ID: "mem-slope", Title: "Memory per open tunnel (0 to 9,000)", Unit: "KB/tunnel", Decimals: 1, LessIsBetter: true, Unsupported: notNone,
				Note: "(VmRSS with 9,000 tunnels − VmRSS with none) ÷ 9,000. A process here has 20,000 file descriptors, so 9,000 tunnels (18,000 proxy descriptors) is the most the machine allows; the seed went to 25,000."},
		},
	},
}

// init fills in the fields every row of a test shares.
func init() {
	for i := range tests {
		for j := range tests[i].rows {
			r := &tests[i].rows[j]
			r.Test = tests[i].id
			if r.Section == "" {
				r.Section = secPlain
			}
		}
	}
}

// selectTests returns the tests named in list (comma-separated test or row
// IDs; "" or "all" for every test), in campaign order.
func selectTests(list string) ([]testDef, error) {
	if list == "" || list == "all" {
		return tests, nil
	}
	want := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, t := range tests {
			if t.id == name {
				found = true
			}
			for _, r := range t.rows {
				if r.ID == name {
					found = true
					name = t.id
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("campaign: unknown test %q (tests: %s)", name, testIDs())
		}
		want[name] = true
	}
	var out []testDef
	for _, t := range tests {
		if want[t.id] {
			out = append(out, t)
		}
	}
	return out, nil
}

// testIDs lists the test IDs for messages.
func testIDs() string {
	var ids []string
	for _, t := range tests {
		ids = append(ids, t.id)
	}
	return strings.Join(ids, ", ")
}
