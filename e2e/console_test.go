//go:build linux

package e2e

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// consoleDriver is browser/console.mjs, driving Chromium one command at
// a time.
type consoleDriver struct {
	t     testing.TB
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	dir   string
	stder *logBuffer
}

// startConsoleDriver starts browser/console.mjs and launches Chromium
// with the admin listener's credentials. Chromium and the driver are
// closed, and Chromium's stragglers killed, at the end of the test.
func startConsoleDriver(t testing.TB, tools browserTools, user, pass string) *consoleDriver {
	t.Helper()
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	cmd := exec.CommandContext(ctx, tools.node, "console.mjs")
	cmd.Dir = tools.dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LC_ALL=C"}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d := &consoleDriver{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out), dir: dir, stder: &logBuffer{}}
	d.out.Buffer(nil, 1<<20)
	cmd.Stderr = d.stder
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start node console.mjs: %v", err)
	}
	t.Cleanup(func() {
		in.Close() // the driver closes Chromium and exits
		cmd.Wait()
		cancel()
		killStragglers(t, dir)
		if t.Failed() {
			t.Logf("console.mjs stderr:\n%s", d.stder.String())
		}
	})
	d.do(map[string]any{"op": "launch", "executablePath": tools.chromium, "userDataDir": filepath.Join(dir, "profile"),
		"username": user, "password": pass, "width": 1280, "height": 900,
		"args": []string{"--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"}})
	return d
}

// do sends one command and returns its answer; a failed command fails
// the test.
func (d *consoleDriver) do(cmd map[string]any) map[string]any {
	d.t.Helper()
	ans, err := d.try(cmd)
	if err != nil {
		d.t.Fatalf("console.mjs %v: %v", cmd["op"], err)
	}
	return ans
}

// try sends one command and returns its answer or its error.
func (d *consoleDriver) try(cmd map[string]any) (map[string]any, error) {
	d.t.Helper()
	b, err := json.Marshal(cmd)
	if err != nil {
		d.t.Fatal(err)
	}
	if _, err := d.in.Write(append(b, '\n')); err != nil {
		d.t.Fatalf("console.mjs: write %s: %v\nstderr:\n%s", b, err, d.stder.String())
	}
	if !d.out.Scan() {
		d.t.Fatalf("console.mjs ended before answering %s: %v\nstderr:\n%s", b, d.out.Err(), d.stder.String())
	}
	var ans map[string]any
	if err := json.Unmarshal(d.out.Bytes(), &ans); err != nil {
		d.t.Fatalf("console.mjs answered %q: %v", d.out.Text(), err)
	}
	if ok, _ := ans["ok"].(bool); !ok {
		return ans, fmt.Errorf("%v", ans["error"])
	}
	return ans, nil
}

// wait waits until the text of the element selector matches pattern.
func (d *consoleDriver) wait(selector, pattern string) string {
	d.t.Helper()
	ans, err := d.try(map[string]any{"op": "wait", "selector": selector, "pattern": pattern, "timeoutMs": 15000})
	if err != nil {
		d.t.Fatalf("the page: %v", err)
	}
	return ans["text"].(string)
}

