//go:build linux

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/config"
)

// interceptEnv returns an env with the campaign's TLS files made in a
// temporary directory, as makeCerts makes them, and a real bcrypt hash
// (of "x") that rustle's Validate accepts.
func interceptEnv(t *testing.T) *env {
	t.Helper()
	e := &env{benchDir: "..", tmp: t.TempDir(), user: "bench", pass: "0123456789abcdef",
		bcryptHash: "$2a$04$MDYbuzZoZd8Kh3sNZbyiU.Pz/1cGgkZ/04VR5o4LExhcXf2Ouvyw6", hostsName: "vm",
		maxFD: 20000, passwdFile: "/tmp/x/htpasswd", socksMethod: "none"}
	if err := e.makeCerts(); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestInterceptCA checks the interception CA's files: the key readable by
// its owner only (rustle refuses any other), the bundle holding key and
// certificate, the roots the campaign's CA and the interception CA.
func TestInterceptCA(t *testing.T) {
	e := interceptEnv(t)
	for _, f := range []struct {
		path  string
		mode  os.FileMode
		types []string
	}{
		{e.icCAFile, 0o644, []string{"CERTIFICATE"}},
		{e.icKeyFile, 0o600, []string{"EC PRIVATE KEY"}},
		{e.icBundleFile, 0o600, []string{"EC PRIVATE KEY", "CERTIFICATE"}},
		{e.rootsFile, 0o644, []string{"CERTIFICATE", "CERTIFICATE"}},
	} {
		st, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != f.mode {
			t.Errorf("%s: mode %v, want %v", f.path, st.Mode().Perm(), f.mode)
		}
		data, _ := os.ReadFile(f.path)
		var got []string
		for _, line := range strings.Split(string(data), "\n") {
			if typ, ok := strings.CutPrefix(line, "-----BEGIN "); ok {
				got = append(got, strings.TrimSuffix(typ, "-----"))
			}
		}
		if !slices.Equal(got, f.types) {
			t.Errorf("%s holds %v, want %v", f.path, got, f.types)
		}
	}
}

// TestRustleConfIntercept loads the rustle configuration of each
// interception test with rustle's own loader: interception on (the
// campaign's CA, the origin verified against its CA, a rule for
// 127.0.0.1 and the bench host), a cache of one leaf on the cold row
// only, the SNI check on the SNI row only; nothing intercepted on the
// spliced rows.
func TestRustleConfIntercept(t *testing.T) {
	cases := []struct {
		test      string
		intercept bool
		cache     int
		sni       string
	}{
		{"tls-splice-1k", false, 0, ""},
		{"intercept-1k", true, 4096, ""},
		{"intercept-newconn", true, 4096, ""},
		{"intercept-newconn-cold", true, 1, ""},
		{"tls-splice-newconn", false, 0, ""},
		{"sni-match-newconn", false, 0, "match"},
		{"tls-splice-mem", false, 0, ""},
		{"intercept-mem", true, 4096, ""},
	}
	for _, tt := range cases {
		t.Run(tt.test, func(t *testing.T) {
			e := interceptEnv(t)
			e.test = testByID(t, tt.test)
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
			ic := c.Intercept
			if got := ic.Enabled(); got != tt.intercept {
				t.Fatalf("interception %v, want %v", got, tt.intercept)
			}
			if tt.intercept {
				if ic.CACert != e.icCAFile || ic.CAKey != e.icKeyFile || ic.UpstreamCA != e.caFile || ic.CacheSize != tt.cache {
					t.Errorf("[intercept] = %+v, want the interception CA, upstream_ca %s and cache_size %d", ic, e.caFile, tt.cache)
				}
				if len(ic.Rules) != 1 || !slices.Equal(ic.Rules[0].Hosts, []string{"127.0.0.1", "vm"}) {
					t.Errorf("intercept rules %+v, want one for 127.0.0.1 and vm", ic.Rules)
				}
			}
			if len(c.Listen) != 1 || c.Listen[0].SNI != tt.sni && !(tt.sni == "" && c.Listen[0].SNI == "off") {
				t.Errorf("listener sni %q, want %q", c.Listen[0].SNI, tt.sni)
			}
		})
	}
}

// TestSquidConfIntercept checks Squid's configuration on the
// interception rows: a bumping http_port with the interception CA, the
// certificate generator on its database, ssl_bump bump all and the
// origin verified; and the plain port on the spliced rows.
func TestSquidConfIntercept(t *testing.T) {
	e := interceptEnv(t)
	e.test = testByID(t, "intercept-1k")
	path := filepath.Join(t.TempDir(), "squid.conf")
	if err := e.writeConfData("squid.conf", path, e.confData("/tmp/x/dir", lnHTTP, 3128, 1)); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	conf := string(b)
	for _, want := range []string{
		"http_port 127.0.0.1:3128 ssl-bump tls-cert=" + e.icBundleFile + " generate-host-certificates=on dynamic_cert_mem_cache_size=16MB\n",
		"sslcrtd_program /usr/lib/squid/security_file_certgen -s /tmp/x/dir/ssl_db -M 16MB\n",
		"ssl_bump peek step1\nssl_bump stare step2\nssl_bump bump all\n",
		"tls_outgoing_options cafile=" + e.caFile + "\n",
		"http_access allow authenticated\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("squid.conf lacks %q:\n%s", want, conf)
		}
	}
	e.test = testByID(t, "tls-splice-1k")
	if err := e.writeConfData("squid.conf", path, e.confData("/tmp/x/dir", lnHTTP, 3128, 1)); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if conf := string(b); !strings.Contains(conf, "http_port 127.0.0.1:3128\n") || strings.Contains(conf, "ssl_bump") || strings.Contains(conf, "sslcrtd") {
		t.Errorf("squid.conf of a spliced row bumps:\n%s", conf)
	}
}

