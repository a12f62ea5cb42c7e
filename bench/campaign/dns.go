//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
)

// The DNS rows (issue 17): CPU per 1 KB request with a new connection
// per request, and so a host name resolved for every upstream connection,
// with the system resolver against rustle's own cached resolver ([dns]),
// in the same campaign.

// featDNS: resolves destinations with DNS servers the configuration names
// (rustle's [dns] resolvers). Squid and Tinyproxy have resolvers of their
// own (Squid's internal one, Tinyproxy the system's) that these rows do not
// configure, Dante has no HTTP port and "no proxy" resolves nothing: only
// rustle runs the DNS rows.
const featDNS = "dns"

// rustleFeatures are rustle's features: everything, its [dns], its
// parents, its UDP relays and its destination lists.
var rustleFeatures = append(slices.Clip(allFeatures), featDNS, featParents, featUDP, featLists, featTransparent, featLeafCache, featSNI)

// Resolvers of a DNS test (testDef.resolver).
const (
	// resolverSystem: rustle without [dns], the system resolver, for a
	// name of /etc/hosts (env.hostsName).
	resolverSystem = "system"
	// resolverDNS: rustle with [dns] resolvers = the origin's DNS
	// responder, for a name only it knows (dnsName).
	resolverDNS = "dns"
)

// dnsName is the name the origin's DNS responder resolves to 127.0.0.1
// (bench/origin/dns.go), and dnsTTL the TTL of its answer.
const (
	dnsName = "origin.bench.test"
	dnsTTL  = 300 * time.Second
)

// secDNS is the report's section of the DNS rows.
const secDNS = "Host names: the system resolver against rustle's cached [dns] resolver (plain port, a new connection per request)"

// dnsNoteCommon is what both DNS tests share, for their notes.
const dnsNoteCommon = "1 KB responses, a new client connection per request (wrk with Connection: close, as in the new-connection row) and rustle's upstream keep-alive off ([upstream] max_idle_per_host = -1), so that every request dials the origin and resolves its host name. Only rustle: Squid and Tinyproxy resolve with resolvers of their own that these rows do not set up, so their cells read \"—\"."

// dnsTests are the DNS rows' tests, in the campaign's table (tests.go).
var dnsTests = []testDef{
	{
		id: "dns-system", kind: kindWrk, path: "/1k", body: 1 << 10, newConn: true, resolver: resolverSystem,
		needs: []string{featHTTP, featDNS}, group: "dns",
		levels: []int{16, 64, 256}, quickLevels: []int{16, 64},
		rows: []report.Row{
			{ID: "dns-system", Section: secDNS, Title: "HTTP, 1 KB, a host name from /etc/hosts (system resolver)", Unit: "req/s", Selects: true,
				Note: dnsNoteCommon + " The URL's host is a name /etc/hosts gives 127.0.0.1 and nothing else (localhost where it qualifies; the tuning lines name it), resolved by the system resolver (Go's, which reads /etc/hosts itself under \"hosts: files ...\" in nsswitch.conf): the system resolver's best case, a hosts-file lookup with no query."},
			{ID: "cpu-dns-system", Section: secDNS, Title: "CPU cost per request, system resolver (hosts file)", Unit: "µs/req", Decimals: 1, LessIsBetter: true,
				Note: "proxy CPU (utime+stime) over the runs at the kept level divided by the requests completed, median of the runs."},
		},
	},
	{
		id: "dns-cached", kind: kindWrk, path: "/1k", body: 1 << 10, newConn: true, resolver: resolverDNS,
		needs: []string{featHTTP, featDNS}, group: "dns",
		levels: []int{16, 64, 256}, quickLevels: []int{16, 64},
		rows: []report.Row{
			{ID: "dns-cached", Section: secDNS, Title: "HTTP, 1 KB, a host name from rustle's [dns] cache", Unit: "req/s", Selects: true, Against: "dns-system",
				Note: dnsNoteCommon + " The URL's host is " + dnsName + ", which only the origin's DNS responder knows (UDP on loopback, A 127.0.0.1 with a TTL of 300 s, no AAAA); rustle has [dns] resolvers = [\"udp://\" + that responder], so its cache answers every lookup after the first (the warm-up's). A measured run in which the responder saw more queries than a TTL expiry explains is not clean (runs.json: dns_queries)."},
			{ID: "cpu-dns-cached", Section: secDNS, Title: "CPU cost per request, cached [dns] resolver", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Against: "cpu-dns-system",
				Note: "as for the system resolver; the comparison column divides it by the system resolver's figure (below 1: the cached resolver costs less)."},
		},
	},
}

// resolverConf is what a DNS test changes in rustle's configuration
// (bench/rustle.toml's .Resolver).
type resolverConf struct {
	// DNS is [dns]'s one resolver URL; "" for the system resolver.
	DNS string
	// NoUpstreamKeepAlive turns the upstream pool off
	// ([upstream] max_idle_per_host = -1): every request dials.
	NoUpstreamKeepAlive bool
}

// useResolver makes rustle's configuration that of t until restore is
// called: the [dns] resolver and upstream keep-alive of a DNS test, the
// campaign's own for any other.
func (e *env) useResolver(t testDef) (restore func()) {
	saved := e.resolver
	switch t.resolver {
	case resolverSystem:
		e.resolver = resolverConf{NoUpstreamKeepAlive: true}
	case resolverDNS:
		e.resolver = resolverConf{DNS: "udp://" + e.origin.DNS, NoUpstreamKeepAlive: true}
	}
	return func() { e.resolver = saved }
}

