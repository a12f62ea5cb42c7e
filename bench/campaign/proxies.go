package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// proxyDef is one proxy the campaign can run.
type proxyDef struct {
	name, label string
	// pkg is the Debian package that provides the proxy, installed with
	// apt-get when binary is missing; "" for rustle and "none".
	pkg, binary string
	// tuning is shown in the report under "Versions and tuning".
	tuning []string
	// prepare makes the proxy runnable (builds it, finds it) and returns
	// its version; an error means the proxy is skipped, with the error as
	// the reason.
	prepare func(ctx context.Context, e *env) (string, error)
	// command writes the proxy's configuration into dir and returns the
	// command line that runs it in the foreground on port.
	command func(e *env, dir string, port int) ([]string, error)
}

// confData fills the templates bench/squid.conf, bench/tinyproxy.conf and
// bench/rustle.toml.
type confData struct {
	Port     int
	Dir      string
	MaxFD    int
	Passwd   string // htpasswd file (user:bcrypt)
	AuthUser string
	AuthPass string
	Bcrypt   string
	User     string // unprivileged user to switch to when run as root
	Group    string
}

// proxies lists every proxy the campaign knows, in column order.
var proxies = []*proxyDef{
	{
		name: "rustle", label: "rustle",
		tuning: []string{
			"go build -trimpath ./cmd/rustle from the tree",
			"workers = 1",
			"socket_buffer_bytes = 1048576 (set in the bench config, as in the seed; the shipped default is 0, kernel autotuning)",
			"[log] level = \"error\"",
			"auth = \"basic\", one user with a bcrypt hash; verdicts cached (auth.cache_ttl default 5m), so bcrypt runs once",
		},
		prepare: prepareRustle,
		command: func(e *env, dir string, port int) ([]string, error) {
			conf := filepath.Join(dir, "rustle.toml")
			if err := e.writeConf("rustle.toml", conf, dir, port); err != nil {
				return nil, err
			}
			return []string{e.rustleBin, "-c", conf}, nil
		},
	},
	{
		name: "squid", label: "Squid", pkg: "squid", binary: "squid",
		tuning: []string{
			"Debian package, run in the foreground (squid --foreground), master + 1 kid + auth helper",
			"workers 1",
			"cache deny all, cache_mem 0, no cache_dir",
			"tcp_recv_bufsize 1 MB, read_ahead_gap 1 MB",
			"forwarded_for delete, via off",
			"auth_param basic: basic_ncsa_auth with a bcrypt htpasswd file, credentialsttl 2 hours (helper results cached 2 h)",
			"http_upgrade_request_protocols WebSocket and websocket allow all (authentication stays enforced by http_access)",
			"CONNECT allowed to any port (no SSL_ports rule), access_log none, max_filedescriptors raised",
		},
		prepare: preparePackaged("squid", "-v"),
		command: func(e *env, dir string, port int) ([]string, error) {
			conf := filepath.Join(dir, "squid.conf")
			if err := e.writeConf("squid.conf", conf, dir, port); err != nil {
				return nil, err
			}
			return []string{e.lookPath["squid"], "--foreground", "-f", conf}, nil
		},
	},
	{
		name: "tinyproxy", label: "Tinyproxy", pkg: "tinyproxy", binary: "tinyproxy",
		tuning: []string{
			"Debian package, run in the foreground (tinyproxy -d), one thread per connection",
			"MaxClients 200000",
			"LogLevel Critical",
			"DisableViaHeader Yes, no filters",
			"BasicAuth (plain text password in the config: Tinyproxy has no hashed form)",
			"CONNECT allowed to any port (no ConnectPort line)",
		},
		prepare: preparePackaged("tinyproxy", "-v"),
		command: func(e *env, dir string, port int) ([]string, error) {
			conf := filepath.Join(dir, "tinyproxy.conf")
			if err := e.writeConf("tinyproxy.conf", conf, dir, port); err != nil {
				return nil, err
			}
			return []string{e.lookPath["tinyproxy"], "-d", "-c", conf}, nil
		},
	},
	{
		name: "none", label: "no proxy",
		tuning:  nil,
		prepare: func(context.Context, *env) (string, error) { return "", nil },
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
// binary in PATH (or /usr/sbin) and returns its version line.
func preparePackaged(binary, versionFlag string) func(context.Context, *env) (string, error) {
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
		if pv, err := exec.CommandContext(ctx, "dpkg-query", "-W", "-f", "${Version}", binary).Output(); err == nil {
			line += " (Debian " + string(pv) + ")"
		}
		return line, nil
	}
}

// prepareRustle builds rustle from the tree, unless -rustle names a binary.
func prepareRustle(ctx context.Context, e *env) (string, error) {
	if e.rustleBin == "" {
		bin := filepath.Join(e.bin, "rustle")
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./cmd/rustle")
		cmd.Dir = e.root
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build -trimpath ./cmd/rustle failed: %s", firstLines(string(out), 3))
		}
		e.rustleBin = bin
	}
	version := "from the tree"
	if out, err := exec.CommandContext(ctx, "git", "-C", e.root, "describe", "--always", "--dirty").Output(); err == nil {
		version = "at " + strings.TrimSpace(string(out))
	}
	return version, nil
}

