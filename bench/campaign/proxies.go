//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/template"
	"time"

	"golang.org/x/net/proxy"
)

// proxyDef is one proxy the campaign can run.
type proxyDef struct {
	name, label string
	// pkg is the Debian package that provides the proxy, installed with
	// apt-get when binary is missing; "" for rustle and "none".
	pkg, binary string
	// features are what the proxy can do (featHTTP, featHTTPS, ...); the
	// rows of a test that needs another read "—" in its column.
	features []string
	// tuning is shown in the report under "Versions and tuning".
	tuning []string
	// prepare makes the proxy runnable (builds it, finds it) and returns
	// its version; an error means the proxy is skipped, with the error as
	// the reason. It may record features the proxy lacks on this machine
	// in e.lacking, and tuning lines decided here in e.extraTuning.
	prepare func(ctx context.Context, e *env) (string, error)
	// command writes the proxy's configuration for one listener (lnHTTP,
	// lnHTTPS, lnSOCKS) with the given number of workers (1, but for the
	// "More cores" tests) into dir and returns the command line that runs
	// it in the foreground on port, and environment variables to add.
	command func(e *env, dir, listener string, port, workers int) (argv, environ []string, err error)
}

// has reports whether the proxy has every feature in needs.
func (p *proxyDef) has(needs []string) bool {
	for _, n := range needs {
		if !slices.Contains(p.features, n) {
			return false
		}
	}
	return true
}

// allFeatures is what rustle and the client straight to the origin can
// do (the origin has HTTP/2 and HTTP/3 listeners for the no-proxy column
// of the HTTP/2 and HTTP/3 rows).
var allFeatures = []string{featHTTP, featHTTPS, featWebSocket, featSOCKS, featH2, featH3, featIntercept}

// confData fills the templates bench/squid.conf, bench/tinyproxy.conf,
// bench/rustle.toml and bench/danted.conf.
type confData struct {
	Port int
	// Workers is the number of workers (rustle's workers, Squid's SMP
	// workers): 1, but for the "More cores" tests.
	Workers int
	// Listener is the port's protocol: "http", "https" or "socks5".
	Listener string
	// TLS is true for an https listener, with the server's certificate
	// chain and key in Cert and Key (PEM files).
	TLS       bool
	Cert, Key string
	Dir       string
	MaxFD     int
	Passwd    string // htpasswd file (user:bcrypt)
	AuthUser  string
	AuthPass  string
	Bcrypt    string
	User      string // unprivileged user to switch to when run as root
	Group     string
	// SOCKSMethod is Dante's socksmethod: "username" (a system user) or
	// "none".
	SOCKSMethod string
	// Provider is the identity provider of a rustle column: "" (the
	// htpasswd user), "ldap" (the directory at LDAPURL) or "jwt" (tokens
	// of Issuer, keys at JWKSURL); or "limits" (the htpasswd user with a
	// per-user connection limit and a quota, counted locally) and
	// "redis" (the same counted through the Redis at RedisURL); or
	// "x25519" (the htpasswd user, the https listener preferring the
	// classical X25519 key exchange); or "authz" (the htpasswd user, every
	// request asked of the decision service at AuthzURL).
	Provider                 string
	LDAPURL, JWKSURL, Issuer string
	RedisURL                 string
	AuthzURL                 string
	// Resolver is rustle's [dns] and upstream keep-alive for a DNS test
	// (dns.go); zero for every other test.
	Resolver resolverConf
	// ParentURL is the url of rustle's [[parents]] entry and Via its
	// route's via ("direct" or "parent"), for the parent tests; "" = no
	// parent and no route.
	ParentURL, Via string
	// Intercept is rustle's [intercept] and Squid's ssl_bump for an
	// interception test (intercept.go); nil for every other test.
	Intercept *interceptConf
	// SNI is rustle's listener sni for the SNI-check row; "" leaves it
	// at its default.
	SNI string
	// BenchHost is the host name the interception rule names besides
	// 127.0.0.1 (env.benchHost).
	BenchHost string
}

