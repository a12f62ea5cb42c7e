//go:build linux

package main

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"

	"github.com/rustle-proxy/rustle/bench/report"
	"github.com/rustle-proxy/rustle/internal/config"
)

func TestSelectTests(t *testing.T) {
	tests := []struct {
		list    string
		want    []string
		wantErr bool
	}{
		{list: "all", want: []string{"http-1k", "http-1k-go", "http-10k", "http-1k-newconn", "http-1m", "http-10m", "connect-bulk", "mem-tunnels",
			"socks-bulk", "socks-mem",
			"https-1k", "https-10k", "https-1k-newconn", "https-1m", "https-10m", "https-connect-bulk", "https-mem", "https-1k-full",
			"h2-1k", "h2-10k", "h2-1k-newconn", "h2-1m", "h2-10m", "h2-connect-bulk", "h2-mem", "h3-1k",
			"ws-64", "ws-64k", "ws-newconn", "wss-64", "wss-64k", "wss-newconn",
			"h3-mem", "udp-h3", "udp-socks", "udp-mem",
			"dns-system", "dns-cached",
			"parent-direct-1k", "parent-direct-bulk", "parent-squid-1k", "parent-squid-bulk", "parent-rustle-1k", "parent-rustle-bulk",
			"rate-1k", "rate-https-1k", "rate-h2-1k", "rate-h3-1k", "rate-ws-64", "rate-wss-64", "rate-https-newconn", "rate-https-full", "rate-https-full-x25519",
			"lists", "transparent",
			"tls-splice-1k", "intercept-1k", "intercept-newconn", "intercept-newconn-cold", "tls-splice-newconn", "sni-match-newconn", "tls-splice-mem", "intercept-mem",
			"h2-16x1", "h3-16x1", "h2-4x8", "h3-4x8",
			"cores-1", "cores-2", "cores-4", "cores-8", "cores-16", "cores-32", "cores-64"}},
		{list: "lists", want: []string{"lists"}},
		{list: "transparent,transparent-tls", want: []string{"transparent"}},
		{list: "intercept", want: []string{"tls-splice-1k", "intercept-1k", "intercept-newconn", "intercept-newconn-cold", "tls-splice-newconn", "sni-match-newconn", "tls-splice-mem", "intercept-mem"}},
		{list: "cpu-sni-match-newconn,intercept-mem-slope", want: []string{"sni-match-newconn", "intercept-mem"}},
		{list: "list-1m-mem", want: []string{"lists"}},
		{list: "fixed-rate", want: []string{"rate-1k", "rate-https-1k", "rate-h2-1k", "rate-h3-1k", "rate-ws-64", "rate-wss-64", "rate-https-newconn", "rate-https-full", "rate-https-full-x25519"}},
		{list: "rate-wss-64-8000-p999,rate-1k", want: []string{"rate-1k", "rate-wss-64"}},
		{list: "dns", want: []string{"dns-system", "dns-cached"}},
		{list: "cpu-dns-cached", want: []string{"dns-cached"}},
		{list: "parents", want: []string{"parent-direct-1k", "parent-direct-bulk", "parent-squid-1k", "parent-squid-bulk", "parent-rustle-1k", "parent-rustle-bulk"}},
		{list: "cores", want: []string{"cores-1", "cores-2", "cores-4", "cores-8", "cores-16", "cores-32", "cores-64"}},
		{list: "cores-2,http-1k", want: []string{"http-1k", "cores-2"}},
		{list: "connect-bulk,http-1k", want: []string{"http-1k", "connect-bulk"}},
		{list: "cpu-1k", want: []string{"http-1k"}},
		{list: "mem-9000, http-1k", want: []string{"http-1k", "mem-tunnels"}},
		{list: "plain", want: []string{"http-1k", "http-1k-go", "http-10k", "http-1k-newconn", "http-1m", "http-10m", "connect-bulk", "mem-tunnels"}},
		{list: "socks", want: []string{"socks-bulk", "socks-mem"}},
		{list: "websocket,socks-mem-pss-9000", want: []string{"socks-mem", "ws-64", "ws-64k", "ws-newconn", "wss-64", "wss-64k", "wss-newconn"}},
		{list: "https", want: []string{"https-1k", "https-10k", "https-1k-newconn", "https-1m", "https-10m", "https-connect-bulk", "https-mem", "https-1k-full"}},
		{list: "wss-p99,ws-cpu", want: []string{"ws-64", "wss-64"}},
		{list: "h2", want: []string{"h2-1k", "h2-10k", "h2-1k-newconn", "h2-1m", "h2-10m", "h2-connect-bulk", "h2-mem"}},
		{list: "h2-mem-9000,h2-mem-slope,https-1k", want: []string{"https-1k", "h2-mem"}},
		{list: "h3,cpu-h3-1k", want: []string{"h3-1k", "h2-16x1", "h3-16x1", "h2-4x8", "h3-4x8"}},
		{list: "cpu-h3-4x8,cpu-h2-4x8", want: []string{"h2-4x8", "h3-4x8"}},
		{list: "udp", want: []string{"h3-mem", "udp-h3", "udp-socks", "udp-mem"}},
		{list: "cpu-udp-socks,h3-mem-slope,udp-mem-5000", want: []string{"h3-mem", "udp-socks", "udp-mem"}},
		{list: "http-2k", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.list, func(t *testing.T) {
			got, err := selectTests(tt.list)
			if (err != nil) != tt.wantErr {
				t.Fatalf("selectTests(%q) error = %v, wantErr %v", tt.list, err, tt.wantErr)
			}
			var ids []string
			for _, td := range got {
				ids = append(ids, td.id)
			}
			if strings.Join(ids, ",") != strings.Join(tt.want, ",") {
				t.Errorf("selectTests(%q) = %v, want %v", tt.list, ids, tt.want)
			}
		})
	}
}

func TestTestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, td := range tests {
		selects := 0
		for _, r := range td.rows {
			if seen[r.ID] {
				t.Errorf("row %s appears twice", r.ID)
			}
			seen[r.ID] = true
			if r.Test != td.id || r.Section == "" || r.Title == "" || r.Unit == "" {
				t.Errorf("row %s: incomplete %+v", r.ID, r)
			}
			if r.Selects {
				selects++
			}
		}
		if selects != 1 {
			t.Errorf("test %s: %d rows select the level, want 1", td.id, selects)
		}
		switch td.kind {
		case kindHold:
			if len(td.steps) == 0 || td.memPrefix == "" {
				t.Errorf("test %s: no steps or metric prefix", td.id)
			}
			for _, r := range td.rows {
				if !strings.HasPrefix(r.ID, td.memPrefix+"-") {
					t.Errorf("test %s: row %s is not named after the prefix %s", td.id, r.ID, td.memPrefix)
				}
			}
		default:
			if len(td.levels) == 0 || len(td.quickLevels) == 0 {
				t.Errorf("test %s: no levels", td.id)
			}
		}
		if (td.kind == kindWrk || td.kind == kindHTTP) && (td.path == "" || td.body <= 0) {
			t.Errorf("test %s: HTTP test without path or body size", td.id)
		}
		if td.kind == kindWS && td.wsSize <= 0 {
			t.Errorf("test %s: WebSocket test without a message size", td.id)
		}
		if td.kind == kindWrk && td.listener != lnHTTP {
			t.Errorf("test %s: wrk cannot speak to a %s port", td.id, td.listener)
		}
		// http-1k-go is the one plain row from the Go load tool: the
		// HTTPS rows' baseline with their client; the interception rows
		// send https:// requests through the plain port.
		if td.kind == kindHTTP && !td.tls() && !td.https && td.id != "http-1k-go" {
			t.Errorf("test %s: load http on a plain port (wrk's job)", td.id)
		}
		if td.https && (td.tls() || td.group != "intercept" || td.path == "") {
			t.Errorf("test %s: https:// requests on the %s port, group %q, path %q", td.id, td.listener, td.group, td.path)
		}
		if (td.intercept != "" || td.sni != "" || td.altHost || td.sniHost) && !td.https {
			t.Errorf("test %s: interception settings without https:// requests", td.id)
		}
		if td.fullHandshake && !td.tls() && !td.https {
			t.Errorf("test %s: full handshake without TLS", td.id)
		}
		if td.kind == kindH2 && !td.h2() {
			t.Errorf("test %s: load h2 for a test that does not need h2", td.id)
		}
		if td.h2() && !td.tls() {
			t.Errorf("test %s: HTTP/2 without TLS (rustle offers h2 only with ALPN on its TLS port)", td.id)
		}
		if td.kind == kindH3 && (!td.h3() || !td.tls()) {
			t.Errorf("test %s: load h3 for a test that does not need h3 on the TLS port", td.id)
		}
		for _, r := range td.rows {
			switch {
			case td.kind == kindRate:
				// The fixed-rate rows have sections of their own, each
				// row read at its rate.
				if !strings.HasPrefix(r.Section, secRate+": ") || !slices.Contains(td.levels, r.Level) {
					t.Errorf("row %s: a fixed-rate row in section %q at level %d (rates %v)", r.ID, r.Section, r.Level, td.levels)
				}
			case r.Level != 0 || strings.HasPrefix(r.Section, secRate):
				t.Errorf("row %s of the closed-loop test %s: level %d, section %q", r.ID, td.id, r.Level, r.Section)
			case (r.Section == secH2) != td.h2():
				t.Errorf("row %s in section %q, test needs h2: %v", r.ID, r.Section, td.h2())
			// HTTP/3 rows are in the HTTP/3 section, or in the UDP one
			// beside SOCKS5 UDP.
			case r.Section == secH3 && !td.h3() || td.h3() && r.Section != secH3 && r.Section != secUDP:
				t.Errorf("row %s in section %q, test needs h3: %v", r.ID, r.Section, td.h3())
			}
			if r.Against != "" && !slices.ContainsFunc(rowsOf(r.Against), func(a report.Row) bool { return a.Unit == r.Unit }) {
				t.Errorf("row %s: against %q, which is no row of its unit", r.ID, r.Against)
			}
		}
	}
}

