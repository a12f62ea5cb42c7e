// Command rustle is a fast, lean forward proxy.
//
// Usage:
//
//	rustle [-c FILE] [-L URL]... [-F URL] [--admin ADDR] [--allow-private CIDR]...
//	                               run (the embedded default config without -c)
//	rustle check -c FILE           validate a config file
//	rustle passwd USER             print an htpasswd line (bcrypt) for USER
//	rustle cert [-hosts H,...] DIR write a self-signed CA and server pair
//	rustle ca [-name CN] DIR       write a CA for TLS interception
//	rustle quota [-c FILE] USER    show a user's quotas (from the admin listener)
//	rustle version                 print the version
//
// rustle only parses flags, loads the configuration and runs until
// SIGTERM or SIGINT (SIGHUP reloads the configuration, users and TLS
// certificates, SIGUSR1 reopens the access log file); everything else
// lives in internal/.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/gctune"
	"github.com/rustle-proxy/rustle/internal/intercept"
	"github.com/rustle-proxy/rustle/internal/server"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
	"github.com/rustle-proxy/rustle/internal/wire"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

// Exit statuses of a run that started serving.
const (
	// exitDrained: every request and tunnel ended within timeouts.drain.
	exitDrained = 0
	// exitDrainCut: the drain timeout passed with connections or tunnels
	// still open, and rustle closed them.
	exitDrainCut = 3
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// listenFlags collects repeated -L flags.
type listenFlags []string

func (l *listenFlags) String() string     { return strings.Join(*l, ",") }
func (l *listenFlags) Set(v string) error { *l = append(*l, v); return nil }

// allowPrivateFlags collects repeated --allow-private flags, each checked
// as an IP address or CIDR prefix when given.
type allowPrivateFlags []string

func (a *allowPrivateFlags) String() string { return strings.Join(*a, ",") }
func (a *allowPrivateFlags) Set(v string) error {
	if _, err := acl.ParsePrefix(v); err != nil {
		return err
	}
	*a = append(*a, v)
	return nil
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "version", "-version", "--version":
			fmt.Fprintln(stdout, "rustle", versionString())
			return 0
		case "passwd":
			return passwd(args[1:], stdin, stdout, stderr)
		case "check":
			return check(args[1:], stdout, stderr)
		case "cert":
			return cert(args[1:], stdout, stderr)
		case "ca":
			return caCmd(args[1:], stdout, stderr)
		case "quota":
			return quotaCmd(args[1:], stdout, stderr)
		case "help", "-h", "--help":
			usage(stdout)
			return 0
		}
	}
	fs := flag.NewFlagSet("rustle", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(stderr) }
	file := fs.String("c", "", "configuration `file` (TOML); default: the embedded config")
	var listens listenFlags
	fs.Var(&listens, "L", "listener `URL`: http://, socks5:// or mixed://[user:pass@]host:port, the user being that listener's alone (repeatable)")
	forward := fs.String("F", "", "parent proxy `URL` every request no route of the file matches goes through: http://, https://, socks5:// or socks5h://[user:pass@]host:port")
	var adminAddr optionalString
	fs.Var(&adminAddr, "admin", "admin listener `host:port` for /metrics, /healthz and /readyz (overrides the file's admin)")
	var allowPrivate allowPrivateFlags
	fs.Var(&allowPrivate, "allow-private", "let the private-destination guard through to `CIDR` (repeatable), e.g. 127.0.0.0/8 for a local origin")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rustle: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	// load reads the configuration as at start: the file (again, on
	// SIGHUP) and the flags given at start.
	load := func() (*config.Config, error) {
		cfg, err := loadConfig(*file, listens, *forward, &adminAddr)
		if err != nil {
			return nil, err
		}
		cfg.AllowPrivate = append(cfg.AllowPrivate, allowPrivate...) // checked by allowPrivateFlags.Set
		return cfg, nil
	}
	cfg, err := load()
	if err != nil {
		fmt.Fprintln(stderr, "rustle:", err)
		return 1
	}
	level := new(slog.LevelVar)
	logger := newLogger(cfg.Log, level, stderr)
	// What dependencies print through the standard log package (quic-go's
	// UDP buffer warning) comes out in rustle's log format.
	prev := slog.Default()
	slog.SetDefault(logger)
	defer slog.SetDefault(prev)
	o, err := startOps(cfg, logger, stdout)
	if err != nil {
		logger.Error("cannot start", "err", err)
		return 1
	}
	if os.Getenv("GOGC") == "" {
		o.gc = gctune.New(cfg.GCPercent, gcFloor(cfg))
	}
	o.level = level
	srv, err := server.New(cfg, logger, server.WithMetrics(o.metrics), server.WithAccessLog(o.access),
		server.WithOwnAddrs(o.addrs()...))
	if err != nil {
		o.close(context.Background())
		logger.Error("cannot start", "err", err)
		return 1
	}
	o.attach(srv)
	if err := srv.Start(); err != nil {
		srv.Close()
		o.close(context.Background())
		logger.Error("cannot start", "err", err)
		return 1
	}
	logger.Info("rustle started", "version", versionString(), "workers", cfg.WorkerCount(), "instance", srv.Instance())
	if addrs := srv.Addrs(); len(addrs) > 0 && *file == "" && len(listens) == 0 {
		fmt.Fprintf(stderr, "rustle is listening on %s. Try:\n  curl -x http://%s http://example.com/\n",
			addrs[0].Addr, addrs[0].Addr)
		if len(cfg.AllowPrivate) == 0 {
			fmt.Fprintln(stderr, "Private and local destinations are refused; for a local origin, start rustle with --allow-private 127.0.0.0/8")
		}
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, sigReopen)
	o.started(srv.Addrs())
	var sig os.Signal