// proxies lists every proxy the campaign knows, in column order.
var proxies = []*proxyDef{
	{
		name: "rustle", label: "rustle",
		features: rustleFeatures,
		tuning: []string{
			"go build -trimpath ./cmd/rustle from the tree",
			"workers = 1",
			"socket_buffer_bytes = 1048576 (set in the bench config, as in the seed; the shipped default is 0, kernel autotuning)",
			"[log] level = \"error\"",
			"auth = \"basic\", one user with a bcrypt hash; verdicts cached (auth.cache_ttl default 5m), so bcrypt runs once",
			"one listener per test: protocol \"http\", \"https\" (tls = { cert, key }: TLS 1.2 and 1.3, session tickets on, as shipped) or \"socks5\" (username/password against the same user)",
			"HTTP/2 rows: the same https listener, which offers h2 with ALPN; [http2] at its defaults (100 concurrent streams, 256 KiB stream window, 1 MiB connection window, 16 KiB frames)",
			"HTTP/3 rows: the same https listener with http3 = true (its port number over UDP); [http3] at its defaults",
			"parent rows: the same config with one [[parents]] entry (url http://user:pass@127.0.0.1:PORT, the parent's Basic credentials; health and pool settings at their defaults) and one [[routes]] entry for every request, via = \"direct\" or via the parent",
		},
		prepare: prepareRustle,
		command: rustleCommand(""),
	},
	{
		name: "rustle-ldap", label: "rustle (LDAP user)", pkg: "slapd", binary: "slapd",
		features: []string{featHTTP},
		tuning: []string{
			"rustle as in its own column, but its one user is in an LDAP directory, not htpasswd: an [[auth.providers]] ldap entry (search with a service account, then bind), the listener's providers = [\"directory\"]",
			"the directory: Debian's slapd on loopback (mdb, the user loaded with slapadd), pinned to the load core; rustle caches the verdict (cache_ttl 5m), so it is asked once per start",
			"only the plain HTTP port (-proxies rustle,rustle-ldap,rustle-jwt -tests http-1k compares the cost per request of each kind of identity)",
		},
		prepare: prepareRustleLDAP,
		command: rustleCommand("ldap"),
	},
	{
		name: "rustle-jwt", label: "rustle (bearer token)",
		features: []string{featHTTP},
		tuning: []string{
			"rustle as in its own column, but the client presents a bearer token: an [[auth.providers]] jwt entry, the listener's providers = [\"tokens\"]",
			"wrk sends Proxy-Authorization: Bearer <ES256 token> (about 0.3 KB); the load tool and the checks send it as a Basic password; the key set is served by the campaign on loopback and fetched once; verdicts cached until min(exp, 5m), the token valid for 24 h",
			"only the plain HTTP port",
		},
		prepare: prepareRustleJWT,
		command: rustleCommand("jwt"),
	},
	{
		name: "rustle-limits", label: "rustle (local limits)",
		features: []string{featHTTP},
		tuning: []string{
			"rustle as in its own column, with a per-user connection limit (max_connections_per_user = 100000) and a quota rule for every user (bytes and requests per day, far above what a run moves), both counted in the process",
			"only the plain HTTP port (-proxies rustle,rustle-limits,rustle-redis -tests http-1k compares local and Redis-backed limits)",
		},
		prepare: prepareRustle,
		command: rustleCommand("limits"),
	},
	{
		name: "rustle-redis", label: "rustle (Redis limits)", pkg: "redis-server", binary: "redis-server",
		features: []string{featHTTP},
		tuning: []string{
			"rustle-limits' limits counted across instances through Redis: [cluster] redis = a Debian redis-server on loopback (no persistence), pinned to the load core, sync_interval at its default; counted locally and synced in the background, never on the request path",
			"only the plain HTTP port",
		},
		prepare: prepareRustleRedis,
		command: rustleCommand("redis"),
	},
	{
		name: "rustle-authz", label: "rustle (decision service)",
		features: []string{featHTTP},
		tuning: []string{
			"rustle as in its own column, with [authz]: every request asked of a decision service (OPA's data API shape) the campaign serves on loopback, which allows the campaign's user; cache_ttl 1h, so that each run's decisions come from the cache after the first",
			"only the plain HTTP port (-proxies rustle,rustle-authz -tests http-1k: the cpu-1k difference is the cost of the decision with a warm cache)",
		},
		prepare: prepareRustleAuthz,
		command: rustleCommand("authz"),
	},
	{
		name: "rustle-x25519", label: "rustle (X25519)",
		features: []string{featHTTPS},
		tuning: []string{
			"rustle as in its own column, its https listener with key_exchanges = [\"X25519\", \"X25519MLKEM768\"]: the classical X25519 first (what Squid 5.7 with GnuTLS uses), the post-quantum hybrid only for a client without X25519; the rustle column keeps Go's default, X25519MLKEM768 whenever the client offers it",
			"only the HTTPS port (-proxies rustle,rustle-x25519,squid -tests https-1k-newconn,https-1k-full measures what the hybrid costs a new connection)",
		},
		prepare: prepareRustle,
		command: rustleCommand("x25519"),
	},
	{
		name: "squid", label: "Squid", pkg: "squid", binary: "squid",
		features: []string{featHTTP, featHTTPS, featWebSocket, featIntercept},
		tuning: []string{
			"Debian package, run in the foreground (squid --foreground), master + 1 kid + auth helper",
			"workers 1",
			"cache deny all, cache_mem 0, no cache_dir",
			"tcp_recv_bufsize 1 MB, read_ahead_gap 1 MB",
			"forwarded_for delete, via off",
			"auth_param basic: basic_ncsa_auth with a bcrypt htpasswd file, credentialsttl 2 hours (helper results cached 2 h)",
			"http_upgrade_request_protocols WebSocket and websocket allow all (authentication stays enforced by http_access)",
			"CONNECT allowed to any port (no SSL_ports rule), access_log none, max_filedescriptors raised",
			"TLS tests: https_port with tls-cert= and tls-key= (the campaign's certificate); no tls-min-version (built with GnuTLS, Squid 5.7 turns it into a priority string GnuTLS refuses), so the TLS library's defaults; the library is named beside the version",
			"interception rows (Debian's squid-openssl only): http_port ... ssl-bump with the campaign's interception CA (tls-cert= its certificate and key), generate-host-certificates=on, dynamic_cert_mem_cache_size=16MB; sslcrtd_program security_file_certgen -s <its directory>/ssl_db -M 16MB (made with -c before each start), sslcrtd_children 5 startup=1 idle=1; ssl_bump peek step1, stare step2, bump all (the generated certificate mimics the origin's, SANs included); tls_outgoing_options cafile=<the campaign's CA> (the origin verified). Spliced rows: the plain http_port as in the other tests",
		},
		prepare: prepareSquid,
		command: func(e *env, dir, listener string, port, workers int) ([]string, []string, error) {
			conf := filepath.Join(dir, "squid.conf")
			d := e.confData(dir, listener, port, workers)
			if d.Intercept != nil {
				if err := e.initCertDB(context.Background(), d.Intercept); err != nil {
					return nil, nil, err
				}
			}
			if err := e.writeConfData("squid.conf", conf, d); err != nil {
				return nil, nil, err
			}
			return []string{e.lookPath["squid"], "--foreground", "-f", conf}, nil, nil
		},
	},
	{
		name: "tinyproxy", label: "Tinyproxy", pkg: "tinyproxy", binary: "tinyproxy",
		features: []string{featHTTP},
		tuning: []string{
			"Debian package, run in the foreground (tinyproxy -d), one thread per connection",
			"MaxClients 200000",
			"LogLevel Critical",
			"DisableViaHeader Yes, no filters",
			"BasicAuth (plain text password in the config: Tinyproxy has no hashed form)",
			"CONNECT allowed to any port (no ConnectPort line)",
		},
		prepare: preparePackaged("tinyproxy", "tinyproxy", "-v"),
		command: func(e *env, dir, listener string, port, workers int) ([]string, []string, error) {
			conf := filepath.Join(dir, "tinyproxy.conf")
			if err := e.writeConf("tinyproxy.conf", conf, dir, listener, port, workers); err != nil {
				return nil, nil, err
			}
			return []string{e.lookPath["tinyproxy"], "-d", "-c", conf}, nil, nil
		},
	},
	{
		name: "dante", label: "Dante", pkg: "dante-server", binary: "danted",
		features: []string{featSOCKS},
		tuning: []string{
			"Debian package dante-server, run in the foreground (danted -f danted.conf, no -D), one main server (-N 1, the default)",
			"Dante forks its own negotiate, request and I/O child processes (an I/O process serves up to 32 sessions in this build; their number is not configurable): all pinned to the proxy core, summed for CPU and memory",
			"SOCKS5 CONNECT only (socks pass rule for command connect), clientmethod none, no log: keyword in the rules (nothing logged per connection), logoutput to a file for errors",
			"timeouts at their defaults (timeout.io 0: idle tunnels are kept)",
		},
		prepare: prepareDante,
		command: func(e *env, dir, listener string, port, workers int) ([]string, []string, error) {
			conf := filepath.Join(dir, "danted.conf")
			if err := e.writeConf("danted.conf", conf, dir, listener, port, workers); err != nil {
				return nil, nil, err
			}
			// TMPDIR: Dante's lock and shared-memory files.
			return []string{e.lookPath["danted"], "-f", conf, "-p", filepath.Join(dir, "danted.pid")}, []string{"TMPDIR=" + dir}, nil
		},
	},
	mitmProxy, // intercept.go
	gostProxy, // gost.go
	{
		name: "none", label: "no proxy",
		features: allFeatures,
		tuning:   nil,
		prepare:  func(context.Context, *env) (string, error) { return "", nil },
	},
}

