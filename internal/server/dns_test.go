package server

import (
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// dnsRecord is the access log record fields the DNS tests check.
type dnsRecord struct {
	Target   string `json:"target"`
	Status   int    `json:"status"`
	Upstream string `json:"upstream"`
	Reason   string `json:"reason"`
	Source   string `json:"source"`
}

// accessRecords parses the JSON access log.
func accessRecords(t *testing.T, access *logBuffer) []dnsRecord {
	t.Helper()
	var recs []dnsRecord
	for line := range strings.Lines(access.String()) {
		var rec dnsRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		recs = append(recs, rec)
	}
	return recs
}

// get sends a GET for url through the proxy at proxy on a connection of
// its own and returns the response.
func get(t *testing.T, proxy, url string) *proxytest.Response {
	t.Helper()
	c := proxytest.Dial(t, proxy)
	defer c.Close()
	host := strings.TrimPrefix(url, "http://")
	host, _, _ = strings.Cut(host, "/")
	c.Write("GET " + url + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n")
	return c.ReadResponse("GET")
}

// TestDNSResolvers resolves through [dns]: the configured resolvers over
// each transport, the first one dead (it drops every query) so that each
// lookup fails over; a second request is answered from the cache; a name
// that every resolver fails on answers 502 with the reason dns-failed;
// a public-looking name a resolver answers with a private address is
// refused by the guard (403, forbidden), and a hosts entry answers
// without a query.
func TestDNSResolvers(t *testing.T) {
	origin := proxytest.NewOrigin(t, proxytest.Respond(200, "hello"))
	_, port, _ := net.SplitHostPort(origin.Addr)
	dead := proxytest.NewDNSServer(t)
	dead.SetMode(proxytest.DNSDrop)
	for _, tc := range []struct {
		name string
		url  func(s *proxytest.DNSServer) string
	}{
		{"udp", func(s *proxytest.DNSServer) string { return "udp://" + s.UDP }},
		{"tcp", func(s *proxytest.DNSServer) string { return "tcp://" + s.TCP }},
		{"tls", func(s *proxytest.DNSServer) string { return "tls://" + s.TLS }},
		{"https", func(s *proxytest.DNSServer) string { return s.HTTPS }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good := proxytest.NewDNSServer(t)
			good.Set("origin.rustle.test", 300, "127.0.0.1")
			good.Set("www.example.com", 300, "127.0.0.1") // a public name with a private answer
			m := metrics.New(metrics.Config{})
			cfg := config.Default()
			cfg.Workers = 1
			cfg.Upstream.MaxIdlePerHost = -1
			cfg.Listen = []config.Listener{{Name: "p", Address: "127.0.0.1:0", Auth: config.AuthNone}}
			cfg.ACL.Default = "allow"
			cfg.ACL.Rules = []config.ACLRule{{Name: "origin only", Action: "allow", Criteria: config.Criteria{Hosts: []string{"origin.rustle.test", "static.rustle.test"}},
				AllowPrivate: []string{"127.0.0.0/8"}}, {Name: "rest", Action: "allow"}}
			// A second per query to each: a DNS-over-HTTPS or -TLS query's
			// handshake under the race detector on a loaded machine has
			// taken over 200 ms (no DNS resolver answered).
			cfg.DNS = config.DNS{Resolvers: []string{"udp://" + dead.UDP, tc.url(good)}, Timeout: config.Duration{Duration: time.Second},
				Only: "ipv4", CA: good.CAFile, Hosts: map[string][]string{"static.rustle.test": {"127.0.0.1"}}}
			cfg.SetDefaults()
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			access := &logBuffer{}
			_, addrs := startLogged(t, cfg, slog.New(slog.DiscardHandler), access, WithMetrics(m))
			proxy := addrs["p"]

			for i := range 2 {
				if r := get(t, proxy, "http://origin.rustle.test:"+port+"/"); r.Status != 200 || string(r.Body) != "hello" {
					t.Fatalf("request %d: %d %q", i, r.Status, r.Body)
				}
			}
			if n := good.Asked("origin.rustle.test"); n != 1 {
				t.Fatalf("the resolver was asked %d questions for two requests, want 1 (one A query, then the cache)", n)
			}
			if n := dead.Asked("origin.rustle.test"); n == 0 {
				t.Fatal("the first resolver was not asked: no failover shown")
			}
			if n := proxytest.Metric(t, m, "rustle_dns_lookups_total", "result", "hit"); n != 1 {
				t.Errorf("cache hits = %v, want 1", n)
			}
			if n := proxytest.Metric(t, m, "rustle_dns_failures_total", "resolver", "udp://"+dead.UDP); n != 1 {
				t.Errorf("failures of the dead resolver = %v, want 1", n)
			}

			r := get(t, proxy, "http://www.example.com:"+port+"/")
			if r.Status != 403 || !strings.Contains(string(r.Body), "private") {
				t.Fatalf("a private answer for a public name: %d %q, want 403 from the guard", r.Status, r.Body)
			}

			if r := get(t, proxy, "http://static.rustle.test:"+port+"/"); r.Status != 200 {
				t.Fatalf("hosts entry: %d %q", r.Status, r.Body)
			}
			if n := good.Asked("static.rustle.test") + dead.Asked("static.rustle.test"); n != 0 {
				t.Fatalf("a hosts entry was asked %d times", n)
			}

			good.SetMode(proxytest.DNSDrop)
			r = get(t, proxy, "http://gone.rustle.test:"+port+"/")
			if r.Status != 502 || !strings.Contains(string(r.Body), "no DNS resolver answered") {
				t.Fatalf("every resolver down: %d %q, want 502 naming the resolvers", r.Status, r.Body)
			}
			waitFor(t, "5 access log records", func() bool { return len(accessRecords(t, access)) >= 5 })
			got := make(map[string]dnsRecord)
			for _, rec := range accessRecords(t, access) {
				got[strings.SplitN(rec.Target, ":", 3)[1]] = rec
			}
			for host, w := range map[string]dnsRecord{
				"origin.rustle.test": {Status: 200, Upstream: origin.Addr},
				"www.example.com":    {Status: 403, Reason: "forbidden"},
				"static.rustle.test": {Status: 200, Upstream: origin.Addr},
				"gone.rustle.test":   {Status: 502, Reason: "dns-failed"},
			} {
				rec := got["//"+host]
				rec.Target = ""
				if rec != w {
					t.Errorf("record of %s = %+v, want %+v", host, rec, w)
				}
			}
		})
	}
}

// TestDNSReloadKeepsCache: a reload that leaves [dns] alone keeps the
// resolver and its cache; one that changes it starts a new one.
func TestDNSReloadKeepsCache(t *testing.T) {
	origin := proxytest.NewOrigin(t, proxytest.Respond(200, "hello"))
	_, port, _ := net.SplitHostPort(origin.Addr)
	dns := proxytest.NewDNSServer(t)
	dns.Set("origin.rustle.test", 300, "127.0.0.1")
	mk := func(timeout time.Duration) *config.Config {
		cfg := config.Default()
		cfg.Workers = 1
		cfg.Upstream.MaxIdlePerHost = -1
		cfg.Listen = []config.Listener{{Name: "p", Address: "127.0.0.1:0", Auth: config.AuthNone}}
		cfg.AllowPrivate = []string{"127.0.0.0/8"}
		cfg.DNS = config.DNS{Resolvers: []string{"udp://" + dns.UDP}, Only: "ipv4", Timeout: config.Duration{Duration: timeout}}
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	s, addrs := startLogged(t, mk(time.Second), nil, &logBuffer{})
	url := "http://origin.rustle.test:" + port + "/"
	for i, tc := range []struct {
		reload *config.Config
		asked  int
	}{
		{nil, 1},
		{mk(time.Second), 1},     // the same [dns]: cached
		{mk(2 * time.Second), 2}, // another [dns]: a new cache
	} {
		if tc.reload != nil {
			if err := s.Reload(tc.reload); err != nil {
				t.Fatal(err)
			}
		}
		if r := get(t, addrs["p"], url); r.Status != 200 {
			t.Fatalf("step %d: %d %q", i, r.Status, r.Body)
		}
		if n := dns.Asked("origin.rustle.test"); n != tc.asked {
			t.Fatalf("step %d: the resolver was asked %d times, want %d", i, n, tc.asked)
		}
	}
}

// TestRouteResolvers checks that a route with resolvers of its own
// resolves its direct destinations with them, with a cache of its own,
// while other requests use [dns]'s, and that the guard checks what the
// route's resolvers answer too.
func TestRouteResolvers(t *testing.T) {
	origin := proxytest.NewOrigin(t, proxytest.Respond(200, "hello"))
	_, port, _ := net.SplitHostPort(origin.Addr)
	global := proxytest.NewDNSServer(t)
	global.Set("origin.rustle.test", 300, "127.0.0.1")
	own := proxytest.NewDNSServer(t)
	own.Set("inside.corp.test", 300, "127.0.0.1")
	own.Set("www.corp.test", 300, "10.0.0.1") // a private answer the rule does not allow
	cfg := config.Default()
	cfg.Workers = 1
	cfg.Upstream.MaxIdlePerHost = -1
	cfg.Listen = []config.Listener{{Name: "p", Address: "127.0.0.1:0", Auth: config.AuthNone}}
	cfg.ACL.Default = "allow"
	cfg.ACL.Rules = []config.ACLRule{{Name: "tests", Action: "allow", Criteria: config.Criteria{Hosts: []string{"origin.rustle.test", "inside.corp.test"}},
		AllowPrivate: []string{"127.0.0.0/8"}}, {Name: "rest", Action: "allow"}}
	cfg.DNS = config.DNS{Resolvers: []string{"udp://" + global.UDP}, Only: "ipv4"}
	cfg.Routes = []config.Route{{Name: "corp", Criteria: config.Criteria{Hosts: []string{".corp.test"}}, Via: config.Strings{"direct"},
		Resolvers: []string{"tcp://" + own.TCP}}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	access := &logBuffer{}
	_, addrs := startLogged(t, cfg, slog.New(slog.DiscardHandler), access)
	proxy := addrs["p"]
	for i := range 2 {
		if r := get(t, proxy, "http://inside.corp.test:"+port+"/"); r.Status != 200 {
			t.Fatalf("request %d through the route's resolver: %d %q", i, r.Status, r.Body)
		}
	}
	if n := own.Asked("inside.corp.test"); n != 1 {
		t.Errorf("the route's resolver was asked %d times for two requests, want 1 (then its cache)", n)
	}
	if n := global.Asked("inside.corp.test"); n != 0 {
		t.Errorf("[dns]'s resolver was asked %d times for the route's name", n)
	}
	if r := get(t, proxy, "http://origin.rustle.test:"+port+"/"); r.Status != 200 {
		t.Fatalf("a name outside the route: %d %q", r.Status, r.Body)
	}
	if n := own.Asked("origin.rustle.test"); n != 0 {
		t.Errorf("the route's resolver was asked %d times for a name outside the route", n)
	}
	if r := get(t, proxy, "http://www.corp.test:"+port+"/"); r.Status != 403 {
		t.Fatalf("a private answer from the route's resolver: %d %q, want 403 from the guard", r.Status, r.Body)
	}
}
