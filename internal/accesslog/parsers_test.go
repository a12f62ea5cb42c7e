package accesslog_test

import (
	"maps"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// parserRecord is a record with what the parsers make of it.
type parserRecord struct {
	r accesslog.Record
	// squidCode is the result code of its squid line, which calamaris
	// counts by.
	squidCode string
	// squidValid and clfValid: goaccess counts it as a valid request in
	// the squid and in the combined log. It refuses a status outside
	// 100-599 (a line for what was answered nothing: rustle's metrics do
	// not count those as requests either), and in squid lines a method it
	// does not know (Squid's NONE, SOCKS's UDP ASSOCIATE).
	squidValid, clfValid bool
}

// parserRecords are served requests and tunnels on every protocol,
// refusals, and hostile user names and targets.
func parserRecords() []parserRecord {
	t := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	client := netip.MustParseAddrPort("192.0.2.10:40000")
	up := netip.MustParseAddrPort("93.184.216.34:443")
	src := netip.MustParseAddrPort("203.0.113.7:50000")
	at := func(i int) time.Time { return t.Add(time.Duration(i) * time.Minute) }
	return []parserRecord{
		{accesslog.Record{Time: at(0), Client: client, User: "alice", Protocol: accesslog.ProtoHTTP, Method: "GET",
			Target: "http://example.com/index.html?q=1", Status: 200, BytesDown: 5120, Duration: 12 * time.Millisecond,
			Upstream: netip.MustParseAddrPort("93.184.216.34:80"), Source: src}, "TCP_MISS", true, true},
		{accesslog.Record{Time: at(1), Client: client, User: "alice", Protocol: accesslog.ProtoConnect, Method: "CONNECT",
			Target: "example.com:443", Status: 200, BytesUp: 1830, BytesDown: 60211, Duration: 95 * time.Second,
			Upstream: up}, "TCP_TUNNEL", true, true},
		{accesslog.Record{Time: at(2), Client: netip.MustParseAddrPort("[2001:db8::7]:40001"), Protocol: accesslog.ProtoH2,
			Method: "POST", Target: "https://api.example/v1", Status: 201, BytesUp: 7, BytesDown: 10,
			Upstream: up}, "TCP_MISS", true, true},
		{accesslog.Record{Time: at(3), Client: client, Protocol: accesslog.ProtoConnect, Method: "CONNECT",
			Target: "example.com:443", Status: 407, Reason: accesslog.ReasonAuthMissing}, "TCP_DENIED", true, true},
		{accesslog.Record{Time: at(4), Client: client, User: "mallory", Protocol: accesslog.ProtoHTTP, Method: "GET",
			Target: "http://blocked.example/", Status: 403, Rule: "no-blocked", Reason: accesslog.ReasonDenied}, "TCP_DENIED", true, true},
		{accesslog.Record{Time: at(5), Client: client, Protocol: accesslog.ProtoHTTP, Method: "GET",
			Target: "http://down.example/", Status: 502, Reason: accesslog.ReasonUnreachable}, "TCP_MISS", true, true},
		{accesslog.Record{Time: at(6), Client: client, User: "bob", Protocol: accesslog.ProtoSOCKS5, Method: "CONNECT",
			Target: "example.com:443", Status: 0, HTTPStatus: 200, BytesDown: 99, Upstream: up, Source: src}, "TCP_TUNNEL", true, true},
		{accesslog.Record{Time: at(7), Client: client, User: "a b\"[c]\n- \x00\xff%", Protocol: accesslog.ProtoHTTP, Method: "GET",
			Target: "http://h/a b\"c\n\x1b[31m]\\ -", Status: 200, BytesDown: 1, Upstream: up}, "TCP_MISS", true, true},
		{accesslog.Record{Time: at(8), Client: client, User: "[x]", Protocol: accesslog.ProtoConnect, Method: "CONNECT",
			Target: "we ird\n\"host\":443", Status: 200, BytesDown: 2, Upstream: netip.MustParseAddrPort("127.0.0.1:3128"),
			Route: "fleet", Parent: "squid"}, "TCP_TUNNEL", true, true},
		{accesslog.Record{Time: at(9), Client: client, Target: "sni.example", Reason: accesslog.ReasonTLSHandshake},
			"NONE_NONE", false, false},
		{accesslog.Record{Time: at(10), Client: client, User: "bob", Protocol: accesslog.ProtoSOCKS5UDP, Method: "UDP ASSOCIATE",
			Target: "0.0.0.0:0", HTTPStatus: 200, BytesDown: 512}, "TCP_TUNNEL", false, true},
		{accesslog.Record{Time: at(11), Client: client, User: "eve", Protocol: accesslog.ProtoSOCKS5, Status: 1, HTTPStatus: 407,
			Reason: accesslog.ReasonAuthFailed}, "TCP_DENIED", false, true},
		{accesslog.Record{Time: at(12), Client: client, Protocol: accesslog.ProtoHTTP, Status: 408,
			Reason: accesslog.ReasonHeadTimeout}, "NONE_NONE_TIMEDOUT", false, true},
	}
}

// writeLog writes recs through a Logger in format (with template) to a
// file and returns its path.
func writeLog(t *testing.T, format accesslog.Format, template string, recs []parserRecord) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "access.log")
	l, err := accesslog.New(accesslog.Config{Format: format, Template: template, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range recs {
		l.Log(&pr.r)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l.Dropped() != 0 {
		t.Fatalf("%d records dropped", l.Dropped())
	}
	return path
}

// TestGoAccessReads checks that goaccess reads the squid and combined
// logs (and templates that append the upstream and the egress source to
// them) and counts every line, as valid the requests it can count.
func TestGoAccessReads(t *testing.T) {
	recs := parserRecords()
	squidArgs := proxytest.GoAccessSquidArgs
	for _, tt := range []struct {
		name     string
		format   accesslog.Format
		template string
		args     []string
		squid    bool
	}{
		{"squid", accesslog.FormatSquid, "", squidArgs, true},
		{"squid with upstream and source", accesslog.FormatTemplate, "{squid} {upstream} {source}", squidArgs, true},
		{"combined", accesslog.FormatCombined, "", []string{"--log-format=COMBINED"}, false},
		{"combined with upstream and source", accesslog.FormatTemplate, "{combined} {upstream} {source}",
			[]string{"--log-format=COMBINED"}, false},
		{"common", accesslog.FormatCommon, "", []string{"--log-format=COMMON"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var want proxytest.GoAccessCounts
			want.Total = len(recs)
			for _, pr := range recs {
				if tt.squid && pr.squidValid || !tt.squid && pr.clfValid {
					want.Valid++
					want.Bandwidth += pr.r.BytesDown
				}
			}
			want.Failed = want.Total - want.Valid
			got := proxytest.GoAccess(t, writeLog(t, tt.format, tt.template, recs), tt.args...)
			if got != want {
				t.Errorf("goaccess counts %+v, want %+v", got, want)
			}
		})
	}
}

// TestCalamarisReads checks that calamaris, a Squid log analyser, parses
// every squid line (its strict "squid" input takes exactly ten fields;
// "squid-extended" reads fields appended) and counts each result code.
func TestCalamarisReads(t *testing.T) {
	recs := parserRecords()
	want := map[string]int{}
	var bytes int64
	for _, pr := range recs {
		want[pr.squidCode]++
		bytes += pr.r.BytesDown
	}
	for _, tt := range []struct {
		name, template, input string
	}{
		{"squid", "", "squid"},
		{"squid with upstream and source", "{squid} {upstream} {source}", "squid-extended"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			format := accesslog.FormatSquid
			if tt.template != "" {
				format = accesslog.FormatTemplate
			}
			rep := proxytest.Calamaris(t, writeLog(t, format, tt.template, recs), tt.input)
			if rep.Parsed != len(recs) || rep.Invalid != 0 || rep.Requests != len(recs) || rep.Bytes != bytes {
				t.Errorf("calamaris parsed %d lines, %d invalid, counted %d requests of %d bytes; want %d, 0, %d, %d",
					rep.Parsed, rep.Invalid, rep.Requests, rep.Bytes, len(recs), len(recs), bytes)
			}
			if !maps.Equal(rep.Codes, want) {
				t.Errorf("calamaris counts by result code %v, want %v", rep.Codes, want)
			}
		})
	}
}