// proxyByName returns the definition of name, or nil.
func proxyByName(name string) *proxyDef {
	for _, p := range proxies {
		if p.name == name {
			return p
		}
	}
	return nil
}

// preparePackaged returns a prepare function for a packaged proxy: it finds
// binary in PATH (or /usr/sbin) and returns its version line with the
// Debian version of pkg.
func preparePackaged(binary, pkg, versionFlag string) func(context.Context, *env) (string, error) {
	return func(ctx context.Context, e *env) (string, error) {
		path, ok := e.lookPath[binary]
		if !ok {
			return "", fmt.Errorf("%s is not installed", binary)
		}
		out, err := exec.CommandContext(ctx, path, versionFlag).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s %s: %w", path, versionFlag, err)
		}
		line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
		line, _, _ = strings.Cut(line, "  Copyright") // Dante's banner
		if pv, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f", "${Version}", pkg).Output(); err == nil {
			line += " (Debian " + string(pv) + ")"
		}
		return line, nil
	}
}

// prepareRustle builds rustle from the tree, unless -rustle names a binary.
func prepareRustle(ctx context.Context, e *env) (string, error) {
	given := e.rustleBin != ""
	if !given {
		bin := filepath.Join(e.bin, "rustle")
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/rustle")
		cmd.Dir = e.root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build -trimpath ./cmd/rustle failed: %s", firstLines(string(out), 3))
		}
		e.rustleBin = bin
	}
	e.prepareDNSRows()
	if given {
		// A -rustle binary built with its VCS stamp (go build
		// -buildvcs=true) names its own commit, which may not be the
		// tree's.
		if out, err := exec.CommandContext(ctx, e.rustleBin, "version").Output(); err == nil {
			if v := binaryVersion(string(out)); v != "" {
				return "at " + v, nil
			}
		}
	}
	version := "from the tree"
	if out, err := exec.CommandContext(ctx, "git", "-C", e.root, "describe", "--always", "--dirty").Output(); err == nil {
		version = "at " + strings.TrimSpace(string(out))
	}
	return version, nil
}

