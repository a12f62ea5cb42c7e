//go:build linux

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
)

// Features of the interception rows (issue 29).
const (
	// featIntercept: terminates the client's TLS inside a CONNECT tunnel
	// with a certificate it mints for the target, signed by the
	// campaign's interception CA, and forwards the requests inside over
	// its own TLS to the origin (rustle's [intercept], Squid's ssl_bump,
	// mitmproxy).
	featIntercept = "intercept"
	// featLeafCache: a bounded cache of minted certificates the campaign
	// can size to one leaf (rustle's intercept.cache_size), for the
	// cold-cache row: rustle only.
	featLeafCache = "leaf-cache"
	// featSNI: reads each tunnel's ClientHello and checks its server name
	// against the CONNECT host (rustle's sni = "match"): rustle only.
	featSNI = "sni"
)

// Certificate caches of an interception test (testDef.intercept).
const (
	interceptWarm = "warm" // the default cache: one leaf minted, then reused
	interceptCold = "cold" // a cache of one leaf and two names in turn: every connection mints
)

// interceptConf is what the proxy templates get for an interception
// test: the campaign's interception CA, the origin's CA that verifies
// the origin, and the size of rustle's leaf cache.
type interceptConf struct {
	// CACert and CAKey are the interception CA's certificate and key
	// (PEM, the key readable by its owner only); Bundle is both in one
	// file, as Squid's ssl-bump port and mitmproxy take them.
	CACert, CAKey, Bundle string
	// UpstreamCA is the CA of the origin's certificate (the campaign's).
	UpstreamCA string
	// CacheSize is rustle's intercept.cache_size: 0 (its default, 4,096)
	// or 1 for the cold-cache row.
	CacheSize int
	// CertGen is Squid's certificate generator and CertDB its database
	// directory.
	CertGen, CertDB string
}

// squidCertGen returns the path of Squid's certificate generator beside
// the Squid binary squid: Debian's /usr/lib/squid/security_file_certgen
// for /usr/sbin/squid (in squid-openssl; the GnuTLS squid has none), and
// the same layout under a squid-openssl package unpacked elsewhere
// (dpkg-deb -x) and found first in PATH.
func squidCertGen(squid string) string {
	if squid == "" {
		squid = "/usr/sbin/squid"
	}
	return filepath.Join(filepath.Dir(filepath.Dir(squid)), "lib", "squid", "security_file_certgen")
}

// interceptConfFor returns the interception settings of test t for a
// proxy whose files are in dir; nil when t intercepts nothing.
func (e *env) interceptConfFor(t testDef, dir string) *interceptConf {
	if t.intercept == "" {
		return nil
	}
	ic := &interceptConf{CACert: e.icCAFile, CAKey: e.icKeyFile, Bundle: e.icBundleFile, UpstreamCA: e.caFile,
		CertGen: squidCertGen(e.lookPath["squid"]), CertDB: filepath.Join(dir, "ssl_db")}
	if t.intercept == interceptCold {
		ic.CacheSize = 1
	}
	return ic
}

