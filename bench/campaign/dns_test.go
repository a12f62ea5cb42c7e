//go:build linux

package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
	"github.com/rustle-proxy/rustle/internal/config"
)

// testByID returns the test of the campaign's table with id.
func testByID(t *testing.T, id string) testDef {
	t.Helper()
	for _, td := range tests {
		if td.id == id {
			return td
		}
	}
	t.Fatalf("no test %s", id)
	return testDef{}
}

// TestRustleConfDNS renders bench/rustle.toml for each kind of test and
// parses it with rustle's own strict configuration parser: the DNS tests
// turn upstream keep-alive off and the cached one names the origin's
// responder as [dns]'s resolver; every other test keeps the system
// resolver and the pool.
func TestRustleConfDNS(t *testing.T) {
	tests := []struct {
		test          string
		wantResolvers []string
		wantIdle      int
	}{
		{"http-1k-newconn", nil, 64},
		{"dns-system", nil, -1},
		{"dns-cached", []string{"udp://127.0.0.1:5353"}, -1},
	}
	for _, tt := range tests {
		t.Run(tt.test, func(t *testing.T) {
			e := &env{benchDir: "..", maxFD: 20000, user: "bench", pass: "0123456789abcdef",
				bcryptHash: "$2a$10$N9qo8uLOickgx2ZMRZoMyeIjZAgcfl7p92ldGxad68LJZdL17lhWy", origin: originAddrs{HTTP: "127.0.0.1:9", DNS: "127.0.0.1:5353"}}
			restore := e.useResolver(testByID(t, tt.test))
			path := t.TempDir() + "/rustle.toml"
			if err := e.writeConf("rustle.toml", path, t.TempDir(), lnHTTP, 3128, 1); err != nil {
				t.Fatal(err)
			}
			restore()
			if e.resolver != (resolverConf{}) {
				t.Errorf("restore left the resolver at %+v", e.resolver)
			}
			c, err := config.Load(path)
			if err != nil {
				t.Fatalf("rustle's parser refuses the bench config: %v", err)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("rustle's validation refuses the bench config: %v", err)
			}
			if !slices.Equal(c.DNS.Resolvers, tt.wantResolvers) || c.Upstream.MaxIdlePerHost != tt.wantIdle {
				t.Errorf("dns.resolvers = %q, upstream.max_idle_per_host = %d; want %q, %d", c.DNS.Resolvers, c.Upstream.MaxIdlePerHost, tt.wantResolvers, tt.wantIdle)
			}
		})
	}
}

func TestHostsName(t *testing.T) {
	lo := netip.MustParseAddr("127.0.0.1")
	tests := []struct {
		name, hosts, nss string
		want             string // "" = none, and a reason
	}{
		{"this machine's", "127.0.0.1 localhost\n127.0.0.1 runsc\n127.0.0.1 vm\n", "hosts:          files dns\n", "localhost"},
		{"no nsswitch.conf", "127.0.0.1 localhost\n", "", "localhost"},
		{"comments and case", "# a comment\n127.0.0.1\tLocalHost # loopback\n", "passwd: files\nhosts: files myhostname dns # systemd\n", "localhost"},
		// Debian's default: localhost is ::1 too; the first name with
		// 127.0.0.1 only is taken instead (the hostname is 127.0.1.1).
		{"debian", "127.0.0.1\tlocalhost\n127.0.1.1\tbox\n::1 localhost ip6-localhost ip6-loopback\n127.0.0.1 bench-origin\n", "hosts: files dns\n", "bench-origin"},
		{"only ::1 and others", "::1 localhost\n127.0.1.1 box\n", "hosts: files dns\n", ""},
		{"dns first", "127.0.0.1 localhost\n", "hosts: dns files\n", ""},
		{"empty hosts line", "127.0.0.1 localhost\n", "hosts:\n", ""},
		{"bad lines skipped", "garbage\nnot-an-ip localhost\n127.0.0.1 localhost\n", "", "localhost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why := hostsName(tt.hosts, tt.nss, lo)
			if got != tt.want {
				t.Errorf("hostsName = %q (%s), want %q", got, why, tt.want)
			}
			if (got == "") != (why != "") {
				t.Errorf("hostsName = %q with reason %q: a reason goes with no name, only", got, why)
			}
		})
	}
}

