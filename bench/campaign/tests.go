//go:build linux

package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rustle-proxy/rustle/bench/report"
)

// kind says which tool runs a test and how.
type kind int

const (
	// kindWrk runs wrk with bench/wrk/proxy.lua: requests per second.
	kindWrk kind = iota
	// kindBulk runs "load bulk": CONNECT or SOCKS5 tunnels to the sink,
	// Gbit/s.
	kindBulk
	// kindHold runs "load hold": memory with N open tunnels.
	kindHold
	// kindHTTP runs "load http": requests per second through an HTTPS
	// proxy, which wrk cannot speak to.
	kindHTTP
	// kindWS runs "load ws": WebSocket messages through the proxy.
	kindWS
	// kindH2 runs "load h2": requests per second over HTTP/2 to an HTTPS
	// proxy (ALPN h2), one stream at a time per connection.
	kindH2
	// kindH3 runs "load h3": requests per second over HTTP/3 to the HTTPS
	// proxy's port over UDP, one request at a time per connection.
	kindH3
	// kindUDP runs "load udp": datagrams echoed per second over UDP flows
	// through the proxy (CONNECT-UDP over HTTP/3 on the TLS port, or
	// SOCKS5 UDP ASSOCIATE on the SOCKS5 port), one datagram in flight per
	// flow.
	kindUDP
	// kindRate runs the load tool's subcommand proto with -rate: a fixed
	// offered rate (open loop) per level, the levels being rates
	// (rate.go).
	kindRate
	// kindGoBench runs Go benchmarks of rustle's own code, no proxy
	// started (gobench.go).
	kindGoBench
)

// Listeners: the proxy port a test talks to. A proxy is started with the
// one listener its test needs.
const (
	lnHTTP  = "http"   // plain HTTP proxy port
	lnHTTPS = "https"  // HTTP proxy over TLS
	lnSOCKS = "socks5" // SOCKS5
)

// Features a proxy may lack; a test needs one or more, and the rows of a
// test read "—" for a proxy without them.
const (
	featHTTP      = "http"      // HTTP proxy: absolute-form requests and CONNECT
	featHTTPS     = "https"     // the same on a TLS port
	featWebSocket = "websocket" // relays WebSocket upgrades
	featSOCKS     = "socks5"    // SOCKS5 CONNECT with username/password
	featH2        = "h2"        // HTTP/2 on the TLS port (ALPN h2): forwarded requests and CONNECT streams
	featH3        = "h3"        // HTTP/3 on the TLS port's number over UDP: forwarded requests
	featParents   = "parents"   // sends requests through a parent proxy ([[parents]], [[routes]]): rustle only
	featUDP       = "udp"       // relays UDP: CONNECT-UDP (RFC 9298) on its HTTP/3 port, SOCKS5 UDP ASSOCIATE on its SOCKS5 port: rustle only
)

// The parents of the "Through a parent proxy" tests (testDef.parent).
const (
	parentDirect = "direct" // a [[parents]] entry declared, and a route via = "direct"
	parentSquid  = "squid"  // through Squid (an http parent with Basic auth)
	parentRustle = "rustle" // through another rustle (an http parent with Basic auth)
)