// makeInterceptCA writes the interception CA into dir: a certificate
// (icept-ca.pem), its key (icept-ca.key, mode 0600: rustle refuses a key
// others may read; Squid reads it as root before it drops privileges,
// mitmproxy runs as the campaign) and both in one file (icept-bundle.pem,
// 0600); and the roots the load tool trusts for an https:// target
// (roots.pem: the campaign's CA, which signed the origin's certificate,
// and the interception CA).
func (e *env) makeInterceptCA(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("campaign: interception CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "rustle bench interception CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return fmt.Errorf("campaign: interception CA certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("campaign: interception CA key: %w", err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	campaignCA, err := os.ReadFile(e.caFile)
	if err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	e.icCAFile, e.icKeyFile = filepath.Join(dir, "icept-ca.pem"), filepath.Join(dir, "icept-ca.key")
	e.icBundleFile, e.rootsFile = filepath.Join(dir, "icept-bundle.pem"), filepath.Join(dir, "roots.pem")
	for _, f := range []struct {
		path string
		data []byte
		mode os.FileMode
	}{
		{e.icCAFile, certPEM, 0o644},
		{e.icKeyFile, keyPEM, 0o600},
		{e.icBundleFile, append(append([]byte(nil), keyPEM...), certPEM...), 0o600},
		{e.rootsFile, append(append([]byte(nil), campaignCA...), certPEM...), 0o644},
	} {
		if err := os.WriteFile(f.path, f.data, f.mode); err != nil {
			return fmt.Errorf("campaign: %w", err)
		}
	}
	return nil
}

// secIntercept is the section of the interception rows.
const secIntercept = "TLS interception: https:// requests through CONNECT, spliced and intercepted"

// interceptNote is the note of the section's first row.
const interceptNote = "\"load http -https\": each connection is a CONNECT tunnel on the proxy's plain port to the origin's TLS listener (127.0.0.1, 1 KB responses, keep-alive), the client's TLS (Go, TLS 1.3, ALPN http/1.1) inside it, trusting the campaign's CA and its interception CA; requests in origin form. On this row every proxy splices (a plain CONNECT tunnel: the proxy never sees the requests, only relays TLS records). \"No proxy\" is the same TLS straight to the origin."

// interceptTests are the tests of the intercept group: the same https://
// requests spliced and intercepted, new intercepted connections with a
// warm and a cold certificate cache, new spliced tunnels with and
// without rustle's SNI check, and memory per idle connection of each
// kind.
func interceptTests() []testDef {
	https := func(t testDef) testDef {
		t.https, t.group, t.path, t.body = true, "intercept", "/1k", 1<<10
		t.kind = kindHTTP
		return t
	}
	return []testDef{
		https(testDef{
			id: "tls-splice-1k", needs: []string{featHTTP},
			levels: []int{16, 64, 256}, quickLevels: []int{64},
			rows: []report.Row{
				{ID: "tls-splice-1k", Section: secIntercept, Title: "https://, 1 KB responses, spliced (plain CONNECT tunnel)", Unit: "req/s", Selects: true, Note: interceptNote},
				{ID: "cpu-tls-splice-1k", Section: secIntercept, Title: "CPU cost per request, spliced", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone,
					Note: "proxy CPU (utime+stime of all its processes) over each run at the kept level divided by the requests completed, median of the runs."},
			},
		}),
		https(testDef{
			id: "intercept-1k", needs: []string{featIntercept}, intercept: interceptWarm,
			levels: []int{16, 64, 256}, quickLevels: []int{64},
			rows: []report.Row{
				{ID: "intercept-1k", Section: secIntercept, Title: "https://, 1 KB responses, intercepted", Unit: "req/s", Selects: true, Against: "tls-splice-1k",
					Note: "the same requests, the proxy intercepting: it terminates the client's TLS with a certificate it mints for 127.0.0.1 (signed by the campaign's interception CA), reads each request and forwards it over its own TLS to the origin (verified against the campaign's CA). rustle: [intercept] with one [[intercept.rules]] entry for 127.0.0.1 and the bench host; Squid: ssl_bump peek, stare, bump (its certificate mimics the origin's) with security_file_certgen (Debian's squid-openssl); mitmproxy: mitmdump. The ratio column divides by the spliced row of the same proxy."},
				{ID: "cpu-intercept-1k", Section: secIntercept, Title: "CPU cost per request, intercepted", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone, Against: "cpu-tls-splice-1k",
					Note: "as the spliced row; requests per core is 10⁶ ÷ this figure. The ratio column divides by the spliced CPU cost of the same proxy."},
			},
		}),
		https(testDef{
			id: "intercept-newconn", needs: []string{featIntercept}, intercept: interceptWarm, newConn: true, fullHandshake: true,
			levels: []int{1}, quickLevels: []int{1},
			rows: []report.Row{
				{ID: "intercept-newconn", Section: secIntercept, Title: "New intercepted connections, warm certificate cache (one at a time)", Unit: "conn/s", Selects: true,
					Note: "one connection at a time: CONNECT, a full TLS handshake with the proxy's minted certificate (no session resumption), one 1 KB request, close. The certificate for 127.0.0.1 is minted once and then comes from the proxy's cache. \"No proxy\": a full handshake with the origin per request."},
				{ID: "cpu-intercept-newconn", Section: secIntercept, Title: "CPU per new intercepted connection, warm certificate cache", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone,
					Note: "proxy CPU over each run divided by the connections it completed (one request each), median of the runs; the proxy's own connection to the origin may be pooled (rustle pools it; Squid and mitmproxy open one per client connection)."},
			},
		}),
		https(testDef{
			id: "intercept-newconn-cold", needs: []string{featIntercept, featLeafCache}, intercept: interceptCold, newConn: true, fullHandshake: true, altHost: true,
			levels: []int{1}, quickLevels: []int{1},
			rows: []report.Row{
				{ID: "intercept-newconn-cold", Section: secIntercept, Title: "New intercepted connections, cold certificate cache (one at a time)", Unit: "conn/s", Selects: true, Unsupported: notNone, Against: "intercept-newconn",
					Note: "rustle only (a cache the campaign can size): intercept.cache_size = 1 and the connections naming 127.0.0.1 and the bench host name in turn (\"load http -alt-host\"), one at a time, so that every connection mints a certificate (for rustle one ECDSA P-256 signature: its leaves share one key). Checked by hand with rustle's metrics in one run: rustle_intercept_cert_hits_total 0, rustle_intercept_cert_mints_total 1,920."},
				{ID: "cpu-intercept-newconn-cold", Section: secIntercept, Title: "CPU per new intercepted connection, cold certificate cache", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone, Against: "cpu-intercept-newconn",
					Note: "as the warm row; the ratio column divides by it."},
			},
		}),
		https(testDef{
			id: "tls-splice-newconn", needs: []string{featHTTP}, newConn: true, sniHost: true,
			levels: []int{16, 64}, quickLevels: []int{16},
			rows: []report.Row{
				{ID: "tls-splice-newconn", Section: secIntercept, Title: "New spliced TLS tunnels, SNI check off", Unit: "req/s", Selects: true,
					Note: "a tunnel per request: CONNECT to the bench host name (one address, 127.0.0.1, in /etc/hosts), the client's TLS inside resuming its session with the origin (the ClientHello names the host), one 1 KB request, close. The proxy splices."},
				{ID: "cpu-tls-splice-newconn", Section: secIntercept, Title: "CPU per new spliced tunnel, SNI check off", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone,
					Note: "proxy CPU over each run divided by the tunnels completed (one request each), median of the runs."},
			},
		}),
		https(testDef{
			id: "sni-match-newconn", needs: []string{featHTTP, featSNI}, newConn: true, sniHost: true, sni: "match",
			levels: []int{16, 64}, quickLevels: []int{16},
			rows: []report.Row{
				{ID: "sni-match-newconn", Section: secIntercept, Title: "New spliced TLS tunnels, SNI check on (sni = \"match\")", Unit: "req/s", Selects: true, Unsupported: notNone, Against: "tls-splice-newconn",
					Note: "rustle only: the same tunnels with the listener's sni = \"match\" (the ClientHello read and its server name checked against the CONNECT host before a byte is relayed)."},
				{ID: "cpu-sni-match-newconn", Section: secIntercept, Title: "CPU per new spliced tunnel, SNI check on", Unit: "µs/req", Decimals: 1, LessIsBetter: true, Unsupported: notNone, Against: "cpu-tls-splice-newconn",
					Note: "the ratio column divides by the row with the check off: the SNI check's cost per tunnel is (ratio − 1) × the tunnel's CPU."},
			},
		}),
		{
			id: "tls-splice-mem", kind: kindHold, needs: []string{featHTTP}, group: "intercept", https: true, path: "/1k",
			steps: []int{1000, 2000}, memPrefix: "tls-splice-mem",
			rows: idleRows("tls-splice-mem", "idle spliced TLS tunnels", "", "a CONNECT tunnel with the client's TLS to the origin inside, one 1 KB request made, then idle (keep-alive)"),
		},
		{
			id: "intercept-mem", kind: kindHold, needs: []string{featIntercept}, group: "intercept", https: true, path: "/1k", intercept: interceptWarm,
			steps: []int{1000, 2000}, memPrefix: "intercept-mem",
			rows: idleRows("intercept-mem", "idle intercepted connections", "tls-splice-mem-slope", "the same connection intercepted: the client's TLS terminated by the proxy, one 1 KB request forwarded, then idle; the proxy's connection to the origin pooled or closed as the proxy does"),
		},
	}
}

// idleRows returns the rows of an interception hold test: memory with
// nothing held, with 1,000 and 2,000 idle connections, and per
// connection; against, when not "", is the slope row the last divides by.
func idleRows(prefix, what, against, note string) []report.Row {
	return []report.Row{
		{ID: prefix + "-0", Section: secIntercept, Title: "Memory with no connection (" + what + " rows)", Unit: "MB", LessIsBetter: true, Unsupported: notNone},
		{ID: prefix + "-1000", Section: secIntercept, Title: "Memory with 1,000 " + what, Unit: "MB", LessIsBetter: true, Unsupported: notNone, Selects: true, Note: note + "."},
		{ID: prefix + "-2000", Section: secIntercept, Title: "Memory with 2,000 " + what, Unit: "MB", LessIsBetter: true, Unsupported: notNone},
		{ID: prefix + "-slope", Section: secIntercept, Title: "Memory per " + strings.TrimSuffix(what, "s") + " (0 to 2,000)", Unit: "KB/conn", Decimals: 1, LessIsBetter: true, Unsupported: notNone, Against: against,
			Note: "(VmRSS with 2,000 − VmRSS with none) ÷ 2,000."},
	}
}

// mitmProxy is the mitmproxy column: Debian's mitmproxy, mitmdump,
// intercepting every tunnel (it has no splice in this configuration, so
// it runs the interception rows only).
var mitmProxy = &proxyDef{
	name: "mitmproxy", label: "mitmproxy", pkg: "mitmproxy", binary: "mitmdump",
	features: []string{featIntercept},
	tuning: []string{
		"Debian package mitmproxy, mitmdump in the foreground, one process (Python asyncio)",
		"--set confdir=<its directory> holding mitmproxy-ca.pem: the campaign's interception CA (key and certificate), so that clients trust it as they trust rustle's and Squid's",
		"--set proxyauth=user:pass (Basic, as every proxy), --set ssl_verify_upstream_trusted_ca=<the campaign's CA> (the origin verified), --set flow_detail=0, --set termlog_verbosity=error; everything else at its defaults (it intercepts every CONNECT)",
		"interception rows only: every tunnel through mitmproxy is intercepted",
	},
	prepare: preparePackaged("mitmdump", "mitmproxy", "--version"),
	command: mitmCommand,
}

// mitmCommand writes mitmproxy's confdir (the interception CA as
// mitmproxy-ca.pem) into dir and returns its command line.
func mitmCommand(e *env, dir, listener string, port, workers int) ([]string, []string, error) {
	if listener != lnHTTP {
		return nil, nil, fmt.Errorf("campaign: mitmproxy runs on the plain port only, not %q", listener)
	}
	ic := e.interceptConfFor(e.test, dir)
	if ic == nil {
		return nil, nil, fmt.Errorf("campaign: mitmproxy runs the interception tests only, not %s", e.test.id)
	}
	confdir := filepath.Join(dir, "mitmproxy")
	if err := os.Mkdir(confdir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("campaign: %w", err)
	}
	bundle, err := os.ReadFile(ic.Bundle)
	if err != nil {
		return nil, nil, fmt.Errorf("campaign: %w", err)
	}
	if err := os.WriteFile(filepath.Join(confdir, "mitmproxy-ca.pem"), bundle, 0o600); err != nil {
		return nil, nil, fmt.Errorf("campaign: %w", err)
	}
	return []string{e.lookPath["mitmdump"],
		"--listen-host", "127.0.0.1", "--listen-port", strconv.Itoa(port),
		"--set", "confdir=" + confdir,
		"--set", "proxyauth=" + e.user + ":" + e.pass,
		"--set", "ssl_verify_upstream_trusted_ca=" + ic.UpstreamCA,
		"--set", "flow_detail=0",
		"--set", "termlog_verbosity=error",
	}, []string{"HOME=" + dir}, nil
}

// squidBump checks whether the Squid of squid -v output version can run
// the interception rows (ssl_bump needs OpenSSL and the certificate
// generator) and returns why not, or "".
func squidBump(version string, certGen bool) string {
	switch {
	case !strings.Contains(version, "--with-openssl"):
		return "this Squid is not built with OpenSSL (squid -v), so it has no ssl_bump; Debian's squid-openssl has it (it replaces the squid package: the campaign does not swap them, install it by hand)"
	case !certGen:
		return "its certificate generator security_file_certgen is missing (Debian's squid-openssl ships it)"
	}
	return ""
}

// initCertDB makes Squid's certificate database for an interception test
// (security_file_certgen -c), owned by Squid's unprivileged user when the
// campaign runs as root.
func (e *env) initCertDB(ctx context.Context, ic *interceptConf) error {
	out, err := exec.CommandContext(ctx, ic.CertGen, "-c", "-s", ic.CertDB, "-M", "16MB").CombinedOutput()
	if err != nil {
		return fmt.Errorf("campaign: %s -c -s %s: %w: %s", ic.CertGen, ic.CertDB, err, firstLines(string(out), 3))
	}
	if e.asRoot && e.dropUser != "" {
		if out, err := exec.CommandContext(ctx, "chown", "-R", e.dropUser+":"+e.dropGroup, ic.CertDB).CombinedOutput(); err != nil {
			return fmt.Errorf("campaign: chown %s: %w: %s", ic.CertDB, err, firstLines(string(out), 2))
		}
	}
	return nil
}

// benchHost is the host name the interception rows use for the origin
// besides 127.0.0.1: the /etc/hosts name whose only address is 127.0.0.1
// that the DNS rows found (env.hostsName), or "localhost".
func (e *env) benchHost() string {
	if e.hostsName != "" {
		return e.hostsName
	}
	return "localhost"
}