// binaryVersion is the version in the output of "rustle version" when it
// names a release or a commit, "" for a build without a VCS stamp ("dev").
func binaryVersion(out string) string {
	v, ok := strings.CutPrefix(strings.TrimSpace(out), "rustle ")
	if !ok || v == "" || v == "dev" || strings.ContainsAny(v, " \n") {
		return ""
	}
	return v
}

// prepareSquid finds Squid and checks that it was built with a TLS
// library (--with-openssl or --with-gnutls in squid -v): without one, its
// TLS rows read "—" with the reason in the report.
func prepareSquid(ctx context.Context, e *env) (string, error) {
	v, err := preparePackaged("squid", "squid", "-v")(ctx, e)
	if err != nil {
		return v, err
	}
	out, err := exec.CommandContext(ctx, e.lookPath["squid"], "-v").CombinedOutput()
	if err != nil {
		return v, fmt.Errorf("squid -v: %w", err)
	}
	_, certGenErr := os.Stat(squidCertGen(e.lookPath["squid"]))
	if why := squidBump(string(out), certGenErr == nil); why != "" {
		e.lack("squid", featIntercept, why)
	}
	if lib := squidTLS(string(out)); lib != "" {
		v += ", TLS with " + lib
	} else {
		e.lack("squid", featHTTPS, "this Squid is built without a TLS library (squid -v shows neither --with-openssl nor --with-gnutls), so it has no https_port; Debian's squid-openssl package would have one")
	}
	return v, nil
}