// testDef is one test of the campaign: how to run it and the rows of the
// report its runs fill. Adding a test (an HTTP/2 row, say) is one more
// entry in tests, with a kind that knows how to run it and the listener
// and features it needs.
type testDef struct {
	id   string
	kind kind
	// listener is the proxy port the test uses (lnHTTP, lnHTTPS, lnSOCKS).
	listener string
	// needs are the features a proxy must have to run the test.
	needs []string
	// path and body are the origin resource of an HTTP test and its size.
	path string
	body int64
	// newConn: one request (or WebSocket exchange) per connection.
	newConn bool
	// fullHandshake: on TLS, no session cache, so every connection makes
	// a full handshake; otherwise new connections resume a session.
	fullHandshake bool
	// wsSize is the payload of a WebSocket message in bytes.
	wsSize int
	// proto is the load subcommand of a fixed-rate test (protoHTTP,
	// protoH2, protoH3, protoWS); "" for every other test.
	proto string
	// curves, when not "", is the key exchanges the load tool's TLS
	// client offers (its -curves); "" offers Go's defaults.
	curves string
	// inflight is the requests in flight on each connection of an h2 or
	// h3 test ("load -inflight"); 0 sends one after the other.
	inflight int
	// originCPU: in the no-proxy column the test's CPU rows hold the
	// origin's CPU per request (the floor of what serving the protocol
	// costs: quic-go's HTTP/3 server, x/net's HTTP/2 server); false
	// leaves them empty there.
	originCPU bool
	// levels are the concurrency levels of the sweep (connections or
	// tunnels), quickLevels those of -quick.
	levels, quickLevels []int
	// steps are the tunnel counts of a hold test; memPrefix names its
	// metrics: memPrefix-0, memPrefix-<step>, memPrefix-slope and
	// memPrefix-pss-<last step>.
	steps     []int
	memPrefix string
	// hold is what a hold test holds: "" tunnels, holdH3 QUIC
	// connections (one request each), holdUDP UDP flows (one datagram
	// echoed each).
	hold string
	// proxyCores is the number of proxy cores of a test of the "More
	// cores" table (the proxy pinned to that many CPUs with as many
	// workers, wrk with as many threads, wrk and the origin on other
	// CPUs); 0 for every other test, which runs on the base split (one
	// CPU for the proxy, one for the load side).
	proxyCores int
	// resolver is how the proxy resolves the origin's host name in a DNS
	// test (resolverSystem, resolverDNS in dns.go): the requests then name
	// the origin by a host name; "" for every other test, whose requests
	// name its IP address.
	resolver string
	// group names the tests that -tests can select together ("plain",
	// "socks", "https", "h2", "websocket", "dns", "cores").
	// parent is, for a test of the "Through a parent proxy" section, how
	// the proxy reaches the origin: parentDirect, parentSquid or
	// parentRustle; "" for every other test.
	parent string
	// group names the tests that -tests can select together ("plain",
	// "socks", "https", "h2", "websocket", "parents", "cores").
	group string
	// https: the requests (or a hold test's held connections) are
	// https:// requests to the origin's TLS listener inside a CONNECT
	// tunnel on the plain port ("load -https"), trusting the campaign's
	// CA and its interception CA; "no proxy" speaks that TLS straight to
	// the origin. false for every other test.
	https bool
	// intercept is, for an interception test, the certificate cache of
	// the proxy that intercepts (interceptWarm, interceptCold): the
	// proxy's configuration then intercepts the tunnels to the origin;
	// "" for every other test (rustle and Squid splice).
	intercept string
	// altHost: the load tool names the origin by the bench host name
	// (env.benchHost) on every other connection ("load -alt-host"), so
	// that with a cache of one leaf every connection mints one.
	altHost bool
	// sniHost: the requests name the origin by the bench host name, so
	// that the client's ClientHello carries a server name.
	sniHost bool
	// sni is rustle's listener sni setting in the test ("match"); "" =
	// its default (off).
	sni string
	// goBench is the benchmarks of a kindGoBench test; nil for every
	// other test.
	goBench *goBenchDef
	rows    []report.Row
}

// tls reports whether the test talks TLS to the proxy.
func (t testDef) tls() bool { return t.listener == lnHTTPS }

// h2 reports whether the test speaks HTTP/2 to the proxy.
func (t testDef) h2() bool { return slices.Contains(t.needs, featH2) }

// h3 reports whether the test speaks HTTP/3 to the proxy.
func (t testDef) h3() bool { return slices.Contains(t.needs, featH3) }

// Sections of the report, in the seed's order (SOCKS5, which the seed
// does not have, right after the plain port's CONNECT rows).
const (
	secPlain     = "Plain HTTP proxy port"
	secSOCKS     = "SOCKS5 port"
	secHTTPS     = "HTTPS proxy (resumed TLS sessions)"
	secHTTPSFull = "HTTPS proxy, full handshake on every connection"
	secH2        = "HTTP/2 over TLS"
	secH3        = "HTTP/3 over QUIC"
	secUDP       = "UDP datagrams: CONNECT-UDP over HTTP/3 against SOCKS5 UDP ASSOCIATE"
	secWS        = "WebSocket, plain"
	secWSS       = "WebSocket over TLS"
	secCores     = "More cores: plain HTTP, 1 KB responses, 1 to 64 proxy cores"
	secParents   = "Through a parent proxy: rustle with [[parents]], direct route against rustle → Squid and rustle → rustle"
)

// parentNote is the note of the first row of the parent section.
const parentNote = "rustle on the plain port with one [[parents]] entry and one [[routes]] entry for every request: via = \"direct\" (the parent declared, not used), or via the parent, an http:// parent with Basic auth (rustle's own credentials for it): Squid as in its own column, or a second rustle as in its own column. Plain requests go to the parent in absolute form on keep-alive connections pooled per parent; CONNECT is a CONNECT through the parent. The parent runs pinned to the load side's CPUs (with wrk and the origin), so the proxy core is rustle's alone; the CPU rows count rustle's CPU only, not the parent's. The three routes run in the same campaign, so compare them with each other, not with other sections."