// TestSquidCertGen checks where the certificate generator is looked for:
// beside the Squid binary, as Debian lays them out.
func TestSquidCertGen(t *testing.T) {
	for squid, want := range map[string]string{
		"":                            "/usr/lib/squid/security_file_certgen",
		"/usr/sbin/squid":             "/usr/lib/squid/security_file_certgen",
		"/tmp/sq/root/usr/sbin/squid": "/tmp/sq/root/usr/lib/squid/security_file_certgen",
	} {
		if got := squidCertGen(squid); got != want {
			t.Errorf("squidCertGen(%q) = %q, want %q", squid, got, want)
		}
	}
}

// TestSquidBump checks when Squid can run the interception rows.
func TestSquidBump(t *testing.T) {
	cases := []struct {
		version string
		certGen bool
		want    string // a word of the reason; "" = can
	}{
		{"configure options: '--with-openssl' '--enable-ssl-crtd'", true, ""},
		{"configure options: '--with-openssl'", false, "security_file_certgen"},
		{"configure options: '--with-gnutls'", true, "squid-openssl"},
		{"configure options: ", false, "squid-openssl"},
	}
	for _, tt := range cases {
		got := squidBump(tt.version, tt.certGen)
		if (tt.want == "") != (got == "") || !strings.Contains(got, tt.want) {
			t.Errorf("squidBump(%q, %v) = %q, want %q in it", tt.version, tt.certGen, got, tt.want)
		}
	}
}

// TestMitmCommand checks mitmdump's command line and confdir: the
// interception CA as mitmproxy-ca.pem, the campaign's credentials, the
// origin verified against the campaign's CA; and that it refuses a test
// that intercepts nothing.
func TestMitmCommand(t *testing.T) {
	e := interceptEnv(t)
	e.lookPath = map[string]string{"mitmdump": "/usr/bin/mitmdump"}
	e.test = testByID(t, "intercept-1k")
	dir := t.TempDir()
	argv, _, err := mitmCommand(e, dir, lnHTTP, 3128, 1)
	if err != nil {
		t.Fatal(err)
	}
	want := "/usr/bin/mitmdump --listen-host 127.0.0.1 --listen-port 3128 --set confdir=" + filepath.Join(dir, "mitmproxy") +
		" --set proxyauth=bench:0123456789abcdef --set ssl_verify_upstream_trusted_ca=" + e.caFile + " --set flow_detail=0 --set termlog_verbosity=error"
	if got := strings.Join(argv, " "); got != want {
		t.Errorf("mitmdump command\n%s\nwant\n%s", got, want)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "mitmproxy", "mitmproxy-ca.pem"))
	bundle, _ := os.ReadFile(e.icBundleFile)
	if err != nil || string(ca) != string(bundle) {
		t.Errorf("mitmproxy-ca.pem is not the interception CA's bundle (%v)", err)
	}
	e.test = testByID(t, "tls-splice-1k")
	if _, _, err := mitmCommand(e, t.TempDir(), lnHTTP, 3128, 1); err == nil {
		t.Error("mitmproxy started for a spliced row")
	}
}

// TestInterceptLoadArgs checks what the load tool is told on the
// interception rows: https:// requests trusting both CAs, sessions
// resumed but on the new-connection interception rows, the bench host
// in turn on the cold row; and its target, the origin's TLS listener
// (by the bench host name on the SNI rows).
func TestInterceptLoadArgs(t *testing.T) {
	e := &env{rootsFile: "/tmp/roots.pem", hostsName: "vm", origin: originAddrs{HTTP: "o:1", HTTPS: "127.0.0.1:5", Hold: "o:3"}}
	proxy := &running{addr: "127.0.0.1:3128", auth: "bench:pw"}
	cases := []struct {
		test       string
		r          *running
		args, addr string
	}{
		{"tls-splice-1k", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -https -ca /tmp/roots.pem -resume", "127.0.0.1:5"},
		{"tls-splice-1k", &running{}, "-https -ca /tmp/roots.pem -resume", "127.0.0.1:5"},
		{"intercept-1k", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -https -ca /tmp/roots.pem -resume", "127.0.0.1:5"},
		{"intercept-newconn", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -https -ca /tmp/roots.pem", "127.0.0.1:5"},
		{"intercept-newconn-cold", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -https -ca /tmp/roots.pem -alt-host vm", "127.0.0.1:5"},
		{"tls-splice-newconn", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -https -ca /tmp/roots.pem -resume", "vm:5"},
		{"sni-match-newconn", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -https -ca /tmp/roots.pem -resume", "vm:5"},
		{"intercept-mem", proxy, "-proxy 127.0.0.1:3128 -auth bench:pw -https -ca /tmp/roots.pem", "127.0.0.1:5"},
	}
	for _, tt := range cases {
		td := testByID(t, tt.test)
		if got := strings.Join(e.loadArgs(td, tt.r), " "); got != tt.args {
			t.Errorf("loadArgs(%s) = %q, want %q", tt.test, got, tt.args)
		}
		if got := e.target(td, tt.r); got != tt.addr {
			t.Errorf("target(%s) = %q, want %q", tt.test, got, tt.addr)
		}
	}
}