// artifactDir is where the console test keeps its screenshots:
// $RUSTLE_E2E_ARTIFACTS, or e2e/artifacts (ignored by git).
func artifactDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("RUSTLE_E2E_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(moduleRoot, "e2e", "artifacts")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestConsolePage runs rustle with an admin listener behind htpasswd, a
// quota, a parent (a second rustle) and the access log, sends it
// traffic, and opens the admin page in headless Chromium: the page's
// numbers match what was sent and move with new traffic; the parent,
// killed, shows down; the revoke button ends the user's tunnel; the
// access log filter, and the reload button after the file changed,
// work; a cross-site form POST is refused. Screenshots are kept (see
// artifactDir).
func TestConsolePage(t *testing.T) {
	tools := needBrowser(t)
	o := newOrigin(t, "127.0.0.1", false)
	echo := proxytest.NewEcho(t)
	parent := startProxy(t, "127.0.0.1:0", "")

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin.htpasswd"), []byte(hashPassword(t, "op", "op-pw-3d9a")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const password = "pw-5b2f-secret"
	base := `workers = 1
admin = "127.0.0.1:0"

[log]
level = "info"

[admin_access]
htpasswd = "admin.htpasswd"

[access_log]
enabled = true
path = "access.log"

[metrics]
per_user = true

[[listen]]
name = "main"
address = "127.0.0.1:0"
protocol = "http"

[[quota.rules]]
name = "daily"
users = ["carol"]
requests = 3

[[parents]]
name = "up1"
url = "http://` + parent.addr() + `"
max_fails = 1
cooldown = "1m"
probe_interval = "200ms"

[[routes]]
name = "via-up1"
users = ["dave"]
via = "up1"

`
	for _, u := range []string{"alice", "bob", "carol", "dave"} {
		base += inlineUser(u, password)
	}
	cfgPath := filepath.Join(dir, "rustle.toml")
	if err := os.WriteFile(cfgPath, []byte(base), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startRustle(t, "-c", cfgPath)
	p.waitStarted(t)
	proxyAddr := p.addr()
	m := regexp.MustCompile(`msg="admin listening" addr=(\S+)`).FindStringSubmatch(p.log.String())
	if m == nil {
		t.Fatalf("no admin listening line:\n%s", p.log.String())
	}
	adminURL := "http://" + m[1]

	sent := 0
	send := func(user string, n, want int) {
		t.Helper()
		for range n {
			if got := getStatus(t, o, proxyAddr, user, password); got != want {
				t.Fatalf("GET as %s: %d, want %d", user, got, want)
			}
			sent++
		}
	}
	send("alice", 10, 200)
	send("carol", 3, 200)
	send("carol", 1, http.StatusTooManyRequests)
	send("mallory", 1, http.StatusProxyAuthRequired)
	send("dave", 2, 200)
	tunnel := proxytest.Connect(t, proxyAddr, echo.Addr, "Proxy-Authorization: Basic "+
		base64.StdEncoding.EncodeToString([]byte("bob:"+password)))
	sent++
	buf := make([]byte, 4)
	if _, err := tunnel.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(tunnel, buf); err != nil {
		t.Fatalf("bob's tunnel: %v", err)
	}

	d := startConsoleDriver(t, tools, "op", "op-pw-3d9a")
	if st := d.do(map[string]any{"op": "goto", "url": adminURL + "/"})["status"]; st != float64(200) {
		t.Fatalf("GET / in Chromium: status %v", st)
	}
	shots := artifactDir(t)

	t.Run("numbers match the traffic", func(t *testing.T) {
		d.wait("#total-requests", "^"+strconv.Itoa(sent)+"$")
		d.wait(`#users-by-requests tr[data-user="alice"] td.req`, "^10$")
		d.wait(`#users-by-requests tr[data-user="carol"] td.quota`, `daily: 3/3 req`)
		d.wait(`#refusals tr[data-reason="quota"] td.n`, "^1$")
		d.wait(`#refusals tr[data-reason="auth-failed"] td.n`, "^1$")
		d.wait(`#quotas tr[data-scope="carol"]`, `daily\s*carol.*3 / 3`)
		d.wait(`#parents tr[data-parent="up1"] td.state`, "^up$")
		d.wait(`#open-tunnels`, "^1$")
		d.wait(`figure[data-chart="requests:"] .legend`, `http`)
		d.wait(`#listeners`, regexp.QuoteMeta(proxyAddr))
		d.wait(`#you`, "^op$")
	})

	t.Run("numbers move", func(t *testing.T) {
		// Five rounds a little apart, for the charts to show them.
		tick := time.NewTicker(300 * time.Millisecond)
		defer tick.Stop()
		for range 5 {
			<-tick.C
			send("alice", 1, 200)
		}
		d.wait("#total-requests", "^"+strconv.Itoa(sent)+"$")
		d.wait(`figure[data-chart="requests:"] .legend`, `peak [1-9]`)
		d.wait(`#users-by-requests tr[data-user="alice"] td.req`, "^15$")
		d.do(map[string]any{"op": "click", "selector": `button[data-window="60"]`})
		d.do(map[string]any{"op": "screenshot", "path": filepath.Join(shots, "console.png")})
	})

	t.Run("a parent killed shows down", func(t *testing.T) {
		parent.signal(t, syscall.SIGKILL)
		d.wait(`#parents tr[data-parent="up1"] td.state`, "^down$")
	})

	t.Run("revoke ends the tunnel", func(t *testing.T) {
		d.do(map[string]any{"op": "fill", "selector": `#revoke-form input[name="user"]`, "value": "bob"})
		d.do(map[string]any{"op": "click", "selector": `#revoke-form button`})
		d.wait("#action-result", "^revoke bob: its sessions and tunnels were ended$")
		tunnel.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := tunnel.Read(buf); err == nil {
			t.Errorf("bob's tunnel still carries data after the revocation (%d bytes)", n)
		} else if os.IsTimeout(err) {
			t.Errorf("bob's tunnel still open 5s after the revocation")
		}
		d.wait("#log-lines", ` bob connect CONNECT `+regexp.QuoteMeta(echo.Addr)+` 200 4 4 .* revoked`)
		d.wait("#open-tunnels", "^0$")
		d.wait(`figure[data-chart="open:"] .legend`, `tunnels 0`)
		if !strings.Contains(p.log.String(), `msg="admin action" action=revoke by=op remote=127.0.0.1:`) {
			t.Errorf("no log line of the revocation with who asked:\n%s", p.log.String())
		}
	})

	t.Run("access log filter", func(t *testing.T) {
		d.do(map[string]any{"op": "fill", "selector": `#log-filter input[name="reason"]`, "value": "quota"})
		d.do(map[string]any{"op": "click", "selector": `#log-filter button`})
		text := d.wait("#log-lines", `^[^\n]* carol http GET [^\n]* 429 [^\n]* quota$`)
		if strings.Contains(text, "alice") || strings.Contains(text, password) {
			t.Errorf("filtered by reason=quota the log shows %q", text)
		}
		d.do(map[string]any{"op": "fill", "selector": `#log-filter input[name="reason"]`, "value": ""})
		d.do(map[string]any{"op": "click", "selector": `#log-filter button`})
	})

	t.Run("reload", func(t *testing.T) {
		next := strings.Replace(base, `[[quota.rules]]`, "[[listen]]\nname = \"extra\"\naddress = \"127.0.0.1:0\"\nprotocol = \"http\"\n\n[[quota.rules]]", 1)
		if err := os.WriteFile(cfgPath, []byte(next), 0o600); err != nil {
			t.Fatal(err)
		}
		d.do(map[string]any{"op": "click", "selector": `#reload`})
		d.wait("#action-result", "^configuration reloaded$")
		d.wait("#last-reload", `^ok · .* · admin op$`)
		d.wait("#listeners", `extra`)
		d.do(map[string]any{"op": "screenshot", "path": filepath.Join(shots, "console-after.png")})
	})

	t.Run("no script errors", func(t *testing.T) {
		if errs := d.do(map[string]any{"op": "errors"})["errors"].([]any); len(errs) > 0 {
			t.Errorf("the page logged errors (a CSP violation, a script error): %v", errs)
		}
	})

	t.Run("cross-site form refused", func(t *testing.T) {
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<!doctype html><form id="f" method="post" action="%s/api/revoke?user=alice">
<input name="user" value="alice"></form><script>document.getElementById('f').submit()</script>`, html.EscapeString(adminURL))
		}))
		t.Cleanup(evil.Close)
		d.do(map[string]any{"op": "goto", "url": evil.URL + "/"})
		d.wait("body", "cross-origin request refused")
		if l := p.log.String(); !strings.Contains(l, `msg="admin request refused" reason=cross-origin status=403 method=POST path=/api/revoke`) ||
			strings.Contains(l, `user=alice done=`) {
			t.Errorf("the cross-site POST was not refused as such:\n%s", l)
		}
	})
	t.Logf("screenshots in %s", shots)
}

// TestConsoleAccess checks who gets the admin page: without
// admin_access an admin listener off loopback does not start; with
// htpasswd on every address, a client on a non-loopback address of
// this host gets 401 without credentials and the page with them; with
// health_and_metrics_only it gets the text index and 404 for the API.
func TestConsoleAccess(t *testing.T) {
	r := runRustle(t, "", "--admin", "0.0.0.0:0", "-L", "http://127.0.0.1:0")
	if r.code != 1 || !strings.Contains(r.stderr, "not on loopback") {
		t.Fatalf("rustle --admin 0.0.0.0:0 without admin_access: exit %d, %s; want 1 naming the key", r.code, r.stderr)
	}
	ip := nonLoopbackIP(t)
	if ip == "" {
		t.Skip("this host has no non-loopback IPv4 address to call the admin listener from")
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "admin.htpasswd"), []byte(hashPassword(t, "op", "op-pw")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, access string
		want         map[string]int // path -> status without credentials
		withAuth     int            // GET / with credentials
	}{
		{"htpasswd", "htpasswd = \"admin.htpasswd\"\n", map[string]int{"/": 401, "/api/summary": 401, "/metrics": 200}, 200},
		{"health and metrics only", "health_and_metrics_only = true\n", map[string]int{"/": 200, "/api/summary": 404, "/metrics": 200, "/healthz": 200}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".toml")
			src := "admin = \"0.0.0.0:0\"\n[admin_access]\n" + tc.access + "[[listen]]\naddress = \"127.0.0.1:0\"\n"
			if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			p := startRustle(t, "-c", cfg)
			p.waitStarted(t)
			m := regexp.MustCompile(`msg="admin listening" addr=\S+:(\d+)`).FindStringSubmatch(p.log.String())
			if m == nil {
				t.Fatalf("no admin listening line:\n%s", p.log.String())
			}
			base := "http://" + net.JoinHostPort(ip, m[1])
			for path, want := range tc.want {
				resp, err := http.Get(base + path)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != want {
					t.Errorf("GET %s from %s without credentials: %d, want %d", path, ip, resp.StatusCode, want)
				}
			}
			if tc.withAuth != 0 {
				req, _ := http.NewRequest("GET", base+"/", nil)
				req.SetBasicAuth("op", "op-pw")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.withAuth || !strings.Contains(string(b), `id="total-requests"`) {
					t.Errorf("GET / from %s with credentials: %d, want the page", ip, resp.StatusCode)
				}
			}
			if !strings.Contains(p.log.String(), "remote="+ip+":") && tc.want["/"] == 401 {
				t.Errorf("the refusal's log line does not name the client %s:\n%s", ip, p.log.String())
			}
		})
	}
}

// nonLoopbackIP returns an IPv4 address of this host that is not
// loopback, or "".
func nonLoopbackIP(t testing.TB) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
