//go:build linux

package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/rustle-proxy/rustle/bench/report"
)

func TestSelectTests(t *testing.T) {
	tests := []struct {
		list    string
		want    []string
		wantErr bool
	}{
		{list: "all", want: []string{"http-1k", "http-10k", "http-1k-newconn", "http-1m", "http-10m", "connect-bulk", "mem-tunnels",
			"socks-bulk", "socks-mem",
			"https-1k", "https-10k", "https-1k-newconn", "https-1m", "https-10m", "https-connect-bulk", "https-mem", "https-1k-full",
			"h2-1k", "h2-10k", "h2-1k-newconn", "h2-1m", "h2-10m", "h2-connect-bulk", "h2-mem", "h3-1k",
			"ws-64", "ws-64k", "ws-newconn", "wss-64", "wss-64k", "wss-newconn"}},
		{list: "connect-bulk,http-1k", want: []string{"http-1k", "connect-bulk"}},
		{list: "cpu-1k", want: []string{"http-1k"}},
		{list: "mem-9000, http-1k", want: []string{"http-1k", "mem-tunnels"}},
		{list: "plain", want: []string{"http-1k", "http-10k", "http-1k-newconn", "http-1m", "http-10m", "connect-bulk", "mem-tunnels"}},
		{list: "socks", want: []string{"socks-bulk", "socks-mem"}},
		{list: "websocket,socks-mem-pss-9000", want: []string{"socks-mem", "ws-64", "ws-64k", "ws-newconn", "wss-64", "wss-64k", "wss-newconn"}},
		{list: "https", want: []string{"https-1k", "https-10k", "https-1k-newconn", "https-1m", "https-10m", "https-connect-bulk", "https-mem", "https-1k-full"}},
		{list: "wss-p99,ws-cpu", want: []string{"ws-64", "wss-64"}},
		{list: "h2", want: []string{"h2-1k", "h2-10k", "h2-1k-newconn", "h2-1m", "h2-10m", "h2-connect-bulk", "h2-mem"}},
		{list: "h2-mem-9000,h2-mem-slope,https-1k", want: []string{"https-1k", "h2-mem"}},
		{list: "h3,cpu-h3-1k", want: []string{"h3-1k"}},
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
		if td.kind == kindHTTP && !td.tls() {
			t.Errorf("test %s: load http on a plain port (wrk's job)", td.id)
		}
		if td.fullHandshake && !td.tls() {
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
			if (r.Section == secH2) != td.h2() {
				t.Errorf("row %s in section %q, test needs h2: %v", r.ID, r.Section, td.h2())
			}
			if (r.Section == secH3) != td.h3() {
				t.Errorf("row %s in section %q, test needs h3: %v", r.ID, r.Section, td.h3())
			}
		}
	}
}

func TestUnsupportedCells(t *testing.T) {
	// What each proxy lacks, as the seed's tables show it: Tinyproxy has
	// only the plain port (no WebSocket), Squid no SOCKS, Dante only SOCKS,
	// and "no proxy" has no proxy CPU or memory.
	cases := []struct {
		row  string
		want []string
	}{
		{"http-1k", []string{"dante"}},
		{"cpu-1k", []string{"none", "dante"}},
		{"mem-1000", []string{"none", "dante"}},
		{"socks-bulk", []string{"squid", "tinyproxy"}},
		{"socks-mem-9000", []string{"none", "squid", "tinyproxy"}},
		{"https-1k", []string{"tinyproxy", "dante"}},
		{"https-1k-full", []string{"tinyproxy", "dante"}},
		{"https-mem-slope", []string{"none", "tinyproxy", "dante"}},
		{"ws-64", []string{"tinyproxy", "dante"}},
		{"ws-p99", []string{"tinyproxy", "dante"}},
		{"ws-cpu", []string{"none", "tinyproxy", "dante"}},
		{"wss-64k", []string{"tinyproxy", "dante"}},
		// HTTP/2 to clients: rustle only (and HTTP/2 straight to the
		// origin); Squid's https_port, Tinyproxy and Dante have none.
		{"h2-1k", []string{"squid", "tinyproxy", "dante"}},
		{"h2-10k", []string{"squid", "tinyproxy", "dante"}},
		{"h2-1k-newconn", []string{"squid", "tinyproxy", "dante"}},
		{"h2-1m", []string{"squid", "tinyproxy", "dante"}},
		{"h2-10m", []string{"squid", "tinyproxy", "dante"}},
		{"h2-connect-bulk", []string{"squid", "tinyproxy", "dante"}},
		{"h2-mem-1000", []string{"none", "squid", "tinyproxy", "dante"}},
		{"h2-mem-9000", []string{"none", "squid", "tinyproxy", "dante"}},
		{"h2-mem-slope", []string{"none", "squid", "tinyproxy", "dante"}},
	}
	rows := map[string][]string{}
	for _, td := range tests {
		for _, r := range td.rows {
			rows[r.ID] = r.Unsupported
		}
	}
	for _, tt := range cases {
		t.Run(tt.row, func(t *testing.T) {
			got := append([]string(nil), rows[tt.row]...)
			slices.Sort(got)
			want := append([]string(nil), tt.want...)
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
	e := &env{origin: originAddrs{HTTP: "o:1", Sink: "o:2", Hold: "o:3", WS: "o:4", HTTPS: "o:5", WSS: "o:6", SinkTLS: "o:7", H2: "o:8"}}
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
	// in ten minutes in quick mode.
	for _, list := range append(groups(), "socks,https,websocket") {
		sel, err := selectTests(list)
		if err != nil {
			t.Fatal(err)
		}
		var pairs []pair
		for _, td := range sel {
			for _, p := range proxies {
				if runs(td, p) {
					pairs = append(pairs, pair{td, p})
				}
			}
		}
		// The quick campaign also waits at most 90 s for other load in all.
		t.Logf("-quick -tests %s: %d pairs, estimate %s", list, len(pairs), estimate(pl, pairs))
		if got := estimate(pl, pairs) + 90*time.Second; got > 9*time.Minute {
			t.Errorf("-quick -tests %s: estimate %s with its waits, want under 9 minutes (10 with builds)", list, got)
		}
	}
}

// fill renders the template bench/<name> for a listener as the campaign
// does.
func fill(t *testing.T, name, listener string, asRoot bool) string {
	t.Helper()
	e := &env{
		benchDir: "..", maxFD: 20000, passwdFile: "/tmp/x/htpasswd",
		user: "bench", pass: "0123456789abcdef", bcryptHash: "$2a$10$abcdefghijklmnopqrstuv",
		asRoot: asRoot, dropUser: "proxy", dropGroup: "proxy",
		certFile: "/tmp/x/tls/server.pem", keyFile: "/tmp/x/tls/server.key", socksMethod: "username",
	}
	path := filepath.Join(t.TempDir(), name)
	if err := e.writeConf(name, path, "/tmp/x/dir", listener, 3128); err != nil {
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
				len(c.AllowPrivate) != 1 || c.AllowPrivate[0] != "127.0.0.0/8" || c.Limits.MaxConnections != -1 {
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