loop:
	for {
		select {
		case sig = <-sigs:
			switch sig {
			case sigReopen:
				o.reopen()
			case syscall.SIGHUP:
				cfg, _ = o.reload(srv, cfg, load, "SIGHUP")
			default:
				break loop
			}
		case req := <-o.reloads: // the admin page's reload button
			var err error
			cfg, err = o.reload(srv, cfg, load, req.by)
			req.result <- err
		}
	}
	signal.Stop(sigs)
	o.stopping()
	logger.Info("shutting down", "signal", sig.String(), "drain", cfg.Timeouts.Drain.Duration)
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeouts.Drain.Duration)
	defer cancel()
	code := exitDrained
	if err := srv.Shutdown(ctx); err != nil {
		logger.Warn("drain timeout: closed remaining connections and tunnels", "err", err)
		code = exitDrainCut
	}
	o.close(ctx)
	logger.Info("stopped", "exit_status", code)
	return code
}

// loadConfig reads file (or the embedded default), adds the -L
// listeners and the -F parent (forward, "" = none), applies --admin (when
// adminAddr is not nil), fills defaults and validates.
func loadConfig(file string, listens []string, forward string, adminAddr *optionalString) (*config.Config, error) {
	var cfg *config.Config
	if file != "" {
		c, err := config.Load(file)
		if err != nil {
			return nil, err
		}
		cfg = c
	} else {
		cfg = config.Default()
		if len(listens) > 0 {
			cfg.Listen = nil // -L replaces the default listener
		}
	}
	for _, u := range listens {
		l, err := config.ParseListenURL(u) // its user, if any, is its own
		if err != nil {
			return nil, fmt.Errorf("-L: %w", err)
		}
		cfg.Listen = append(cfg.Listen, l)
	}
	if forward != "" {
		if err := cfg.AddForward(forward); err != nil {
			return nil, err
		}
	}
	if adminAddr != nil {
		adminAddr.apply(&cfg.Admin)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// newLogger returns the logger c asks for, writing to w, its level set in
// level (which a reload may change).
func newLogger(c config.Log, level *slog.LevelVar, w io.Writer) *slog.Logger {
	setLevel(level, c.Level)
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

func check(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rustle check", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("c", "", "configuration `file` to validate")
	var listens listenFlags
	fs.Var(&listens, "L", "listener `URL` to add (repeatable)")
	forward := fs.String("F", "", "parent proxy `URL` to add, as for rustle -F")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *file == "" && len(listens) == 0 {
		fmt.Fprintln(stderr, "rustle check: -c FILE is required")
		return 2
	}
	cfg, err := loadConfig(*file, listens, *forward, nil)
	if err != nil {
		fmt.Fprintln(stderr, "rustle check:", err)
		return 1
	}
	// Users files, rules, certificates and the admin listener's access
	// files are read when rustle starts (wire.Build, wire.Admin); load
	// them here too so that a bad htpasswd line or key pair is caught by
	// check.
	if err := wire.Check(cfg); err != nil {
		fmt.Fprintln(stderr, "rustle check:", err)
		return 1
	}
	name := *file
	if name == "" {
		name = "flags"
	}
	fmt.Fprintf(stdout, "%s: OK (%d listener(s), %d worker(s))\n", name, len(cfg.Listen), cfg.WorkerCount())
	for _, l := range cfg.AuditLines() {
		fmt.Fprintln(stdout, "audit mode:", l)
	}
	return 0
}

func cert(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rustle cert", flag.ContinueOnError)
	fs.SetOutput(stderr)
	hosts := fs.String("hosts", strings.Join(tlsconf.DefaultHosts, ","), "comma-separated IP addresses and names the server certificate is for")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: rustle cert [-hosts 127.0.0.1,::1,localhost] DIR")
		return 2
	}
	ca, crt, key, err := tlsconf.WriteSelfSigned(fs.Arg(0), strings.Split(*hosts, ","))
	if err != nil {
		fmt.Fprintln(stderr, "rustle cert:", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s, %s and %s\ntry: rustle -L 'https://user:pass@127.0.0.1:8443?cert=%s&key=%s'\n"+
		"     curl --proxy https://user:pass@127.0.0.1:8443 --proxy-cacert %s http://...\n", ca, crt, key, crt, key, ca)
	return 0
}

// caCmd writes a CA for TLS interception (see intercept.WriteCA).
func caCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rustle ca", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "rustle interception CA", "the CA certificate's common name")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: rustle ca [-name CN] DIR")
		return 2
	}
	crt, key, err := intercept.WriteCA(fs.Arg(0), *name)
	if err != nil {
		fmt.Fprintln(stderr, "rustle ca:", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s (give it to the clients to trust) and %s (keep it secret: mode 0600)\n"+
		"use: [intercept]\n     ca_cert = %q\n     ca_key = %q\n", crt, key, crt, key)
	return 0
}

func passwd(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] == "" || strings.ContainsAny(args[0], ":\r\n") {
		fmt.Fprintln(stderr, "usage: rustle passwd USER   (reads the password from standard input)")
		return 2
	}
	if f, ok := stdin.(*os.File); ok && isTerminal(f) {
		fmt.Fprint(stderr, "Password (echoed): ")
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		fmt.Fprintln(stderr, "rustle passwd:", err)
		return 1
	}
	pw := strings.TrimRight(line, "\r\n")
	if pw == "" {
		fmt.Fprintln(stderr, "rustle passwd: empty password")
		return 1
	}
	h, err := auth.HashPassword(pw)
	if err != nil {
		fmt.Fprintln(stderr, "rustle passwd:", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s:%s\n", args[0], h)
	return 0
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// versionString returns the version rustle prints: the one -ldflags set,
// else the module's from the build info (v1.2.3 for `go install
// ...@v1.2.3`; a pseudo-version with the commit for a build in a git
// checkout), else "dev" with the VCS revision when the build info has
// one, else "dev".
func versionString() string {
	if version != "" {
		return version
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	return buildVersion(bi)
}

// buildVersion is versionString's reading of bi.
func buildVersion(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision":
			rev = s.Value
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "-dirty"
		}
	}
	if rev == "" {
		return "dev"
	}
	return "dev-" + rev[:min(12, len(rev))] + dirty
}

func usage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  rustle [-c FILE] [-L URL]... [-F URL] [--admin ADDR] [--allow-private CIDR]...
                                 run the proxy (the embedded default config
                                 listens on 127.0.0.1:3128 without auth)
  rustle check -c FILE           validate a config file and exit
  rustle passwd USER             print "USER:bcrypt-hash" for an htpasswd file;
                                 the password is read from standard input
  rustle cert [-hosts H,...] DIR write a self-signed CA (ca.pem) and a server
                                 pair (server.pem, server.key) to try https
  rustle ca [-name CN] DIR       write a CA for TLS interception: ca.pem (the
                                 certificate clients are to trust) and
                                 ca-key.pem (mode 0600), for [intercept]
  rustle quota [-c FILE | --admin ADDR] [--token-file FILE] USER
                                 show USER's quotas of the running rustle
                                 (use, limit, what is left, reset time),
                                 asked of its admin listener (with the
                                 bearer token of admin_access.token_file)
  rustle version                 print the version

Flags:
  -c FILE   configuration file (TOML); see rustle.example.toml
  -L URL    add a listener: http://, https://, socks5:// or mixed://, with
            optional user:pass@, e.g. -L http://user:pass@127.0.0.1:8080 or
            -L 'https://u:p@127.0.0.1:8443?cert=server.pem&key=server.key';
            user:pass@ is that listener's only user, and no other's; without
            it the listener takes the -c file's users, if any
            (without -c, -L listeners replace the default one)
  -F URL    send every request no route of the -c file matches through a
            parent proxy: http://, https://, socks5:// (rustle resolves and
            checks the destination) or socks5h:// (the parent resolves), with
            optional user:pass@ for the parent, e.g.
            -L http://127.0.0.1:3128 -F http://user:pass@parent:3128;
            one -F only (parents are not chained)
  --admin ADDR
            serve /metrics, /healthz and /readyz on ADDR (host:port),
            e.g. --admin 127.0.0.1:9090; overrides the file's admin key
  --allow-private CIDR
            let requests reach a private or local range the guard refuses
            by default (loopback, RFC 1918, link-local, ...), in addition to
            the file's allow_private; repeatable. To try rustle against a
            local origin: --allow-private 127.0.0.0/8

Signals: SIGTERM/SIGINT drain and stop, SIGHUP reloads the configuration
(the -c file, users files and TLS certificates, with the flags given at
start; a config that does not load is refused and the running one stays),
SIGUSR1 reopens the access log file (for logrotate).

Exit status: 0 when every request and tunnel ended within the drain timeout
(timeouts.drain), 3 when the drain timeout cut some short, 1 when rustle
cannot start (bad config, listen failure), 2 for a usage error.
`)
}