// parentTests returns the tests of the parent section: for each route
// (direct, via Squid, via rustle), 1 KB requests with their CPU cost and
// CONNECT bulk with its CPU cost per byte.
func parentTests() []testDef {
	var out []testDef
	for _, pt := range []struct{ parent, label string }{
		{parentDirect, "direct route"},
		{parentSquid, "via Squid"},
		{parentRustle, "via rustle"},
	} {
		http := report.Row{ID: "parent-" + pt.parent + "-1k", Section: secParents, Title: "HTTP, 1 KB responses, " + pt.label, Unit: "req/s", Selects: true, Unsupported: notNone}
		if pt.parent == parentDirect {
			http.Note = parentNote
		}
		out = append(out,
			testDef{
				id: "parent-" + pt.parent + "-1k", kind: kindWrk, path: "/1k", body: 1 << 10, parent: pt.parent,
				needs: []string{featHTTP, featParents}, group: "parents",
				levels: []int{64, 256}, quickLevels: []int{64},
				rows: []report.Row{http,
					{ID: "parent-" + pt.parent + "-cpu-1k", Section: secParents, Title: "CPU cost per request (1 KB), " + pt.label, Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone,
						Note: "rustle's CPU (utime+stime) over each run divided by the requests it completed, median of the runs at the kept level; the parent's CPU is not counted."},
				},
			},
			testDef{
				id: "parent-" + pt.parent + "-bulk", kind: kindBulk, parent: pt.parent,
				needs: []string{featHTTP, featParents}, group: "parents",
				levels: []int{1, 4}, quickLevels: []int{4},
				rows: []report.Row{
					{ID: "parent-" + pt.parent + "-bulk", Section: secParents, Title: "CONNECT tunnels, bulk transfer, " + pt.label, Unit: "Gbit/s", Decimals: 1, Selects: true, Unsupported: notNone},
					{ID: "parent-" + pt.parent + "-cpu-bulk", Section: secParents, Title: "CPU cost per byte (CONNECT bulk), " + pt.label, Unit: "ns/B", Decimals: 2, LessIsBetter: true, Unsupported: notNone,
						Note: "rustle's CPU over each run divided by the bytes the sink received, median of the runs at the kept level; the parent's CPU is not counted."},
				},
			})
	}
	return out
}

// notNone marks rows that have no "no proxy" figure (proxy CPU, proxy
// memory).
var notNone = []string{report.NoProxy}

// cpuPerByteNote is the note of a CPU-per-byte row derived from the runs
// of test, counting bytes as what says.
func cpuPerByteNote(test, what string) string {
	return "derived from the " + test + " runs at their kept level: proxy CPU (utime+stime of all its processes) over each run divided by " + what + ", median of the runs. On one machine the proxy's core also does the kernel's TCP work for what it sends on loopback (the receiver's side included), so this is CPU per byte relayed, not only per byte copied."
}

// memRows returns the rows of a hold test in section: memory with no
// tunnel and at each step, and the slope; pss adds the proportional set
// size at the last step (for proxies made of many processes).
func memRows(prefix, section, what string, chart string, pss bool) []report.Row {
	rows := []report.Row{
		{ID: prefix + "-0", Section: section, Title: "Memory with no tunnel open", Unit: "MB", LessIsBetter: true, Unsupported: notNone, Chart: chart, Tunnels: 0},
		{ID: prefix + "-1000", Section: section, Title: "Memory with 1,000 open " + what, Unit: "MB", LessIsBetter: true, Unsupported: notNone, Selects: true, Chart: chart, Tunnels: 1000},
		{ID: prefix + "-5000", Section: section, Title: "Memory with 5,000 open " + what, Unit: "MB", LessIsBetter: true, Unsupported: notNone, Chart: chart, Tunnels: 5000},
		{ID: prefix + "-9000", Section: section, Title: "Memory with 9,000 open " + what, Unit: "MB", LessIsBetter: true, Unsupported: notNone, Chart: chart, Tunnels: 9000},
		{ID: prefix + "-slope", Section: section, Title: "Memory per open tunnel (0 to 9,000)", Unit: "KB/tunnel", Decimals: 1, LessIsBetter: true, Unsupported: notNone,
			Note: "(VmRSS with 9,000 tunnels − VmRSS with none) ÷ 9,000. A process here has 20,000 file descriptors, so 9,000 tunnels (18,000 proxy descriptors) is the most the machine allows; the seed went to 25,000."},
	}
	if pss {
		rows = append(rows, report.Row{ID: prefix + "-pss-9000", Section: section, Title: "Memory with 9,000 open " + what + ", proportional (PSS)", Unit: "MB", LessIsBetter: true, Unsupported: notNone,
			Note: "Pss from /proc/PID/smaps_rollup summed over the proxy's processes: pages shared between processes (libraries, copy-on-write pages of a forking server) count once in all, not once per process as in VmRSS. The fair figure for a proxy made of many processes (Dante forks an I/O process per 32 sessions)."})
	}
	return rows
}

// What a hold test holds (testDef.hold).
const (
	holdH3  = "h3"  // QUIC connections, each after one forwarded GET
	holdUDP = "udp" // CONNECT-UDP flows, each after one datagram echoed
)

// udpNote is the note of the first row of the UDP section.
const udpNote = "rustle only: no other proxy of the campaign relays UDP over HTTP/3 (CONNECT-UDP) and \"no proxy\" has no flow to open, so their cells read \"—\"; Dante would have UDP ASSOCIATE, but its bench configuration passes only CONNECT. \"load udp\" opens N flows to the origin's UDP echo, each with one 64-byte datagram in flight (closed loop: the next is sent when the echo is back; one not back within 1 s counts as lost): CONNECT-UDP (RFC 9298) with masque-go's client, one QUIC connection per flow, payloads in HTTP Datagrams (QUIC DATAGRAM frames); or SOCKS5 UDP ASSOCIATE, a TCP control connection and a UDP socket per flow, RFC 1928's 10-byte header on every datagram. Both run in the same campaign on the same proxy core, so the ratio column (CONNECT-UDP ÷ SOCKS5 UDP) compares them; a datagram and its echo count once."