// squidTLS returns the TLS library squid -v names ("OpenSSL", "GnuTLS"),
// or "" when Squid was built without one.
func squidTLS(version string) string {
	switch {
	case strings.Contains(version, "--with-openssl"):
		return "OpenSSL"
	case strings.Contains(version, "--with-gnutls"):
		return "GnuTLS"
	}
	return ""
}

// prepareDante finds danted and sets up its authentication: as root, a
// system user (danteUser) with the campaign's password, created for the
// campaign and removed at its end, so that socksmethod username works
// (Dante checks passwords against the system's password database); not
// root, or if that fails, socksmethod none, said in the report.
func prepareDante(ctx context.Context, e *env) (string, error) {
	v, err := preparePackaged("danted", "dante-server", "-v")(ctx, e)
	if err != nil {
		return v, err
	}
	if err := e.makeSystemUser(ctx); err != nil {
		e.socksMethod = "none"
		e.extraTuning["dante"] = append(e.extraTuning["dante"], "socksmethod none: authentication OFF, unlike every other proxy ("+err.Error()+")")
		return v, nil
	}
	e.socksMethod = "username"
	e.extraTuning["dante"] = append(e.extraTuning["dante"], "socksmethod username (RFC 1929) against the system password database: a system user "+danteUser+" with the campaign's random password, created for the campaign and removed after it; user.privileged root (to read /etc/shadow), user.unprivileged "+e.dropUser)
	return v, nil
}

// rustleCommand returns the command of a rustle column whose user comes
// from provider ("" = the htpasswd user; "ldap", "jwt").
func rustleCommand(provider string) func(e *env, dir, listener string, port, workers int) ([]string, []string, error) {
	return func(e *env, dir, listener string, port, workers int) ([]string, []string, error) {
		conf := filepath.Join(dir, "rustle.toml")
		d := e.confData(dir, listener, port, workers)
		d.Provider = provider
		if err := e.writeConfData("rustle.toml", conf, d); err != nil {
			return nil, nil, err
		}
		return []string{e.rustleBin, "-c", conf}, nil, nil
	}
}

// writeConf fills the template bench/<name> into path for a proxy serving
// listener on port with workers workers.
func (e *env) writeConf(name, path, dir, listener string, port, workers int) error {
	return e.writeConfData(name, path, e.confData(dir, listener, port, workers))
}

// confData returns what the templates get for a proxy serving listener
// on port with workers workers and its files in dir.
func (e *env) confData(dir, listener string, port, workers int) confData {
	d := confData{
		Port: port, Workers: max(1, workers), Listener: listener, TLS: listener == lnHTTPS, Cert: e.certFile, Key: e.keyFile,
		Dir: dir, MaxFD: e.maxFD, Passwd: e.passwdFile,
		AuthUser: e.user, AuthPass: e.pass, Bcrypt: e.bcryptHash, SOCKSMethod: e.socksMethod,
		LDAPURL: e.ldapURL, JWKSURL: e.jwksURL, Issuer: benchIssuer, RedisURL: e.redisURL, AuthzURL: e.authzURL,
		Resolver:  e.resolver,
		ParentURL: e.parentURL, Via: e.parentVia,
		Intercept: e.interceptConfFor(e.test, dir), SNI: e.test.sni, BenchHost: e.benchHost(),
	}
	if e.asRoot {
		d.User, d.Group = e.dropUser, e.dropGroup
	}
	return d
}