// writeConf fills the template bench/<name> into path.
func (e *env) writeConf(name, path, dir string, port int) error {
	tpl, err := template.ParseFiles(filepath.Join(e.benchDir, name))
	if err != nil {
		return fmt.Errorf("campaign: parse template %s: %w", name, err)
	}
	d := confData{
		Port: port, Dir: dir, MaxFD: e.maxFD, Passwd: e.passwdFile,
		AuthUser: e.user, AuthPass: e.pass, Bcrypt: e.bcryptHash,
	}
	if e.asRoot {
		d.User, d.Group = e.dropUser, e.dropGroup
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
	// closesSilently is true when the proxy closes a client connection
	// after each response without announcing it with "Connection: close"
	// (Tinyproxy). wrk then counts one read error per request and
	// reconnects; wrkRun tolerates those.
	closesSilently bool
}

// startProxy starts a fresh instance of def on a free port, pinned to the
// proxy core, and checks it: a request with credentials must get the 1 KB
// body, one without must get 407. A failed start is tried once more, on
// another port, before it counts.
func (e *env) startProxy(ctx context.Context, def *proxyDef) (*running, error) {
	r, err := e.startProxyOnce(ctx, def)
	if err == nil || ctx.Err() != nil {
		return r, err
	}
	fmt.Fprintf(e.out, "%s did not start, trying once more: %s\n", def.name, firstLines(err.Error(), 2))
	sleep(ctx, time.Second)
	return e.startProxyOnce(ctx, def)
}

// startProxyOnce makes one attempt of startProxy.
func (e *env) startProxyOnce(ctx context.Context, def *proxyDef) (*running, error) {
	if def.name == "none" {
		return &running{def: def}, e.preflight(ctx, "")
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
	argv, err := def.command(e, dir, port)
	if err != nil {
		return nil, err
	}
	p, err := startProc(def.name, e.proxyCore, argv, nil, filepath.Join(dir, "output.log"), nil)
	if err != nil {
		return nil, err
	}
	r := &running{def: def, p: p, addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir}
	if err := waitListening(ctx, r.addr, p, 30*time.Second); err != nil {
		p.stop(3 * time.Second)
		return nil, fmt.Errorf("%s: %w\n%s", def.name, err, logTail(dir))
	}
	if err := e.preflight(ctx, r.addr); err != nil {
		p.stop(3 * time.Second)
		return nil, fmt.Errorf("%s: %w\n%s", def.name, err, logTail(dir))
	}
	if r.closesSilently, err = e.probeKeepAlive(r.addr); err != nil {
		p.stop(3 * time.Second)
		return nil, fmt.Errorf("%s: %w\n%s", def.name, err, logTail(dir))
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

// preflight checks a proxy (or, with addr "", the origin) with one request
// for /1k with credentials and, through a proxy, one without.
func (e *env) preflight(ctx context.Context, addr string) error {
	get := func(withAuth bool) (int, int, error) {
		tr := &http.Transport{DisableKeepAlives: true}
		if addr != "" {
			u := &url.URL{Scheme: "http", Host: addr}
			if withAuth {
				u.User = url.UserPassword(e.user, e.pass)
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
	if addr == "" {
		return nil
	}
	code, _, err = get(false)
	if err != nil {
		return fmt.Errorf("preflight request without credentials: %w", err)
	}
	if code != http.StatusProxyAuthRequired {
		return fmt.Errorf("preflight request without credentials: status %d, want 407 (is authentication on?)", code)
	}
	return nil
}

// probeKeepAlive sends two requests on one connection to the proxy at
// addr and reports whether it closed the connection after the first
// response without saying so.
func (e *env) probeKeepAlive(addr string) (bool, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return false, fmt.Errorf("keep-alive probe: %w", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET http://" + e.origin.HTTP + "/1k HTTP/1.1\r\nHost: " + e.origin.HTTP + "\r\nProxy-Authorization: " + e.authHeader + "\r\n\r\n"
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