// udpMemRows returns the rows of a hold test of the HTTP/3 and UDP
// sections: memory with nothing held, with 1,000 and 5,000 held, and the
// slope.
func udpMemRows(prefix, section, what, per string) []report.Row {
	return []report.Row{
		{ID: prefix + "-0", Section: section, Title: "Memory with no " + per + " open", Unit: "MB", LessIsBetter: true, Unsupported: notNone},
		{ID: prefix + "-1000", Section: section, Title: "Memory with 1,000 idle " + what, Unit: "MB", LessIsBetter: true, Unsupported: notNone, Selects: true},
		{ID: prefix + "-5000", Section: section, Title: "Memory with 5,000 idle " + what, Unit: "MB", LessIsBetter: true, Unsupported: notNone},
		{ID: prefix + "-slope", Section: section, Title: "Memory per idle " + per + " (0 to 5,000)", Unit: "KB/" + per, Decimals: 1, LessIsBetter: true, Unsupported: notNone,
			Note: "(VmRSS with 5,000 " + what + " − VmRSS with none) ÷ 5,000."},
	}
}

// udpTests are the tests of issue 19's rows beside h3-1k: datagrams per
// second over CONNECT-UDP against SOCKS5 UDP ASSOCIATE, and memory per
// idle HTTP/3 connection and per idle CONNECT-UDP flow.
var udpTests = []testDef{
	{
		id: "h3-mem", kind: kindHold, listener: lnHTTPS, needs: []string{featHTTPS, featH3, featUDP}, group: "udp", hold: holdH3, path: "/1k",
		steps: []int{1000, 5000}, memPrefix: "h3-mem",
		rows: udpMemRows("h3-mem", secH3, "HTTP/3 connections", "connection"),
	},
	{
		id: "udp-h3", kind: kindUDP, listener: lnHTTPS, needs: []string{featHTTPS, featH3, featUDP}, group: "udp", wsSize: 64,
		levels: []int{16, 64, 256}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "udp-h3", Section: secUDP, Title: "CONNECT-UDP over HTTP/3, 64-byte datagrams", Unit: "dgram/s", Selects: true, Unsupported: notNone, Against: "udp-socks", Note: udpNote},
			{ID: "udp-h3-p99", Section: secUDP, Title: "CONNECT-UDP round trip, 64-byte datagrams (p99)", Unit: "ms", Decimals: 2, LessIsBetter: true, Unsupported: notNone, Against: "udp-socks-p99"},
			{ID: "cpu-udp-h3", Section: secUDP, Title: "CPU cost per datagram, CONNECT-UDP over HTTP/3", Unit: "µs/dgram", Decimals: 1, LessIsBetter: true, Unsupported: notNone, Against: "cpu-udp-socks",
				Note: "proxy CPU (utime+stime) over each run at the kept level divided by the datagrams echoed (a datagram and its echo count once), median of the runs; QUIC's encryption and acknowledgements included."},
		},
	},
	{
		id: "udp-socks", kind: kindUDP, listener: lnSOCKS, needs: []string{featSOCKS, featUDP}, group: "udp", wsSize: 64,
		levels: []int{16, 64, 256}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "udp-socks", Section: secUDP, Title: "SOCKS5 UDP ASSOCIATE, 64-byte datagrams", Unit: "dgram/s", Selects: true, Unsupported: notNone},
			{ID: "udp-socks-p99", Section: secUDP, Title: "SOCKS5 UDP round trip, 64-byte datagrams (p99)", Unit: "ms", Decimals: 2, LessIsBetter: true, Unsupported: notNone},
			{ID: "cpu-udp-socks", Section: secUDP, Title: "CPU cost per datagram, SOCKS5 UDP ASSOCIATE", Unit: "µs/dgram", Decimals: 1, LessIsBetter: true, Unsupported: notNone},
		},
	},
	{
		id: "udp-mem", kind: kindHold, listener: lnHTTPS, needs: []string{featHTTPS, featH3, featUDP}, group: "udp", hold: holdUDP,
		steps: []int{1000, 5000}, memPrefix: "udp-mem",
		rows: udpMemRows("udp-mem", secUDP, "CONNECT-UDP flows", "flow"),
	},
}

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
		// The HTTPS rows' client on the plain port: the same Go load tool,
		// so that the HTTPS port's CPU per request is compared with the
		// plain port's under the same client (wrk batches differently).
		id: "http-1k-go", kind: kindHTTP, path: "/1k", body: 1 << 10,
		levels: []int{16, 64, 256, 1024}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "http-1k-go", Title: "HTTP, 1 KB responses, Go load tool", Unit: "req/s", Selects: true,
				Note: "the same requests as the 1 KB row sent by bench/load (the client of the HTTPS and HTTP/2 rows, one request at a time per connection) instead of wrk."},
			{ID: "cpu-1k-go", Title: "CPU cost per request (1 KB), Go load tool", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone,
				Note: "proxy CPU over each run of the Go load tool's 1 KB runs at their kept level divided by the requests it completed, median of the runs: the baseline of the HTTPS port's CPU cost per request, measured with the same client."},
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
			{ID: "cpu-1m", Title: "CPU cost per byte (1 MB responses)", Unit: "ns/B", Decimals: 2, LessIsBetter: true, Unsupported: notNone,
				Note: cpuPerByteNote("HTTP 1 MB", "the response bytes wrk received")},
		},
	},
	{
		id: "http-10m", kind: kindWrk, path: "/10m", body: 10 << 20,
		levels: []int{1, 4, 16}, quickLevels: []int{1, 4},
		rows: []report.Row{
			{ID: "http-10m", Title: "HTTP, 10 MB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
			{ID: "cpu-10m", Title: "CPU cost per byte (10 MB responses)", Unit: "ns/B", Decimals: 2, LessIsBetter: true, Unsupported: notNone,
				Note: cpuPerByteNote("HTTP 10 MB", "the response bytes wrk received")},
		},
	},
	{
		id: "connect-bulk", kind: kindBulk,
		levels: []int{1, 4, 16}, quickLevels: []int{1, 4},
		rows: []report.Row{
			{ID: "connect-bulk", Title: "CONNECT tunnels, bulk transfer", Unit: "Gbit/s", Decimals: 1, Selects: true, Chart: "throughput"},
			{ID: "cpu-bulk", Title: "CPU cost per byte (CONNECT bulk)", Unit: "ns/B", Decimals: 2, LessIsBetter: true, Unsupported: notNone,
				Note: cpuPerByteNote("CONNECT bulk", "the bytes the sink received")},
		},
	},
	{
		id: "mem-tunnels", kind: kindHold, steps: []int{1000, 5000, 9000}, memPrefix: "mem",
		rows: memRows("mem", secPlain, "tunnels", "memory", false),
	},

	// SOCKS5 (issue 6), beside the plain port's CONNECT rows.
	{
		id: "socks-bulk", kind: kindBulk, listener: lnSOCKS, needs: []string{featSOCKS}, group: "socks",
		levels: []int{1, 4, 16}, quickLevels: []int{4},
		rows: []report.Row{
			{ID: "socks-bulk", Section: secSOCKS, Title: "SOCKS5 CONNECT tunnels, bulk transfer", Unit: "Gbit/s", Decimals: 1, Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "socks-mem", kind: kindHold, listener: lnSOCKS, needs: []string{featSOCKS}, group: "socks",
		steps: []int{1000, 5000, 9000}, memPrefix: "socks-mem",
		rows: memRows("socks-mem", secSOCKS, "SOCKS5 tunnels", "", true),
	},

	// HTTPS proxy port (issue 4): the seed's table, new connections
	// resuming their TLS session, and the full-handshake row.
	{
		id: "https-1k", kind: kindHTTP, listener: lnHTTPS, needs: []string{featHTTPS}, group: "https", path: "/1k", body: 1 << 10,
		levels: []int{16, 64, 256, 1024}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "https-1k", Section: secHTTPS, Title: "HTTP, 1 KB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
			{ID: "cpu-https-1k", Section: secHTTPS, Title: "CPU cost per request (1 KB)", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone, Against: "cpu-1k-go",
				Note: "derived from the HTTPS 1 KB runs at their kept level, as the plain port's: proxy CPU over each run divided by the requests it completed, median of the runs; the comparison column divides it by the plain port's CPU cost per request (1 KB) with the same client (the Go load tool) in the same campaign."},
		},
	},
	{
		id: "https-10k", kind: kindHTTP, listener: lnHTTPS, needs: []string{featHTTPS}, group: "https", path: "/10k", body: 10 << 10,
		levels: []int{16, 64, 256, 1024}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "https-10k", Section: secHTTPS, Title: "HTTP, 10 KB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "https-1k-newconn", kind: kindHTTP, listener: lnHTTPS, needs: []string{featHTTPS}, group: "https", path: "/1k", body: 1 << 10, newConn: true,
		levels: []int{16, 64, 256}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "https-1k-newconn", Section: secHTTPS, Title: "HTTP, 1 KB responses, a new connection per request", Unit: "req/s", Selects: true, Chart: "throughput",
				Note: "each new connection offers the TLS session of an earlier one (Go's client session cache, TLS 1.3 tickets); how many the proxy resumed is in runs.json (tls_resumed) and in the notes when it resumed fewer than half."},
			{ID: "cpu-https-1k-newconn", Section: secHTTPS, Title: "CPU cost per request, a new connection per request", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone,
				Note: "proxy CPU over each run at the kept level divided by the requests it completed (one TCP connection, one TLS handshake and one request each), median of the runs."},
		},
	},
	{
		id: "https-1m", kind: kindHTTP, listener: lnHTTPS, needs: []string{featHTTPS}, group: "https", path: "/1m", body: 1 << 20,
		levels: []int{4, 16, 64}, quickLevels: []int{16},
		rows: []report.Row{
			{ID: "https-1m", Section: secHTTPS, Title: "HTTP, 1 MB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "https-10m", kind: kindHTTP, listener: lnHTTPS, needs: []string{featHTTPS}, group: "https", path: "/10m", body: 10 << 20,
		levels: []int{1, 4, 16}, quickLevels: []int{4},
		rows: []report.Row{
			{ID: "https-10m", Section: secHTTPS, Title: "HTTP, 10 MB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "https-connect-bulk", kind: kindBulk, listener: lnHTTPS, needs: []string{featHTTPS}, group: "https",
		levels: []int{1, 4, 16}, quickLevels: []int{4},
		rows: []report.Row{
			{ID: "https-connect-bulk", Section: secHTTPS, Title: "CONNECT tunnels, bulk transfer", Unit: "Gbit/s", Decimals: 1, Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "https-mem", kind: kindHold, listener: lnHTTPS, needs: []string{featHTTPS}, group: "https",
		steps: []int{1000, 5000, 9000}, memPrefix: "https-mem",
		rows: memRows("https-mem", secHTTPS, "tunnels", "", false),
	},
	{
		id: "https-1k-full", kind: kindHTTP, listener: lnHTTPS, needs: []string{featHTTPS}, group: "https", path: "/1k", body: 1 << 10, newConn: true, fullHandshake: true,
		levels: []int{16, 64, 256}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "https-1k-full", Section: secHTTPSFull, Title: "HTTP, 1 KB responses, a new connection per request, full handshake", Unit: "req/s", Selects: true, Chart: "throughput"},
			{ID: "cpu-https-1k-full", Section: secHTTPSFull, Title: "CPU cost per request, a new connection and a full handshake per request", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone,
				Note: "proxy CPU over each run at the kept level divided by the requests it completed, median of the runs."},
		},
	},

	// HTTP/2 over TLS (issue 5), on the HTTPS port with ALPN h2: one
	// connection per client connection, one stream at a time on it (no
	// multiplexing), as the seed ran them.
	{
		id: "h2-1k", kind: kindH2, listener: lnHTTPS, needs: []string{featHTTPS, featH2}, group: "h2", path: "/1k", body: 1 << 10,
		levels: []int{16, 64, 256, 1024}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "h2-1k", Section: secH2, Title: "HTTP, 1 KB responses", Unit: "req/s", Selects: true, Chart: "throughput",
				Note: "one HTTP/2 connection per client connection, each sending forwarded requests (:scheme http, :authority the origin, Proxy-Authorization) one after the other on one stream at a time: no multiplexing, as in the seed. The proxy forwards them to the HTTP/1.1 origin. \"No proxy\" is HTTP/2 over TLS straight to an HTTP/2 origin (golang.org/x/net/http2's server)."},
			{ID: "cpu-h2-1k", Section: secH2, Title: "CPU cost per request (1 KB)", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone, Against: "cpu-https-1k",
				Note: "derived from the HTTP/2 1 KB runs at their kept level, as the plain port's: proxy CPU over each run divided by the requests it completed, median of the runs; the comparison column divides it by the HTTPS port's HTTP/1.1 CPU cost per request (1 KB) of the same campaign."},
		},
	},
	{
		id: "h2-10k", kind: kindH2, listener: lnHTTPS, needs: []string{featHTTPS, featH2}, group: "h2", path: "/10k", body: 10 << 10,
		levels: []int{16, 64, 256, 1024}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "h2-10k", Section: secH2, Title: "HTTP, 10 KB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "h2-1k-newconn", kind: kindH2, listener: lnHTTPS, needs: []string{featHTTPS, featH2}, group: "h2", path: "/1k", body: 1 << 10, newConn: true,
		levels: []int{16, 64, 256}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "h2-1k-newconn", Section: secH2, Title: "HTTP, 1 KB responses, a new connection per request", Unit: "req/s", Selects: true, Chart: "throughput",
				Note: "TLS handshake (resuming a session), HTTP/2 preface and SETTINGS, one request, close."},
		},
	},
	{
		id: "h2-1m", kind: kindH2, listener: lnHTTPS, needs: []string{featHTTPS, featH2}, group: "h2", path: "/1m", body: 1 << 20,
		levels: []int{4, 16, 64}, quickLevels: []int{16},
		rows: []report.Row{
			{ID: "h2-1m", Section: secH2, Title: "HTTP, 1 MB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "h2-10m", kind: kindH2, listener: lnHTTPS, needs: []string{featHTTPS, featH2}, group: "h2", path: "/10m", body: 10 << 20,
		levels: []int{1, 4, 16}, quickLevels: []int{4},
		rows: []report.Row{
			{ID: "h2-10m", Section: secH2, Title: "HTTP, 10 MB responses", Unit: "req/s", Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "h2-connect-bulk", kind: kindBulk, listener: lnHTTPS, needs: []string{featHTTPS, featH2}, group: "h2",
		levels: []int{1, 4, 16}, quickLevels: []int{4},
		rows: []report.Row{
			{ID: "h2-connect-bulk", Section: secH2, Title: "CONNECT tunnels, bulk transfer", Unit: "Gbit/s", Decimals: 1, Selects: true, Chart: "throughput",
				Note: "one HTTP/2 connection per tunnel, one CONNECT stream on it (RFC 9113 §8.5), upload only. \"No proxy\" has no CONNECT: it is a POST stream of the same bytes to the HTTP/2 origin's sink."},
		},
	},
	{
		id: "h2-mem", kind: kindHold, listener: lnHTTPS, needs: []string{featHTTPS, featH2}, group: "h2",
		steps: []int{1000, 5000, 9000}, memPrefix: "h2-mem",
		rows: memRows("h2-mem", secH2, "HTTP/2 tunnels", "", false),
	},

	// HTTP/3 (issue 19), on the HTTPS port's number over UDP: one QUIC
	// connection per client connection, one request at a time on it.
	{
		id: "h3-1k", kind: kindH3, listener: lnHTTPS, needs: []string{featHTTPS, featH3}, group: "h3", path: "/1k", body: 1 << 10,
		levels: []int{16, 64, 256}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "h3-1k", Section: secH3, Title: "HTTP, 1 KB responses", Unit: "req/s", Selects: true, Chart: "throughput",
				Note: "one QUIC connection per client connection (quic-go's http3 client), each sending forwarded requests (:scheme http, :authority the origin, Proxy-Authorization) one after the other. The proxy forwards them to the HTTP/1.1 origin over its keep-alive pool. \"No proxy\" is HTTP/3 straight to an HTTP/3 origin (quic-go's server)."},
			{ID: "cpu-h3-1k", Section: secH3, Title: "CPU cost per request (1 KB)", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone,
				Note: "derived from the HTTP/3 1 KB runs at their kept level, as the plain port's: proxy CPU over each run divided by the requests it completed, median of the runs."},
		},
	},

	// WebSocket (issue 4), on the plain port and over TLS.
	{
		id: "ws-64", kind: kindWS, needs: []string{featWebSocket}, group: "websocket", wsSize: 64,
		levels: []int{16, 64, 256}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "ws-64", Section: secWS, Title: "WebSocket, 64-byte messages", Unit: "msg/s", Selects: true, Chart: "throughput"},
			{ID: "ws-p99", Section: secWS, Title: "WebSocket round trip, 64-byte messages (p99)", Unit: "ms", Decimals: 1, LessIsBetter: true,
				Note: "99th percentile of the time from sending a message to receiving its echo, over the runs at one level for every column (closed loop: one message in flight per connection)."},
			{ID: "ws-cpu", Section: secWS, Title: "CPU cost per WebSocket message", Unit: "µs/msg", Decimals: 1, LessIsBetter: true, Unsupported: notNone,
				Note: "proxy CPU (utime+stime of all its processes) over the 64-byte runs at the kept level divided by the messages echoed (a message and its echo count once)."},
		},
	},
	{
		id: "ws-64k", kind: kindWS, needs: []string{featWebSocket}, group: "websocket", wsSize: 64 << 10,
		levels: []int{1, 4, 16}, quickLevels: []int{4},
		rows: []report.Row{
			{ID: "ws-64k", Section: secWS, Title: "WebSocket, 64 KB messages", Unit: "Gbit/s", Decimals: 1, Selects: true, Chart: "throughput",
				Note: "echoed payload received by the clients, in Gbit/s; every byte crossed the proxy twice (there and back)."},
		},
	},
	{
		id: "ws-newconn", kind: kindWS, needs: []string{featWebSocket}, group: "websocket", wsSize: 64, newConn: true,
		levels: []int{16, 64, 256}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "ws-newconn", Section: secWS, Title: "WebSocket, one connection per exchange", Unit: "msg/s", Selects: true, Chart: "throughput",
				Note: "connect, authenticated upgrade, one 64-byte message and its echo, close."},
		},
	},
	{
		id: "wss-64", kind: kindWS, listener: lnHTTPS, needs: []string{featHTTPS, featWebSocket}, group: "websocket", wsSize: 64,
		levels: []int{16, 64, 256}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "wss-64", Section: secWSS, Title: "WebSocket, 64-byte messages", Unit: "msg/s", Selects: true, Chart: "throughput"},
			{ID: "wss-p99", Section: secWSS, Title: "WebSocket round trip, 64-byte messages (p99)", Unit: "ms", Decimals: 1, LessIsBetter: true},
			{ID: "wss-cpu", Section: secWSS, Title: "CPU cost per WebSocket message", Unit: "µs/msg", Decimals: 1, LessIsBetter: true, Unsupported: notNone},
		},
	},
	{
		id: "wss-64k", kind: kindWS, listener: lnHTTPS, needs: []string{featHTTPS, featWebSocket}, group: "websocket", wsSize: 64 << 10,
		levels: []int{1, 4, 16}, quickLevels: []int{4},
		rows: []report.Row{
			{ID: "wss-64k", Section: secWSS, Title: "WebSocket, 64 KB messages", Unit: "Gbit/s", Decimals: 1, Selects: true, Chart: "throughput"},
		},
	},
	{
		id: "wss-newconn", kind: kindWS, listener: lnHTTPS, needs: []string{featHTTPS, featWebSocket}, group: "websocket", wsSize: 64, newConn: true,
		levels: []int{16, 64, 256}, quickLevels: []int{64},
		rows: []report.Row{
			{ID: "wss-newconn", Section: secWSS, Title: "WebSocket, one connection per exchange", Unit: "msg/s", Selects: true, Chart: "throughput",
				Note: "TLS sessions resumed as in the HTTPS new-connection test."},
		},
	},
}