// originFor returns the host:port the requests of t name for the HTTP
// origin: its address, or for a DNS test a host name with its port.
func (e *env) originFor(t testDef) string {
	host := ""
	switch t.resolver {
	case resolverSystem:
		host = e.hostsName
	case resolverDNS:
		host = dnsName
	}
	if host == "" {
		return e.origin.HTTP
	}
	_, port, err := net.SplitHostPort(e.origin.HTTP)
	if err != nil {
		return e.origin.HTTP
	}
	return net.JoinHostPort(host, port)
}

// prepareDNSRows finds the name of the system-resolver row: one that
// /etc/hosts gives the origin's address (127.0.0.1) only, looked up in
// the hosts file before any DNS server. Without one, rustle's DNS rows
// read "—" with the reason: the system resolver would ask the network.
func (e *env) prepareDNSRows() {
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		e.lack("rustle", featDNS, "the system-resolver row needs /etc/hosts: "+err.Error())
		return
	}
	nss, err := os.ReadFile("/etc/nsswitch.conf")
	if err != nil && !os.IsNotExist(err) {
		e.lack("rustle", featDNS, "the system-resolver row needs to read /etc/nsswitch.conf: "+err.Error())
		return
	}
	name, why := hostsName(string(hosts), string(nss), netip.MustParseAddr("127.0.0.1"))
	if name == "" {
		e.lack("rustle", featDNS, why)
		return
	}
	e.hostsName = name
	if e.extraTuning == nil {
		e.extraTuning = make(map[string][]string)
	}
	e.extraTuning["rustle"] = append(e.extraTuning["rustle"],
		fmt.Sprintf("DNS rows: upstream keep-alive off ([upstream] max_idle_per_host = -1); the system-resolver row's host is %q from /etc/hosts, the [dns] row's %s with [dns] resolvers = [\"udp://\" + the origin's DNS responder], [dns] otherwise at its defaults (cache of 10,000 names, max_ttl 1h, prefer auto: A and AAAA asked)", name, dnsName))
}

// hostsName returns a name of the hosts file hosts whose only address is
// want, "localhost" if it qualifies, when nsswitch (the text of
// /etc/nsswitch.conf, "" when it does not exist: glibc's and Go's default
// then reads the hosts file first) looks names up in the hosts file before
// DNS; otherwise "" and why not.
func hostsName(hosts, nsswitch string, want netip.Addr) (string, string) {
	sc := bufio.NewScanner(strings.NewReader(nsswitch))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		db, srcs, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(db) != "hosts" {
			continue
		}
		fields := strings.Fields(srcs)
		if len(fields) == 0 || fields[0] != "files" {
			return "", fmt.Sprintf("/etc/nsswitch.conf says \"hosts: %s\": the system-resolver row needs the hosts file first, so that its lookup asks no DNS server", strings.Join(fields, " "))
		}
	}
	addrs := map[string][]netip.Addr{}
	var order []string
	sc = bufio.NewScanner(strings.NewReader(hosts))
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		ip, err := netip.ParseAddr(fields[0])
		if err != nil {
			continue
		}
		for _, n := range fields[1:] {
			n = strings.ToLower(n)
			if _, ok := addrs[n]; !ok {
				order = append(order, n)
			}
			addrs[n] = append(addrs[n], ip.Unmap())
		}
	}
	only := func(n string) bool {
		as := addrs[n]
		return len(as) > 0 && !slices.ContainsFunc(as, func(a netip.Addr) bool { return a != want })
	}
	if only("localhost") {
		return "localhost", ""
	}
	for _, n := range order {
		if only(n) {
			return n, ""
		}
	}
	return "", fmt.Sprintf("no name in /etc/hosts has %s as its only address (localhost: %v): the system-resolver row needs one, so that the system resolver reads the hosts file and asks no DNS server, and dials the origin's address only", want, addrs["localhost"])
}

// dnsQueries returns the queries the origin's DNS responder has answered
// so far, read from its /_stats, for a test that resolves with it;
// -1 for another test or when the origin does not say.
func (e *env) dnsQueries(ctx context.Context, t testDef) int64 {
	if t.resolver != resolverDNS {
		return -1
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+e.origin.HTTP+"/_stats", nil)
	if err != nil {
		return -1
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	var st struct {
		DNSQueries *int64 `json:"dns_queries"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.DNSQueries == nil {
		return -1
	}
	return *st.DNSQueries
}

// judgeDNS records in run the DNS queries a run of t of length d caused
// (before: dnsQueries at its start) and makes it unclean when they are
// more than the cache expiring explains: an A and an AAAA query per TTL
// the run spans. A query the count misses makes it unclean too.
func (e *env) judgeDNS(ctx context.Context, t testDef, before int64, d time.Duration, run *report.Run) {
	if t.resolver != resolverDNS {
		return
	}
	after := e.dnsQueries(ctx, t)
	if before < 0 || after < 0 {
		run.Clean = false
		run.Problem = strings.TrimPrefix(run.Problem+"; could not read the DNS responder's query count from the origin's /_stats", "; ")
		return
	}
	n := after - before
	run.DNSQueries = &n
	if allowed := 2 * (int64(d/dnsTTL) + 1); n > allowed {
		run.Clean = false
		run.Problem = strings.TrimPrefix(fmt.Sprintf("%s; %d DNS queries during the run (at most %d expected): rustle's cache did not answer every lookup", run.Problem, n, allowed), "; ")
	}
}