// TestDNSWrkArgs: the DNS tests name the origin by a host name (with its
// port) in the request line and Host, every other test by its address.
func TestDNSWrkArgs(t *testing.T) {
	e := &env{benchDir: "/b", lookPath: map[string]string{"wrk": "/usr/bin/wrk"}, authHeader: "Basic x",
		origin: originAddrs{HTTP: "127.0.0.1:9", DNS: "127.0.0.1:53"}, hostsName: "localhost"}
	r := &running{addr: "127.0.0.1:3128"}
	for _, tt := range []struct{ test, host string }{
		{"http-1k-newconn", "127.0.0.1:9"},
		{"dns-system", "localhost:9"},
		{"dns-cached", "origin.bench.test:9"},
	} {
		_, env := e.wrkArgs(testByID(t, tt.test), r, 16, 3*time.Second)
		for _, want := range []string{"BENCH_TARGET=http://" + tt.host + "/1k", "BENCH_HOST=" + tt.host, "BENCH_CLOSE=1"} {
			if !slices.Contains(env, want) {
				t.Errorf("wrkArgs(%s) env = %q, want %q in it", tt.test, env, want)
			}
		}
	}
}

// TestDNSTests: the DNS tests are a group of their own, run against
// rustle only, with "—" for every other column, and the cached rows
// compared with the system resolver's.
func TestDNSTests(t *testing.T) {
	sel, err := selectTests("dns")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, td := range sel {
		ids = append(ids, td.id)
		for _, p := range proxies {
			if got := runs(td, p); got != (p.name == "rustle") {
				t.Errorf("runs(%s, %s) = %v", td.id, p.name, got)
			}
		}
		for _, r := range td.rows {
			if r.Section != secDNS {
				t.Errorf("row %s in section %q", r.ID, r.Section)
			}
			for _, p := range []string{"squid", "tinyproxy", "dante", "none"} {
				if !slices.Contains(r.Unsupported, p) {
					t.Errorf("row %s: %s is not marked unsupported", r.ID, p)
				}
			}
		}
	}
	if !slices.Equal(ids, []string{"dns-system", "dns-cached"}) {
		t.Errorf("-tests dns = %v", ids)
	}
	rows := map[string]report.Row{}
	for _, td := range tests {
		for _, r := range td.rows {
			rows[r.ID] = r
		}
	}
	for id, base := range map[string]string{"dns-cached": "dns-system", "cpu-dns-cached": "cpu-dns-system"} {
		r := rows[id]
		if r.Against != base || rows[base].Unit != r.Unit || rows[base].Section != r.Section {
			t.Errorf("row %s against %q (unit %s), want %s of the same unit and section", id, r.Against, r.Unit, base)
		}
	}
}

// TestJudgeDNS reads the responder's query count from an origin's
// /_stats, as the campaign does around a run.
func TestJudgeDNS(t *testing.T) {
	var queries atomic.Int64
	broken := atomic.Bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/_stats" || broken.Load() {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"http_requests":1,"dns_queries":%d}`, queries.Load())
	}))
	t.Cleanup(srv.Close)
	e := &env{origin: originAddrs{HTTP: strings.TrimPrefix(srv.URL, "http://")}}
	cached, system := testByID(t, "dns-cached"), testByID(t, "dns-system")
	ctx := context.Background()
	tests := []struct {
		name      string
		test      testDef
		during    int64
		d         time.Duration
		broken    bool
		wantClean bool
		want      int64 // -1: not counted
	}{
		{"cache answered", cached, 0, 3 * time.Second, false, true, 0},
		{"one expiry", cached, 2, 10 * time.Second, false, true, 2},
		{"no cache", cached, 30, 3 * time.Second, false, false, 30},
		{"long run, two expiries", cached, 4, 2 * dnsTTL, false, true, 4},
		{"count unreadable", cached, 0, 3 * time.Second, true, false, -1},
		{"system resolver: not counted", system, 0, 3 * time.Second, true, true, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			queries.Store(100)
			broken.Store(false)
			before := e.dnsQueries(ctx, tt.test)
			if tt.test.resolver == resolverDNS && before != 100 {
				t.Fatalf("dnsQueries = %d, want 100", before)
			}
			queries.Add(tt.during)
			broken.Store(tt.broken)
			run := report.Run{Clean: true}
			e.judgeDNS(ctx, tt.test, before, tt.d, &run)
			got := int64(-1) // not counted
			if run.DNSQueries != nil {
				got = *run.DNSQueries
			}
			if run.Clean != tt.wantClean || got != tt.want {
				t.Errorf("judgeDNS: clean %v, dns_queries %d (problem %q); want clean %v, %d", run.Clean, got, run.Problem, tt.wantClean, tt.want)
			}
			if !run.Clean && run.Problem == "" {
				t.Error("an unclean run without a problem")
			}
		})
	}
}