func TestUnsupportedCells(t *testing.T) {
	// What each proxy lacks, as the seed's tables show it: Tinyproxy has
	// only the plain port (no WebSocket), Squid no SOCKS, Dante only SOCKS,
	// and "no proxy" has no proxy CPU or memory; the rustle-ldap,
	// rustle-jwt, rustle-limits, rustle-redis and rustle-authz columns
	// run the plain HTTP port only. gost has every
	// port and HTTP/2, not HTTP/3 (its http3 handler has no proxy
	// authentication) nor the parent, DNS and UDP rows (rustle's only).
	cases := []struct {
		row  string
		want []string
	}{
		{"http-1k", []string{"dante"}},
		{"cpu-1k", []string{"none", "dante"}},
		{"mem-1000", []string{"none", "dante"}},
		{"socks-bulk", []string{"squid", "tinyproxy", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"socks-mem-9000", []string{"none", "squid", "tinyproxy", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"https-1k", []string{"tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"https-1k-full", []string{"tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"https-mem-slope", []string{"none", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"ws-64", []string{"tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"ws-p99", []string{"tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"ws-cpu", []string{"none", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"wss-64k", []string{"tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		// HTTP/2 to clients: rustle only (and HTTP/2 straight to the
		// origin); Squid's https_port, Tinyproxy and Dante have none.
		{"h2-1k", []string{"squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"h2-10k", []string{"squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"h2-1k-newconn", []string{"squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"h2-1m", []string{"squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"h2-10m", []string{"squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"h2-connect-bulk", []string{"squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"h2-mem-1000", []string{"none", "squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"h2-mem-9000", []string{"none", "squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"h2-mem-slope", []string{"none", "squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"h3-1k", []string{"squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz", "gost"}},
		{"udp-socks", []string{"none", "squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz", "gost"}},
		{"dns-cached", []string{"none", "squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz", "gost"}},
		{"parent-rustle-1k", []string{"none", "squid", "tinyproxy", "dante", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz", "gost"}},
		{"cores-4", []string{"none", "dante"}},
		// The interception rows: spliced ones on every HTTP proxy but
		// mitmproxy (which intercepts every tunnel); intercepted ones on
		// rustle, Squid (squid-openssl) and mitmproxy; the cold cache and
		// the SNI check rustle's only.
		{"tls-splice-1k", []string{"dante", "mitmproxy"}},
		{"cpu-tls-splice-1k", []string{"none", "dante", "mitmproxy"}},
		{"intercept-1k", []string{"tinyproxy", "dante", "gost", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"cpu-intercept-newconn", []string{"none", "tinyproxy", "dante", "gost", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"intercept-newconn-cold", []string{"none", "squid", "mitmproxy", "tinyproxy", "dante", "gost", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"cpu-sni-match-newconn", []string{"none", "squid", "mitmproxy", "tinyproxy", "dante", "gost", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
		{"tls-splice-mem-slope", []string{"none", "dante", "mitmproxy"}},
		{"intercept-mem-slope", []string{"none", "tinyproxy", "dante", "gost", "rustle-ldap", "rustle-jwt", "rustle-limits", "rustle-redis", "rustle-authz"}},
	}
	rows := map[string][]string{}
	httpsOnly := map[string]bool{} // rows of tests needing only the HTTPS port
	intercept := map[string]bool{} // rows of the intercept group
	for _, td := range tests {
		for _, r := range td.rows {
			rows[r.ID] = r.Unsupported
			httpsOnly[r.ID] = slices.Equal(td.needs, []string{featHTTPS})
			intercept[r.ID] = td.group == "intercept"
		}
	}
	for _, tt := range cases {
		t.Run(tt.row, func(t *testing.T) {
			got := append([]string(nil), rows[tt.row]...)
			slices.Sort(got)
			want := append([]string(nil), tt.want...)
			// rustle-x25519 has only the HTTPS port.
			if !httpsOnly[tt.row] {
				want = append(want, "rustle-x25519")
			}
			// mitmproxy runs the interception rows only.
			if !intercept[tt.row] {
				want = append(want, "mitmproxy")
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("row %s unsupported for %v, want %v", tt.row, got, want)
			}
		})
	}
}

func TestRuns(t *testing.T) {
	byID := map[string]testDef{}
	for _, td := range tests {
		byID[td.id] = td
	}
	cases := []struct {
		test, proxy string
		want        bool
	}{
		{"http-1k", "tinyproxy", true},
		{"http-1k", "dante", false},
		{"mem-tunnels", "none", false},
		{"mem-tunnels", "squid", true},
		{"socks-bulk", "none", true},
		{"socks-bulk", "squid", false},
		{"socks-mem", "dante", true},
		{"https-10m", "squid", true},
		{"https-10m", "tinyproxy", false},
		{"https-mem", "none", false},
		{"wss-newconn", "none", true},
		{"ws-64", "tinyproxy", false},
		{"h2-1k", "rustle", true},
		{"h2-1k", "none", true},
		{"h2-1k", "squid", false},
		{"h2-connect-bulk", "none", true},
		{"h2-mem", "rustle", true},
		{"h2-mem", "none", false},
		{"h2-mem", "squid", false},
		{"cores-1", "rustle", true},
		{"cores-1", "gost", true},
		{"http-1k", "gost", true},
		{"mem-tunnels", "gost", true},
		{"socks-mem", "gost", true},
		{"https-1k-full", "gost", true},
		{"wss-64", "gost", true},
		{"h2-connect-bulk", "gost", true},
		{"h2-mem", "gost", true},
		{"h3-1k", "gost", false},
		{"udp-socks", "gost", false},
		{"parent-direct-1k", "gost", false},
		{"cores-8", "squid", true},
		{"cores-2", "tinyproxy", true},
		{"cores-2", "dante", false},
		{"cores-4", "none", false},
	}
	for _, tt := range cases {
		if got := runs(byID[tt.test], proxyByName(tt.proxy)); got != tt.want {
			t.Errorf("runs(%s, %s) = %v, want %v", tt.test, tt.proxy, got, tt.want)
		}
	}
}

func TestLoadArgs(t *testing.T) {
	e := &env{user: "bench", pass: "pw", caFile: "/tmp/ca.pem"}
	byID := map[string]testDef{}
	for _, td := range tests {
		byID[td.id] = td
	}
	proxy := &running{addr: "127.0.0.1:3128", auth: "bench:pw"}
	none := &running{}
	cases := []struct {
		test string
		r    *running
		want string
	}{
		{"connect-bulk", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw"},
		{"socks-bulk", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -socks5"},
		{"socks-bulk", none, ""},
		{"socks-mem", &running{addr: "127.0.0.1:1080"}, "-proxy 127.0.0.1:1080 -socks5"},
		{"https-1k-newconn", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -tls -ca /tmp/ca.pem -resume"},
		{"https-1k-full", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -tls -ca /tmp/ca.pem"},
		{"wss-64", none, "-tls -ca /tmp/ca.pem -resume"},
		{"ws-64", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw"},
		{"h2-1k", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -tls -ca /tmp/ca.pem -resume -h2"},
		{"h2-1k-newconn", none, "-tls -ca /tmp/ca.pem -resume -h2"},
		{"h2-connect-bulk", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -tls -ca /tmp/ca.pem -resume -h2"},
		{"h2-mem", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -tls -ca /tmp/ca.pem -resume -h2"},
		{"https-1k", none, "-tls -ca /tmp/ca.pem -resume"},
	}
	for _, tt := range cases {
		if got := strings.Join(e.loadArgs(byID[tt.test], tt.r), " "); got != tt.want {
			t.Errorf("loadArgs(%s, %+v) = %q, want %q", tt.test, tt.r, got, tt.want)
		}
	}
}

func TestTarget(t *testing.T) {
	e := &env{origin: originAddrs{HTTP: "o:1", Sink: "o:2", Hold: "o:3", WS: "o:4", HTTPS: "o:5", WSS: "o:6", SinkTLS: "o:7", H2: "o:8", UDP: "o:9"}}
	byID := map[string]testDef{}
	for _, td := range tests {
		byID[td.id] = td
	}
	proxy, none := &running{addr: "127.0.0.1:3128"}, &running{}
	cases := []struct {
		test string
		r    *running
		want string
	}{
		// Through a proxy the origin side is plain HTTP/1.1 (or TCP).
		{"http-1k", proxy, "o:1"},
		{"https-1k", proxy, "o:1"},
		{"h2-1k", proxy, "o:1"},
		{"h2-10m", proxy, "o:1"},
		{"connect-bulk", proxy, "o:2"},
		{"https-connect-bulk", proxy, "o:2"},
		{"h2-connect-bulk", proxy, "o:2"},
		{"mem-tunnels", proxy, "o:3"},
		{"h2-mem", proxy, "o:3"},
		{"ws-64", proxy, "o:4"},
		{"wss-64", proxy, "o:4"},
		// The UDP rows: datagrams and held flows to the UDP echo, held
		// HTTP/3 connections after a request to the HTTP origin.
		{"udp-h3", proxy, "o:9"},
		{"udp-socks", proxy, "o:9"},
		{"udp-mem", proxy, "o:9"},
		{"h3-mem", proxy, "o:1"},
		// Straight to the origin: its TLS or HTTP/2 listeners.
		{"http-1k", none, "o:1"},
		{"https-1k", none, "o:5"},
		{"h2-1k", none, "o:8"},
		{"h2-1k-newconn", none, "o:8"},
		{"connect-bulk", none, "o:2"},
		{"https-connect-bulk", none, "o:7"},
		{"h2-connect-bulk", none, "o:8"},
		{"socks-bulk", none, "o:2"},
		{"wss-64", none, "o:6"},
	}
	for _, tt := range cases {
		if got := e.target(byID[tt.test], tt.r); got != tt.want {
			t.Errorf("target(%s, proxy %q) = %s, want %s", tt.test, tt.r.addr, got, tt.want)
		}
	}
}

func TestResumptionNotes(t *testing.T) {
	c := report.Campaign{
		Proxies: []report.Proxy{{Name: "rustle", Label: "rustle"}, {Name: "squid", Label: "Squid"}},
		Runs: []report.Run{
			{Test: "https-1k-newconn", Proxy: "rustle", TLSHandshakes: 1000, TLSResumed: 990},
			{Test: "https-1k-newconn", Proxy: "squid", TLSHandshakes: 1500, TLSResumed: 0},
			{Test: "wss-newconn", Proxy: "squid", TLSHandshakes: 700, TLSResumed: 10},
			// Full handshakes are asked for here: not counted.
			{Test: "https-1k-full", Proxy: "rustle", TLSHandshakes: 800},
			// HTTP/2 with a new connection per request offers sessions too.
			{Test: "h2-1k-newconn", Proxy: "rustle", TLSHandshakes: 1000, TLSResumed: 0},
		},
	}
	got := resumptionNotes(c)
	want := []string{
		"rustle resumed 990 of the 2,000 TLS handshakes in the tests that offer a session to resume (HTTPS, HTTP/2 and WebSocket, a new connection each): its figures there are full handshakes.",
		"Squid resumed 10 of the 2,200 TLS handshakes in the tests that offer a session to resume (HTTPS, HTTP/2 and WebSocket, a new connection each): its figures there are full handshakes.",
	}
	if !slices.Equal(got, want) {
		t.Errorf("resumptionNotes = %q, want %q", got, want)
	}
}

func TestSquidTLS(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"configure options:  '--with-gnutls' 'build_alias=x86_64-linux-gnu'", "GnuTLS"},
		{"configure options:  '--with-openssl' '--enable-ssl-crtd'", "OpenSSL"},
		{"configure options:  '--without-gnutls'", ""},
		{"configure options:  '--prefix=/usr'", ""},
	} {
		if got := squidTLS(tt.in); got != tt.want {
			t.Errorf("squidTLS(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestQuickEstimateFitsTenMinutes(t *testing.T) {
	pl := plan{repeats: 1, duration: 3 * time.Second, warmup: time.Second, settle: time.Second, quick: true}
	// Every group, and the new rows together (the README's subsets), fit
	// in ten minutes in quick mode, with the default columns.
	for _, list := range append(groups(), "socks,https,websocket") {
		sel, err := selectTests(list)
		if err != nil {
			t.Fatal(err)
		}
		pairs := orderPairs(sel, proxies, pl.repeats, rand.New(rand.NewPCG(1, 2)), defaultColumn)
		// The quick campaign also waits at most 90 s for other load in all.
		t.Logf("-quick -tests %s: %d pairs, estimate %s", list, len(pairs), estimate(pl, pairs))
		if got := estimate(pl, pairs) + 90*time.Second; got > 9*time.Minute {
			t.Errorf("-quick -tests %s: estimate %s with its waits, want under 9 minutes (10 with builds)", list, got)
		}
	}
}

// defaultColumn reports whether test td runs against proxy p in a
// campaign of the default columns.
func defaultColumn(td testDef, p *proxyDef) bool {
	return runs(td, p) && slices.Contains(strings.Split(defaultProxies, ","), p.name)
}

// fill renders the template bench/<name> for a listener as the campaign
// does, with one worker.
func fill(t *testing.T, name, listener string, asRoot bool) string {
	t.Helper()
	return fillWorkers(t, name, listener, asRoot, 1)
}

// fillWorkers is fill with the given number of workers.
func fillWorkers(t *testing.T, name, listener string, asRoot bool, workers int) string {
	t.Helper()
	e := &env{
		benchDir: "..", maxFD: 20000, passwdFile: "/tmp/x/htpasswd",
		user: "bench", pass: "0123456789abcdef", bcryptHash: "$2a$10$abcdefghijklmnopqrstuv",
		asRoot: asRoot, dropUser: "proxy", dropGroup: "proxy",
		certFile: "/tmp/x/tls/server.pem", keyFile: "/tmp/x/tls/server.key", socksMethod: "username",
	}
	path := filepath.Join(t.TempDir(), name)
	if err := e.writeConf(name, path, "/tmp/x/dir", listener, 3128, workers); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSquidConf(t *testing.T) {
	conf := fill(t, "squid.conf", lnHTTP, true)
	for _, want := range []string{
		"http_port 127.0.0.1:3128\n",
		"workers 1\n",
		"max_filedescriptors 20000\n",
		"auth_param basic program /usr/lib/squid/basic_ncsa_auth /tmp/x/htpasswd\n",
		"auth_param basic credentialsttl 2 hours\n",
		"http_access allow authenticated\n",
		"cache deny all\n",
		"cache_mem 0 MB\n",
		"via off\n",
		"forwarded_for delete\n",
		"http_upgrade_request_protocols WebSocket allow all\n",
		"http_upgrade_request_protocols websocket allow all\n",
		"tcp_recv_bufsize 1 MB\n",
		"read_ahead_gap 1 MB\n",
		"access_log none\n",
		"pid_filename /tmp/x/dir/squid.pid\n",
		"cache_effective_user proxy\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("squid.conf lacks %q:\n%s", want, conf)
		}
	}
	for _, line := range strings.Split(conf, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, bad := range []string{"cache_dir", "SSL_ports", "{{"} {
			if strings.Contains(line, bad) {
				t.Errorf("squid.conf has %q in line %q", bad, line)
			}
		}
	}
	if strings.Contains(fill(t, "squid.conf", lnHTTP, false), "cache_effective_user") {
		t.Error("squid.conf sets cache_effective_user when not run as root")
	}
	if strings.Contains(conf, "https_port") {
		t.Errorf("squid.conf for the plain port has an https_port:\n%s", conf)
	}
	tlsConf := fill(t, "squid.conf", lnHTTPS, true)
	if want := "https_port 127.0.0.1:3128 tls-cert=/tmp/x/tls/server.pem tls-key=/tmp/x/tls/server.key\n"; !strings.Contains(tlsConf, want) {
		t.Errorf("squid.conf for the TLS port lacks %q:\n%s", want, tlsConf)
	}
	if strings.Contains(tlsConf, "\nhttp_port") {
		t.Errorf("squid.conf for the TLS port also has a plain http_port:\n%s", tlsConf)
	}
}

func TestDantedConf(t *testing.T) {
	conf := fill(t, "danted.conf", lnSOCKS, true)
	for _, want := range []string{
		"logoutput: /tmp/x/dir/danted.log\n",
		"internal: 127.0.0.1 port = 3128\n",
		"external: 127.0.0.1\n",
		"socksmethod: username\n",
		"user.privileged: root\n",
		"user.unprivileged: proxy\n",
		"command: connect\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("danted.conf lacks %q:\n%s", want, conf)
		}
	}
	for _, line := range strings.Split(conf, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, bad := range []string{"log:", "{{", "0.0.0.0/0 port"} {
			if strings.Contains(line, bad) {
				t.Errorf("danted.conf has %q in line %q", bad, line)
			}
		}
	}
	if strings.Contains(fill(t, "danted.conf", lnSOCKS, false), "user.privileged") {
		t.Error("danted.conf sets user.privileged when not run as root")
	}
}

func TestTinyproxyConf(t *testing.T) {
	conf := fill(t, "tinyproxy.conf", lnHTTP, true)
	for _, want := range []string{
		"User proxy\n", "Group proxy\n", "Listen 127.0.0.1\n", "Port 3128\n", "MaxClients 200000\n",
		"LogLevel Critical\n", "DisableViaHeader Yes\n", "BasicAuth bench 0123456789abcdef\n",
		`PidFile "/tmp/x/dir/tinyproxy.pid"` + "\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("tinyproxy.conf lacks %q:\n%s", want, conf)
		}
	}
	for _, line := range strings.Split(conf, "\n") {
		if strings.HasPrefix(line, "ConnectPort") {
			t.Errorf("tinyproxy.conf restricts CONNECT ports: %q", line)
		}
	}
}

func TestRustleConf(t *testing.T) {
	type listener struct {
		Name     string `toml:"name"`
		Address  string `toml:"address"`
		Protocol string `toml:"protocol"`
		Auth     string `toml:"auth"`
		TLS      struct {
			Cert string `toml:"cert"`
			Key  string `toml:"key"`
		} `toml:"tls"`
		HTTP3 bool `toml:"http3"`
	}
	tests := []struct {
		listener string
		want     listener
	}{
		{lnHTTP, listener{Name: "bench", Address: "127.0.0.1:3128", Protocol: "http", Auth: "basic"}},
		{lnSOCKS, listener{Name: "bench", Address: "127.0.0.1:3128", Protocol: "socks5", Auth: "basic"}},
		{lnHTTPS, func() listener {
			l := listener{Name: "bench", Address: "127.0.0.1:3128", Protocol: "https", Auth: "basic", HTTP3: true}
			l.TLS.Cert, l.TLS.Key = "/tmp/x/tls/server.pem", "/tmp/x/tls/server.key"
			return l
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.listener, func(t *testing.T) {
			var c struct {
				Workers           int      `toml:"workers"`
				SocketBufferBytes int64    `toml:"socket_buffer_bytes"`
				AllowPrivate      []string `toml:"allow_private"`
				Log               struct {
					Level string `toml:"level"`
				} `toml:"log"`
				Limits struct {
					MaxConnections int `toml:"max_connections"`
				} `toml:"limits"`
				Timeouts struct {
					UDPIdle string `toml:"udp_idle"`
				} `toml:"timeouts"`
				Auth struct {
					Users []struct {
						Name   string `toml:"name"`
						Bcrypt string `toml:"bcrypt"`
					} `toml:"users"`
				} `toml:"auth"`
				Listen []listener `toml:"listen"`
			}
			md, err := toml.Decode(fill(t, "rustle.toml", tt.listener, true), &c)
			if err != nil {
				t.Fatal(err)
			}
			if und := md.Undecoded(); len(und) > 0 {
				t.Errorf("rustle.toml keys not checked here: %v", und)
			}
			if c.Workers != 1 || c.SocketBufferBytes != 1048576 || c.Log.Level != "error" ||
				len(c.AllowPrivate) != 1 || c.AllowPrivate[0] != "127.0.0.0/8" || c.Limits.MaxConnections != -1 ||
				c.Timeouts.UDPIdle != "10m" {
				t.Errorf("rustle.toml globals = %+v", c)
			}
			if len(c.Auth.Users) != 1 || c.Auth.Users[0].Name != "bench" || c.Auth.Users[0].Bcrypt != "$2a$10$abcdefghijklmnopqrstuv" {
				t.Errorf("rustle.toml users = %+v", c.Auth.Users)
			}
			if len(c.Listen) != 1 || c.Listen[0] != tt.want {
				t.Errorf("rustle.toml listeners = %+v, want [%+v]", c.Listen, tt.want)
			}
		})
	}
}

// topo returns n CPUs numbered from first, each its own physical core.
func topo(first, n int) []cpuTopo {
	var out []cpuTopo
	for i := range n {
		out = append(out, cpuTopo{cpu: first + i, core: "0:" + strconv.Itoa(first+i)})
	}
	return out
}

// seq returns the CPU numbers from to to, inclusive.
func seq(from, to int) []int {
	var out []int
	for i := from; i <= to; i++ {
		out = append(out, i)
	}
	return out
}

func TestPlanCores(t *testing.T) {
	// 16 CPUs as 8 cores with two hardware threads each, siblings i and
	// i+8 (Linux's usual numbering on x86).
	var smt16 []cpuTopo
	for i := range 16 {
		smt16 = append(smt16, cpuTopo{cpu: i, core: "0:" + strconv.Itoa(i%8)})
	}
	// 2 CPUs that are the two threads of one core.
	smt2 := []cpuTopo{{0, "0:0"}, {1, "0:0"}}
	split := func(proxy, load []int) coreSplit { return coreSplit{proxy: proxy, load: load} }
	tests := []struct {
		name string
		cpus []cpuTopo
		want []coreSplit
	}{
		{"2 cores: 1 dedicated, then 2 with the load sharing", topo(0, 2), []coreSplit{
			split([]int{0}, []int{1}),
			{proxy: []int{0, 1}, load: []int{0, 1}, shared: true},
		}},
		{"3 cores: 2 shares, with the third CPU for the load too", topo(0, 3), []coreSplit{
			split([]int{0}, []int{1, 2}),
			{proxy: []int{0, 1}, load: []int{0, 1, 2}, shared: true},
		}},
		{"4 cores: 1 and 2", topo(0, 4), []coreSplit{
			split([]int{0}, seq(1, 3)),
			split([]int{0, 1}, []int{2, 3}),
		}},
		{"16 cores: 1, 2, 4 and 8", topo(0, 16), []coreSplit{
			split([]int{0}, seq(1, 15)),
			split([]int{0, 1}, seq(2, 15)),
			split(seq(0, 3), seq(4, 15)),
			split(seq(0, 7), seq(8, 15)),
		}},
		{"32 cores: up to 16, the load on the other 16", topo(0, 32), []coreSplit{
			split([]int{0}, seq(1, 31)),
			split([]int{0, 1}, seq(2, 31)),
			split(seq(0, 3), seq(4, 31)),
			split(seq(0, 7), seq(8, 31)),
			split(seq(0, 15), seq(16, 31)),
		}},
		{"128 cores: up to 64", topo(0, 128), []coreSplit{
			split([]int{0}, seq(1, 127)),
			split([]int{0, 1}, seq(2, 127)),
			split(seq(0, 3), seq(4, 127)),
			split(seq(0, 7), seq(8, 127)),
			split(seq(0, 15), seq(16, 127)),
			split(seq(0, 31), seq(32, 127)),
			split(seq(0, 63), seq(64, 127)),
		}},
		{"an affinity mask of CPUs 4 to 7", topo(4, 4), []coreSplit{
			split([]int{4}, seq(5, 7)),
			split([]int{4, 5}, []int{6, 7}),
		}},
		{"16 threads on 8 cores: one thread per proxy core, its sibling idle, no room for 8", smt16, []coreSplit{
			split([]int{0}, []int{1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15}),
			split([]int{0, 1}, []int{2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15}),
			split(seq(0, 3), []int{4, 5, 6, 7, 12, 13, 14, 15}),
		}},
		{"2 threads of one core: logical CPUs", smt2, []coreSplit{
			{proxy: []int{0}, load: []int{1}, logical: true},
			{proxy: []int{0, 1}, load: []int{0, 1}, shared: true, logical: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := planCores(tt.cpus)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(coreSplit{})); diff != "" {
				t.Errorf("planCores (-want +got):\n%s", diff)
			}
			for _, s := range got {
				if !s.shared && len(s.load) < s.n() {
					t.Errorf("%d proxy cores with %d load CPUs, want at least as many", s.n(), len(s.load))
				}
				if !s.shared {
					for _, c := range s.proxy {
						if slices.Contains(s.load, c) {
							t.Errorf("CPU %d is the proxy's and the load's in a split that is not shared", c)
						}
					}
				}
			}
		})
	}
}

func TestCoreSplitFor(t *testing.T) {
	e := &env{proxyCore: 0, loadCore: 1}
	e.corePlan = planCores(topo(0, 2))
	byID := map[string]testDef{}
	for _, td := range tests {
		byID[td.id] = td
	}
	cases := []struct {
		test      string
		proxy     string
		load      string
		ok        bool
		wantShare bool
	}{
		// Every test but the cores ones keeps the base split.
		{test: "http-1k", proxy: "0", load: "1", ok: true},
		{test: "mem-tunnels", proxy: "0", load: "1", ok: true},
		{test: "cores-1", proxy: "0", load: "1", ok: true},
		{test: "cores-2", proxy: "0,1", load: "0,1", ok: true, wantShare: true},
		{test: "cores-4", ok: false},
		{test: "cores-8", ok: false},
	}
	for _, tt := range cases {
		s, ok := e.coreSplitFor(byID[tt.test])
		if ok != tt.ok || cpuList(s.proxy) != tt.proxy || cpuList(s.load) != tt.load || s.shared != tt.wantShare {
			t.Errorf("coreSplitFor(%s) = %+v, %v; want proxy %q, load %q, shared %v, %v", tt.test, s, ok, tt.proxy, tt.load, tt.wantShare, tt.ok)
		}
	}
}

func TestCoresNotes(t *testing.T) {
	notes := coresNotes(planCores(topo(0, 2)), []int{1, 2, 4, 8}, 2)
	if len(notes) != 2 {
		t.Fatalf("coresNotes on 2 cores = %q, want the shared note and the missing rows", notes)
	}
	for _, want := range []string{"CPUs 0,1 with wrk (2 threads) and the origin sharing those same CPUs", "1 against 2 with the load sharing"} {
		if !strings.Contains(notes[0], want) {
			t.Errorf("shared note %q lacks %q", notes[0], want)
		}
	}
	if want := "no row for 4, 8 proxy cores"; !strings.Contains(notes[1], want) {
		t.Errorf("missing note %q lacks %q", notes[1], want)
	}
	if notes := coresNotes(planCores(topo(0, 16)), []int{1, 2, 4, 8}, 16); len(notes) != 0 {
		t.Errorf("coresNotes on 16 cores = %q, want none", notes)
	}
	if notes := coresNotes(planCores(topo(0, 4)), []int{2}, 4); len(notes) != 0 {
		t.Errorf("coresNotes on 4 cores for 2 = %q, want none", notes)
	}
}

func TestCoreSplitAll(t *testing.T) {
	s := coreSplit{proxy: []int{0, 1}, load: []int{0, 1, 2}}
	if got := cpuList(s.all()); got != "0,1,2" {
		t.Errorf("all = %s, want 0,1,2", got)
	}
	if got := cpuList(coreSplit{proxy: []int{3}, load: []int{5, 4}}.all()); got != "3,4,5" {
		t.Errorf("all = %s, want 3,4,5", got)
	}
}

func TestBusy(t *testing.T) {
	before := map[int]report.CPUTimes{0: {}, 1: {}, 2: {}}
	after := map[int]report.CPUTimes{
		0: {Busy: 100}, // 100 % busy
		1: {Busy: 50, Idle: 50},
		2: {Idle: 100},
	}
	got := busy(coreSplit{proxy: []int{0, 1}, load: []int{2}}, before, after)
	if len(got) != 2 || got[0] != 75 || got[1] != 0 {
		t.Errorf("busy = %v, want [75 0]", got)
	}
}

func TestWrkArgs(t *testing.T) {
	e := &env{benchDir: "/b", lookPath: map[string]string{"wrk": "/usr/bin/wrk"}, authHeader: "Basic x", origin: originAddrs{HTTP: "127.0.0.1:9"}}
	byID := map[string]testDef{}
	for _, td := range tests {
		byID[td.id] = td
	}
	r := &running{addr: "127.0.0.1:3128"}
	for _, tt := range []struct {
		test, want string
	}{
		{"http-1k", "/usr/bin/wrk -t1 -c256 -d3s --timeout 10s -s /b/wrk/proxy.lua http://127.0.0.1:3128/"},
		{"cores-1", "/usr/bin/wrk -t1 -c256 -d3s --timeout 10s -s /b/wrk/proxy.lua http://127.0.0.1:3128/"},
		{"cores-4", "/usr/bin/wrk -t4 -c256 -d3s --timeout 10s -s /b/wrk/proxy.lua http://127.0.0.1:3128/"},
		{"cores-8", "/usr/bin/wrk -t8 -c256 -d3s --timeout 10s -s /b/wrk/proxy.lua http://127.0.0.1:3128/"},
	} {
		argv, env := e.wrkArgs(byID[tt.test], r, 256, 3*time.Second)
		if got := strings.Join(argv, " "); got != tt.want {
			t.Errorf("wrkArgs(%s) = %q, want %q", tt.test, got, tt.want)
		}
		if !slices.Contains(env, "BENCH_TARGET=http://127.0.0.1:9/1k") || !slices.Contains(env, "BENCH_CLOSE=0") {
			t.Errorf("wrkArgs(%s) env = %q", tt.test, env)
		}
	}
}

func TestCoresTests(t *testing.T) {
	var ns []int
	for _, td := range tests {
		if td.proxyCores == 0 {
			if td.group == "cores" {
				t.Errorf("test %s in the cores group without proxy cores", td.id)
			}
			continue
		}
		ns = append(ns, td.proxyCores)
		if td.group != "cores" || td.kind != kindWrk || td.path != "/1k" || td.newConn || td.listener != lnHTTP {
			t.Errorf("test %s: not the seed's http-1kb on the plain port: %+v", td.id, td)
		}
		if !slices.Equal(td.levels, []int{64, 256, 1024, 4096}) {
			t.Errorf("test %s levels %v, want the seed's 64 to 4,096", td.id, td.levels)
		}
		if len(td.rows) != 1 || td.rows[0].Cores != td.proxyCores || td.rows[0].Section != secCores || !td.rows[0].Selects {
			t.Errorf("test %s rows %+v", td.id, td.rows)
		}
	}
	if !slices.Equal(ns, coreCounts) {
		t.Errorf("cores tests for %v, want %v", ns, coreCounts)
	}
}

func TestWorkersInConf(t *testing.T) {
	if conf := fillWorkers(t, "squid.conf", lnHTTP, true, 4); !strings.Contains(conf, "\nworkers 4\n") {
		t.Errorf("squid.conf with 4 workers:\n%s", conf)
	}
	var c struct {
		Workers int `toml:"workers"`
	}
	if _, err := toml.Decode(fillWorkers(t, "rustle.toml", lnHTTP, true, 8), &c); err != nil || c.Workers != 8 {
		t.Errorf("rustle.toml with 8 workers: workers = %d, %v", c.Workers, err)
	}
}

func TestQuickEstimateCores(t *testing.T) {
	pl := plan{repeats: 1, duration: 3 * time.Second, warmup: time.Second, settle: time.Second, quick: true}
	sel, err := selectTests("cores")
	if err != nil {
		t.Fatal(err)
	}
	// On each machine size the cores that fit, against rustle, Squid and
	// Tinyproxy (Dante has no HTTP port, "no proxy" no proxy cores), of
	// the default columns.
	for _, tt := range []struct {
		cpus      int
		wantTests []string
	}{
		{2, []string{"cores-1", "cores-2"}},
		{4, []string{"cores-1", "cores-2"}},
		{16, []string{"cores-1", "cores-2", "cores-4", "cores-8"}},
		{32, []string{"cores-1", "cores-2", "cores-4", "cores-8", "cores-16"}},
	} {
		fit := fitTests(sel, planCores(topo(0, tt.cpus)))
		var ids []string
		for _, td := range fit {
			ids = append(ids, td.id)
		}
		pairs := orderPairs(fit, proxies, pl.repeats, rand.New(rand.NewPCG(1, 2)), defaultColumn)
		if !slices.Equal(ids, tt.wantTests) {
			t.Errorf("%d CPUs: tests %v, want %v", tt.cpus, ids, tt.wantTests)
		}
		if len(pairs) != 3*len(tt.wantTests) {
			t.Errorf("%d CPUs: %d pairs, want %d (rustle, Squid, Tinyproxy per test)", tt.cpus, len(pairs), 3*len(tt.wantTests))
		}
		got := estimate(pl, pairs)
		t.Logf("-quick -tests cores on %d CPUs: %d pairs, estimate %s", tt.cpus, len(pairs), got)
		if got+90*time.Second > 9*time.Minute {
			t.Errorf("-quick -tests cores on %d CPUs: estimate %s with its waits, want under 9 minutes", tt.cpus, got)
		}
	}
	// The other tests are kept whatever the machine.
	all, _ := selectTests("all")
	if got := len(fitTests(all, planCores(topo(0, 2)))); got != len(all)-5 {
		t.Errorf("all on 2 CPUs: %d tests, want all %d but cores-4 to cores-64", got, len(all))
	}
}

func TestPublish(t *testing.T) {
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "bench"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(root, "bench", "results", "2026-12-01T120000")
	if err := os.MkdirAll(run, 0o755); err != nil {
		t.Fatal(err)
	}
	c := report.Campaign{
		Started: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), Seed: 7, Repeats: 3, DurationS: 10,
		Machine: "AMD EPYC, 16 cores", Proxies: []report.Proxy{{Name: "rustle", Label: "rustle", Version: "at abc123"}, {Name: "squid", Label: "Squid", Version: "5.7"}},
		Rows: []report.Row{{ID: "http-1k", Test: "http-1k", Section: secPlain, Title: "HTTP, 1 KB responses", Unit: "req/s", Selects: true, Chart: "throughput"}},
		Runs: []report.Run{
			{Test: "http-1k", Proxy: "rustle", Conns: 64, Clean: true, Metrics: map[string]float64{"http-1k": 45000}, CoreBusy: []float64{99, 70}},
			{Test: "http-1k", Proxy: "squid", Conns: 64, Clean: true, Metrics: map[string]float64{"http-1k": 9000}, CoreBusy: []float64{99, 30}},
		},
	}
	if err := writeOutputs(run, c); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(run, "runs.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := publishTo(root, run); err != nil {
		t.Fatal(err)
	}
	read := func(path string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("bench/results-charts/runs.json"); got != string(raw) {
		t.Error("published runs.json differs from the campaign's")
	}
	for _, chart := range []string{report.ThroughputChart, report.MemoryChart} {
		if got, want := read("bench/results-charts/"+chart), read("bench/results/2026-12-01T120000/"+chart); got != want {
			t.Errorf("published %s differs from the campaign's", chart)
		}
	}
	results := read("bench/RESULTS.md")
	for _, want := range []string{
		"# Benchmarks: rustle against Squid\n",
		"Raw runs: [`results-charts/runs.json`](results-charts/runs.json). Rendered again from them with `go run ./bench/campaign -report bench/results-charts`.",
		"Machine: AMD EPYC, 16 cores.",
		"Versions: rustle at abc123; Squid 5.7.",
		"| HTTP, 1 KB responses | req/s | 45,000 | 9,000 | 5.0× more |",
		"](results-charts/throughput.svg)",
	} {
		if !strings.Contains(results, want) {
			t.Errorf("RESULTS.md lacks %q:\n%s", want, results)
		}
	}
	// -report on the published directory renders RESULTS.md again, the
	// same, and writes no report.md there.
	if err := os.WriteFile(filepath.Join(root, "bench", "RESULTS.md"), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rerenderIn(root, filepath.Join(root, "bench", "results-charts")); err != nil {
		t.Fatal(err)
	}
	if got := read("bench/RESULTS.md"); got != results {
		t.Errorf("-report bench/results-charts gave\n%s\nwant\n%s", got, results)
	}
	if _, err := os.Stat(filepath.Join(root, "bench", "results-charts", "report.md")); err == nil {
		t.Error("-report bench/results-charts wrote a report.md beside the runs")
	}
	// Publishing the published copy again keeps it.
	if err := publishTo(root, filepath.Join(root, "bench", "results-charts")); err != nil {
		t.Fatal(err)
	}
	if got := read("bench/results-charts/runs.json"); got != string(raw) {
		t.Error("publishing the published copy changed its runs.json")
	}
	// -report elsewhere renders report.md in place, as before.
	if err := os.Remove(filepath.Join(run, "report.md")); err != nil {
		t.Fatal(err)
	}
	if err := rerenderIn(root, run); err != nil {
		t.Fatal(err)
	}
	if got := read("bench/results/2026-12-01T120000/report.md"); !strings.Contains(got, "](throughput.svg)") {
		t.Errorf("report.md of a campaign directory does not link its charts beside it:\n%s", got)
	}
}

// TestRustleConfParent checks the rustle configuration of the parent
// tests: rustle's own loader takes it (strict keys, validation: the
// parent's URL, the route naming it) and it routes every request direct
// or through the parent.
func TestRustleConfParent(t *testing.T) {
	for _, via := range []string{"direct", "parent"} {
		t.Run(via, func(t *testing.T) {
			e := &env{
				// A real bcrypt hash (of "x"): Validate checks it.
				benchDir: "..", user: "bench", pass: "0123456789abcdef", bcryptHash: "$2a$04$MDYbuzZoZd8Kh3sNZbyiU.Pz/1cGgkZ/04VR5o4LExhcXf2Ouvyw6",
				parentURL: "http://bench:0123456789abcdef@127.0.0.1:3129", parentVia: via,
			}
			path := filepath.Join(t.TempDir(), "rustle.toml")
			if err := e.writeConf("rustle.toml", path, t.TempDir(), lnHTTP, 3128, 1); err != nil {
				t.Fatal(err)
			}
			c, err := config.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			if len(c.Parents) != 1 || c.Parents[0].URL != e.parentURL || len(c.Routes) != 1 || len(c.Routes[0].Via) != 1 || c.Routes[0].Via[0] != via {
				t.Errorf("parents %+v, routes %+v; want one parent at %s and one route via %s", c.Parents, c.Routes, e.parentURL, via)
			}
		})
	}
}

// rowsOf returns the rows of the campaign with the ID id.
func rowsOf(id string) []report.Row {
	var out []report.Row
	for _, td := range tests {
		for _, r := range td.rows {
			if r.ID == id {
				out = append(out, r)
			}
		}
	}
	return out
}

// TestJudgeUDP fills the datagram rows from a "load udp" line and judges
// it: errors, nothing echoed, flows missing or more than 1 in 1,000 lost
// make a run unclean.
func TestJudgeUDP(t *testing.T) {
	var td testDef
	for _, x := range tests {
		if x.id == "udp-h3" {
			td = x
		}
	}
	good := udpResult{Flows: 64, Opened: 64, Datagrams: 100000, Bytes: 6400000, Lost: 100, DurationUS: 2e6, PerSec: 50000, RTTP99US: 2500}
	for _, tt := range []struct {
		name      string
		change    func(*udpResult)
		wantClean bool
		wantProb  string
	}{
		{"clean, 1 in 1,000 lost", func(*udpResult) {}, true, ""},
		{"too many lost", func(u *udpResult) { u.Lost = 101 }, false, "101 datagrams lost"},
		{"errors", func(u *udpResult) { u.Errors, u.FirstError = 2, "boom" }, false, "2 errors, first: boom"},
		{"nothing echoed", func(u *udpResult) { u.Datagrams, u.Lost = 0, 0 }, false, "no datagram echoed"},
		{"flows missing", func(u *udpResult) { u.Opened = 60 }, false, "60 of 64 flows opened"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			u := good
			tt.change(&u)
			run := report.Run{Metrics: map[string]float64{}}
			judgeUDP(td, u, &run)
			if run.Clean != tt.wantClean || !strings.Contains(run.Problem, tt.wantProb) {
				t.Fatalf("clean %v, problem %q; want %v, %q", run.Clean, run.Problem, tt.wantClean, tt.wantProb)
			}
			if run.Metrics["udp-h3"] != u.PerSec || run.Metrics["udp-h3-p99"] != 2.5 || run.Requests != u.Datagrams || run.DurationS != 2 {
				t.Fatalf("metrics %v, requests %d, duration %v", run.Metrics, run.Requests, run.DurationS)
			}
		})
	}
}

func TestKeyExchangeNotes(t *testing.T) {
	c := report.Campaign{
		Proxies: []report.Proxy{{Name: "rustle", Label: "rustle"}, {Name: "squid", Label: "Squid"}, {Name: "tinyproxy", Label: "Tinyproxy"}},
		Runs: []report.Run{
			{Test: "https-1k-newconn", Proxy: "rustle", TLSCurves: map[string]int64{"X25519MLKEM768": 3000}, TLSCert: "ECDSA P-256"},
			{Test: "https-1k-full", Proxy: "rustle", TLSCurves: map[string]int64{"X25519MLKEM768": 1000, "X25519": 5}, TLSCert: "ECDSA P-256"},
			{Test: "https-1k-newconn", Proxy: "squid", TLSCurves: map[string]int64{"X25519": 1200}, TLSCert: "ECDSA P-256"},
			{Test: "rate-https-full-x25519", Proxy: "rustle", TLSCurves: map[string]int64{"X25519": 700}, TLSCert: "ECDSA P-256"},
			{Test: "rate-https-full-x25519", Proxy: "squid", TLSCurves: map[string]int64{"X25519": 650}, TLSCert: "ECDSA P-256"},
			// Plain HTTP: no handshake, no note.
			{Test: "http-1k", Proxy: "tinyproxy"},
		},
	}
	got := keyExchangeNotes(c)
	want := []string{
		"rustle's TLS handshakes (the load tool offers X25519MLKEM768 first, then X25519): key exchange X25519MLKEM768 in 4,000, X25519 in 5 of 4,005; certificate ECDSA P-256.",
		"Squid's TLS handshakes (the load tool offers X25519MLKEM768 first, then X25519): key exchange X25519 in 1,200 of 1,200; certificate ECDSA P-256.",
		"rustle's TLS handshakes (in rate-https-full-x25519, where the load tool offers X25519 alone): key exchange X25519 in 700 of 700; certificate ECDSA P-256.",
		"Squid's TLS handshakes (in rate-https-full-x25519, where the load tool offers X25519 alone): key exchange X25519 in 650 of 650; certificate ECDSA P-256.",
	}
	if !slices.Equal(got, want) {
		t.Errorf("keyExchangeNotes =\n%q\nwant\n%q", got, want)
	}
}