// writeConfData fills the template bench/<name> into path with d.
func (e *env) writeConfData(name, path string, d confData) error {
	tpl, err := template.ParseFiles(filepath.Join(e.benchDir, name))
	if err != nil {
		return fmt.Errorf("campaign: parse template %s: %w", name, err)
	}
	var b bytes.Buffer
	if err := tpl.Execute(&b, d); err != nil {
		return fmt.Errorf("campaign: fill template %s: %w", name, err)
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// running is a started proxy.
type running struct {
	def *proxyDef
	p   *proc // nil for "none"
	// addr is the proxy's host:port; "" for "none".
	addr string
	dir  string
	// listener is the port's protocol (lnHTTP, lnHTTPS, lnSOCKS).
	listener string
	// auth is the user:pass the load tool sends; "" when the proxy takes
	// no credentials (Dante with socksmethod none).
	auth string
	// split is where the proxy and the load side run.
	split coreSplit
	// header is the Proxy-Authorization value wrk and the keep-alive
	// probe send; "" means Basic with the campaign's user (e.authHeader).
	header string
	// closesSilently is true when the proxy closes a client connection
	// after each response without announcing it with "Connection: close"
	// (Tinyproxy). wrk then counts one read error per request and
	// reconnects; wrkRun tolerates those.
	closesSilently bool
}

// authHeader returns the Proxy-Authorization value wrk sends to r.
func (r *running) authHeader(e *env) string {
	if r.header != "" {
		return r.header
	}
	return e.authHeader
}

// startProxy starts a fresh instance of def serving listener on a free
// port, pinned to the proxy CPUs of split with a worker per CPU, and
// checks it: a request with credentials must get the 1 KB body, one
// without must be refused. A failed start is tried once more, on another
// port, before it counts.
func (e *env) startProxy(ctx context.Context, def *proxyDef, listener string, split coreSplit) (*running, error) {
	r, err := e.startProxyOnce(ctx, def, listener, split)
	if err == nil || ctx.Err() != nil {
		return r, err
	}
	fmt.Fprintf(e.out, "%s did not start, trying once more: %s\n", def.name, firstLines(err.Error(), 2))
	sleep(ctx, time.Second)
	return e.startProxyOnce(ctx, def, listener, split)
}

// startProxyOnce makes one attempt of startProxy.
func (e *env) startProxyOnce(ctx context.Context, def *proxyDef, listener string, split coreSplit) (*running, error) {
	if def.name == "none" {
		return &running{def: def, listener: listener, split: split}, e.preflight(ctx, &running{listener: lnHTTP})
	}
	e.starts++
	dir := filepath.Join(e.tmp, fmt.Sprintf("%s-%d", def.name, e.starts))
	if err := os.Mkdir(dir, 0o777); err != nil {
		return nil, fmt.Errorf("campaign: %w", err)
	}
	// The proxy may switch to an unprivileged user: let it write its logs.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, fmt.Errorf("campaign: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	argv, environ, err := def.command(e, dir, listener, port, split.n())
	if err != nil {
		return nil, err
	}
	p, err := startProc(def.name, split.proxy, argv, environ, filepath.Join(dir, "output.log"), nil)
	if err != nil {
		return nil, err
	}
	r := &running{def: def, p: p, addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir, listener: listener, auth: e.user + ":" + e.pass, split: split}
	if def.name == "rustle-jwt" {
		r.auth, r.header = e.user+":"+e.token, "Bearer "+e.token
	}
	if def.name == "dante" {
		r.auth = ""
		if e.socksMethod == "username" {
			r.auth = danteUser + ":" + e.pass
		}
	}
	fail := func(err error) (*running, error) {
		p.stop(3 * time.Second)
		return nil, fmt.Errorf("%s (%s port): %w\n%s", def.name, listener, err, logTail(dir))
	}
	if err := waitListening(ctx, r.addr, p, 30*time.Second); err != nil {
		return fail(err)
	}
	if err := e.preflight(ctx, r); err != nil {
		return fail(err)
	}
	if listener == lnSOCKS {
		return r, nil
	}
	if r.closesSilently, err = e.probeKeepAlive(r); err != nil {
		return fail(err)
	}
	if r.closesSilently {
		e.silentClosers[def.label] = true
	}
	return r, nil
}

// stop ends the proxy and all its processes.
func (r *running) stop() {
	if r.p != nil {
		r.p.stop(5 * time.Second)
	}
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("campaign: find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitListening polls addr until it accepts a connection, p exits, or
// timeout passes.
func waitListening(ctx context.Context, addr string, p *proc, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p.exited() {
			return fmt.Errorf("exited before listening: %v", p.err)
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%w on %s after %s", errNotReady, addr, timeout)
}

// preflight checks a proxy (or, for "none", the origin) with one request
// for /1k with credentials and, through a proxy that takes credentials,
// one without, which must be refused: 407 on an HTTP port, a refused
// method negotiation on a SOCKS5 port.
func (e *env) preflight(ctx context.Context, r *running) error {
	get := func(withAuth bool) (int, int, error) {
		tr := &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: e.caPool}}
		switch {
		case r.addr == "":
		case r.listener == lnSOCKS:
			var auth *proxy.Auth
			if withAuth && r.auth != "" {
				user, pass, _ := strings.Cut(r.auth, ":")
				auth = &proxy.Auth{User: user, Password: pass}
			}
			d, err := proxy.SOCKS5("tcp", r.addr, auth, &net.Dialer{Timeout: 10 * time.Second})
			if err != nil {
				return 0, 0, err
			}
			tr.DialContext = d.(proxy.ContextDialer).DialContext
		default:
			u := &url.URL{Scheme: "http", Host: r.addr}
			if r.listener == lnHTTPS {
				u.Scheme = "https"
			}
			if withAuth {
				user, pass, _ := strings.Cut(r.auth, ":")
				u.User = url.UserPassword(user, pass)
			}
			tr.Proxy = http.ProxyURL(u)
		}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr, Timeout: 15 * time.Second}
		req, err := http.NewRequestWithContext(ctx, "GET", "http://"+e.origin.HTTP+"/1k", nil)
		if err != nil {
			return 0, 0, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, len(b), err
	}
	code, n, err := get(true)
	if err != nil {
		return fmt.Errorf("preflight request: %w", err)
	}
	if code != 200 || n != 1024 {
		return fmt.Errorf("preflight request: status %d with %d bytes, want 200 with 1024", code, n)
	}
	if r.addr == "" || r.auth == "" {
		return nil
	}
	code, _, err = get(false)
	if r.listener == lnSOCKS {
		if err == nil {
			return fmt.Errorf("preflight request without credentials: status %d, want the SOCKS5 proxy to refuse it (is authentication on?)", code)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("preflight request without credentials: %w", err)
	}
	if code != http.StatusProxyAuthRequired {
		return fmt.Errorf("preflight request without credentials: status %d, want 407 (is authentication on?)", code)
	}
	return nil
}

// dialProxy opens a connection to r's port: TCP, with a TLS handshake on
// an https port.
func (e *env) dialProxy(r *running) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", r.addr, 5*time.Second)
	if err != nil || r.listener != lnHTTPS {
		return c, err
	}
	tc := tls.Client(c, &tls.Config{RootCAs: e.caPool, ServerName: "127.0.0.1"})
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	return tc, nil
}

// probeKeepAlive sends two requests on one connection to the proxy r and
// reports whether it closed the connection after the first response
// without saying so.
func (e *env) probeKeepAlive(r *running) (bool, error) {
	c, err := e.dialProxy(r)
	if err != nil {
		return false, fmt.Errorf("keep-alive probe: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET http://" + e.origin.HTTP + "/1k HTTP/1.1\r\nHost: " + e.origin.HTTP + "\r\nProxy-Authorization: " + r.authHeader(e) + "\r\n\r\n"
	br := bufio.NewReader(c)
	for i := range 2 {
		if _, err := io.WriteString(c, req); err != nil {
			if i == 1 {
				return true, nil
			}
			return false, fmt.Errorf("keep-alive probe: %w", err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if i == 1 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)) {
				return true, nil
			}
			return false, fmt.Errorf("keep-alive probe, request %d: %w", i+1, err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return false, fmt.Errorf("keep-alive probe, request %d: %w", i+1, err)
		}
		if resp.StatusCode != 200 {
			return false, fmt.Errorf("keep-alive probe, request %d: status %d", i+1, resp.StatusCode)
		}
		if resp.Close {
			// Announced: wrk handles it without errors.
			return false, nil
		}
	}
	return false, nil
}

// logTail returns the last lines of the logs in dir, for error messages.
func logTail(dir string) string {
	var b strings.Builder
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil || len(data) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", filepath.Base(f), strings.Join(lines, "\n"))
	}
	return b.String()
}

// firstLines returns at most n lines of s, joined with " / ".
func firstLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, " / ")
}
