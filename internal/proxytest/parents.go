package proxytest

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// SquidUser and SquidPassword are the credentials StartSquid's Basic auth
// accepts; squidHtpasswd is their htpasswd line (apr1, as
// `openssl passwd -apr1 -salt abcdefgh parentpw` writes it).
const (
	SquidUser     = "rustle"
	SquidPassword = "parentpw"
	squidHtpasswd = "rustle:$apr1$abcdefgh$GHKf5NiMecg6eOFO8yFNX.\n"
)

// ExternalProxy is a parent proxy program a test started.
type ExternalProxy struct {
	// Addr is its loopback address ("127.0.0.1:port").
	Addr string

	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{}
}

// Stop kills the proxy and waits for it (Cleanup does it too).
func (p *ExternalProxy) Stop() {
	if p.cmd.Process != nil {
		p.cmd.Process.Kill()
	}
	<-p.done
}

// Output returns what the proxy wrote to stdout and stderr so far.
func (p *ExternalProxy) Output() string { return p.out.String() }

// StartSquid starts Debian's Squid (skipped without it, failing under CI)
// as an HTTP parent on loopback that requires Basic auth as SquidUser with
// SquidPassword (through basic_ncsa_auth and an htpasswd file it writes),
// caches nothing, allows CONNECT to any port and forwards WebSocket
// upgrades (http_upgrade_request_protocols, as bench/squid.conf). It is
// killed by t.Cleanup.
func StartSquid(t testing.TB) *ExternalProxy {
	t.Helper()
	return StartSquidWith(t, SquidConfig{})
}

// SquidConfig is what StartSquidWith changes of StartSquid's Squid.
type SquidConfig struct {
	// Addr is the loopback host:port it listens on; "" = a free port.
	// A Squid killed with Stop can be started again on its Addr.
	Addr string
	// ConnectPorts, when set, are the only ports CONNECT may reach (as
	// Squid's default configuration allows 443 only); nil = any.
	ConnectPorts []string
	// RequireHeader, when set, is "Name regex": Squid refuses (403),
	// before it asks for credentials, a request (CONNECT included) whose
	// field Name is missing or does not match regex (a req_header acl),
	// as a balancer in front of a parent may; "" = none.
	RequireHeader string
}

// StartSquidWith is StartSquid with cfg.
func StartSquidWith(t testing.TB, cfg SquidConfig) *ExternalProxy {
	t.Helper()
	bin := sbinTool(t, "squid", "squid")
	helper := "/usr/lib/squid/basic_ncsa_auth"
	if _, err := os.Stat(helper); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("proxytest: %s missing under CI (scripts/deps.sh installs squid)", helper)
		}
		t.Skipf("proxytest: %s missing (scripts/deps.sh installs squid)", helper)
	}
	dir := worldReadableDir(t)
	htpasswd := filepath.Join(dir, "htpasswd")
	writeFile(t, htpasswd, []byte(squidHtpasswd), 0o644)
	addr := cfg.Addr
	if addr == "" {
		addr = ClosedPort(t)
	}
	var connect []string
	if len(cfg.ConnectPorts) > 0 {
		connect = []string{"acl connect_ports port " + strings.Join(cfg.ConnectPorts, " "), "http_access deny CONNECT !connect_ports"}
	}
	if cfg.RequireHeader != "" {
		connect = append(connect, "acl required_header req_header "+cfg.RequireHeader, "http_access deny !required_header")
	}
	conf := filepath.Join(dir, "squid.conf")
	writeFile(t, conf, []byte(strings.Join(slices.Concat([]string{
		"http_port " + addr,
		"pid_filename none",
		"cache_log stdio:/dev/stderr",
		"access_log none",
		"cache_store_log none",
		"logfile_rotate 0",
		"pinger_enable off",
		"shutdown_lifetime 0 seconds",
		"coredump_dir " + dir,
		"cache deny all",
		"auth_param basic program " + helper + " " + htpasswd,
		"auth_param basic realm rustle-test",
		"http_upgrade_request_protocols websocket allow all",
		"acl authed proxy_auth REQUIRED",
	}, connect, []string{
		"http_access allow authed",
		"http_access deny all",
		"",
	}), "\n")), 0o644)
	return startExternal(t, addr, bin, "-N", "-f", conf)
}

// StartDante starts Debian's Dante server (danted; skipped without it,
// failing under CI) as a SOCKS5 parent on loopback without
// authentication, allowing CONNECT and UDP ASSOCIATE to anything (and
// the UDP replies of loopback destinations). Dante's username method
// checks the system's user database (passwd, or PAM), which a test
// cannot give a user of its own without changing the machine's; rustle's
// own SOCKS5 listener stands in for a SOCKS5 parent with username auth.
// It is killed by t.Cleanup.
func StartDante(t testing.TB) *ExternalProxy {
	t.Helper()
	return startDante(t, "connect udpassociate")
}

// StartDanteTCPOnly is StartDante allowing only CONNECT: it refuses UDP
// ASSOCIATE (reply 0x02, not allowed by ruleset).
func StartDanteTCPOnly(t testing.TB) *ExternalProxy {
	t.Helper()
	return startDante(t, "connect")
}

// startDante starts Dante allowing the SOCKS commands commands.
func startDante(t testing.TB, commands string) *ExternalProxy {
	t.Helper()
	bin := sbinTool(t, "danted", "dante-server")
	dir := worldReadableDir(t)
	addr := ClosedPort(t)
	host, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(dir, "danted.conf")
	writeFile(t, conf, []byte(strings.Join([]string{
		"logoutput: stderr",
		"internal: " + host + " port = " + port,
		"external: 127.0.0.1",
		"socksmethod: none",
		"clientmethod: none",
		"user.unprivileged: nobody",
		"client pass { from: 127.0.0.0/8 to: 0.0.0.0/0 }",
		"socks pass { from: 127.0.0.0/8 to: 0.0.0.0/0 command: " + commands + " }",
		"socks pass { from: 0.0.0.0/0 to: 127.0.0.0/8 command: udpreply }",
		"",
	}, "\n")), 0o644)
	return startExternal(t, addr, bin, "-f", conf, "-N", "1", "-p", filepath.Join(dir, "danted.pid"))
}

// sbinTool is RequireTool for a daemon Debian installs in /usr/sbin,
// which a user's PATH may not hold.
func sbinTool(t testing.TB, name, pkg string) string {
	t.Helper()
	if p := filepath.Join("/usr/sbin", name); FindTool(name) == "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return RequireTool(t, name, pkg)
}

// startExternal runs bin with args and waits until addr accepts
// connections.
func startExternal(t testing.TB, addr, bin string, args ...string) *ExternalProxy {
	t.Helper()
	p := &ExternalProxy{Addr: addr, out: new(lockedBuffer), done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("proxytest: start %s: %v", bin, err)
	}
	exited := false
	go func() {
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.Stop)
	WaitFor(t, filepath.Base(bin)+" listening on "+addr, func() bool {
		select {
		case <-p.done:
			exited = true
			return true
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	})
	if exited {
		t.Fatalf("proxytest: %s exited at start:\n%s", bin, p.Output())
	}
	return p
}

// worldReadableDir returns a temporary directory that a proxy dropping
// its privileges (Squid to proxy, Dante to nobody) can read.
func worldReadableDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	// t.TempDir's directories are the test's, made 0700.
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// writeFile writes a test server's file, failing the test on an error;
// perm is 0o644 for what a server that drops its privileges must read.
func writeFile(t testing.TB, name string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(name, data, perm); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
}

// lockedBuffer is a bytes.Buffer written by a process and read by a test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