// shapeTests are the HTTP/3 against HTTP/2 rows of issue 32 at its two
// shapes: 16 connections with one request in flight each, and 4 with 8;
// rustle's CPU per forwarded 1 KB GET over each, and in the no-proxy
// column the origin's own (quic-go's HTTP/3 server, x/net's HTTP/2
// server answering the same bodies): the floor of what the protocol
// costs on this machine.
func shapeTests() []testDef {
	var out []testDef
	for _, sh := range []struct{ conns, inflight int }{{16, 1}, {4, 8}} {
		shape := fmt.Sprintf("%dx%d", sh.conns, sh.inflight)
		what := fmt.Sprintf("%d connections × %d in flight", sh.conns, sh.inflight)
		for _, pr := range []struct {
			name string
			kind kind
			feat string
			sec  string
		}{{"h2", kindH2, featH2, secH2}, {"h3", kindH3, featH3, secH3}} {
			row := report.Row{ID: "cpu-" + pr.name + "-" + shape, Section: pr.sec, Title: "CPU cost per request (1 KB), " + what,
				Unit: "µs/req", Decimals: 1, LessIsBetter: true, Selects: true}
			if pr.name == "h3" {
				row.Against = "cpu-h2-" + shape
				row.Note = "the proxy's CPU per forwarded 1 KB GET at a fixed shape (the load tool's -conns and -inflight), beside HTTP/2's at the same shape (issue 32: at most 2×). \"No proxy\" is the origin's own CPU per request answering HTTP/3 (quic-go's http3 server) and HTTP/2 (x/net's server): the floor of what the protocol costs here."
			}
			out = append(out, testDef{
				id: pr.name + "-" + shape, kind: pr.kind, listener: lnHTTPS, needs: []string{featHTTPS, pr.feat}, group: "h3",
				path: "/1k", body: 1 << 10, inflight: sh.inflight, originCPU: true,
				levels: []int{sh.conns}, quickLevels: []int{sh.conns},
				rows: []report.Row{row},
			})
		}
	}
	return out
}

// coresTest is the test of the "More cores" table with n proxy cores: the
// seed's http-1kb at its levels 64 to 4,096, keep-alive.
func coresTest(n int) testDef {
	row := report.Row{ID: fmt.Sprintf("cores-%d", n), Section: secCores, Title: fmt.Sprint(n), Unit: "req/s", Selects: true, Cores: n, Unsupported: notNone}
	if n == 1 {
		row.Note = "the seed's http-1kb test (1 KB responses, keep-alive, authentication on) with n proxy cores: the proxy pinned to n CPUs on n physical cores with n workers (Squid: workers n), wrk with n threads, wrk and the origin on the other CPUs; connection levels 64, 256, 1,024 and 4,096, best clean level kept. The ratio columns divide each proxy's figure by its own with 1 core (the seed's ×7.96 at 8 for its proxy)."
	}
	return testDef{
		id: row.ID, kind: kindWrk, path: "/1k", body: 1 << 10, proxyCores: n, group: "cores",
		levels: []int{64, 256, 1024, 4096}, quickLevels: []int{256, 1024},
		rows: []report.Row{row},
	}
}

// init adds the DNS tests (dns.go) and the "More cores" tests and fills in the fields every row of a test shares: its test, the
// plain section by default, the listener and group defaults, and the
// proxies that lack a feature the test needs (their cells read "—").
func init() {
	tests = append(tests, udpTests...)
	tests = append(tests, dnsTests...)
	tests = append(tests, parentTests()...)
	tests = append(tests, rateTests()...)
	tests = append(tests, listTest(), transparentTest())
	tests = append(tests, interceptTests()...)
	tests = append(tests, shapeTests()...)
	for _, n := range coreCounts {
		tests = append(tests, coresTest(n))
	}
	for i := range tests {
		t := &tests[i]
		if t.listener == "" {
			t.listener = lnHTTP
		}
		if len(t.needs) == 0 {
			t.needs = []string{featHTTP}
		}
		if t.group == "" {
			t.group = "plain"
		}
		for j := range t.rows {
			r := &t.rows[j]
			r.Test = t.id
			if r.Section == "" {
				r.Section = secPlain
			}
			r.Unsupported = append([]string(nil), r.Unsupported...)
			for _, p := range proxies {
				if !p.has(t.needs) && !slices.Contains(r.Unsupported, p.name) {
					r.Unsupported = append(r.Unsupported, p.name)
				}
			}
		}
	}
}

// groups lists the names -tests accepts for a group of tests.
func groups() []string {
	var out []string
	for _, t := range tests {
		if !slices.Contains(out, t.group) {
			out = append(out, t.group)
		}
	}
	return out
}

// selectTests returns the tests named in list (comma-separated groups, test
// or row IDs; "" or "all" for every test), in campaign order.
func selectTests(list string) ([]testDef, error) {
	if list == "" || list == "all" {
		return tests, nil
	}
	want := map[string]bool{}
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if slices.Contains(groups(), name) {
			for _, t := range tests {
				if t.group == name {
					want[t.id] = true
				}
			}
			continue
		}
		id := ""
		for _, t := range tests {
			if t.id == name {
				id = t.id
			}
			for _, r := range t.rows {
				if r.ID == name {
					id = t.id
				}
			}
		}
		if id == "" {
			return nil, fmt.Errorf("campaign: unknown test %q (groups: %s; tests: %s)", name, strings.Join(groups(), ", "), testIDs())
		}
		want[id] = true
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
