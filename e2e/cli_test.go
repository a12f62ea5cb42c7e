//go:build linux

package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	r := runRustle(t, "", "version")
	if r.code != 0 || !regexp.MustCompile(`^rustle \S+\n$`).MatchString(r.stdout) {
		t.Fatalf("rustle version: exit %d stdout %q stderr %q, want \"rustle VERSION\"", r.code, r.stdout, r.stderr)
	}
	// Built in a git checkout, the version names the commit (it printed
	// "dev" whatever the checkout).
	out, err := exec.Command("git", "-C", moduleRoot, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Logf("not a git checkout (%v): the revision is not checked", err)
		return
	}
	if rev := strings.TrimSpace(string(out)); !strings.Contains(r.stdout, rev[:12]) {
		t.Errorf("rustle version = %q, want it to name the commit %s", r.stdout, rev[:12])
	}
}

func TestPasswd(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		args   []string
		stdin  string
		okLine string // the line's prefix when it succeeds; "" = must fail
	}{
		{"password on stdin", []string{"passwd", "alice"}, "secret\n", "alice:$2"},
		{"CRLF line", []string{"passwd", "alice"}, "secret\r\n", "alice:$2"},
		{"no newline", []string{"passwd", "alice"}, "secret", "alice:$2"},
		{"empty password", []string{"passwd", "alice"}, "\n", ""},
		{"no user", []string{"passwd"}, "secret\n", ""},
		{"user with a colon", []string{"passwd", "a:b"}, "secret\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := runRustle(t, tc.stdin, tc.args...)
			if tc.okLine == "" {
				if r.code == 0 || r.stdout != "" {
					t.Fatalf("rustle %q: exit %d stdout %q, want a failure", tc.args, r.code, r.stdout)
				}
				return
			}
			if r.code != 0 || !strings.HasPrefix(r.stdout, tc.okLine) || strings.Count(r.stdout, "\n") != 1 {
				t.Fatalf("rustle %q: exit %d stdout %q stderr %q", tc.args, r.code, r.stdout, r.stderr)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	listen := "[[listen]]\naddress = \"127.0.0.1:0\"\n"
	md5File := writeFile(t, "md5.htpasswd", "alice:$apr1$abcdefgh$0123456789abcdefghijkl\n")
	cases := []struct {
		name string
		toml string
		// want: "" = valid; otherwise what the message must name, and line
		// the line it must name (0: not checked).
		want []string
		line int
	}{
		{name: "good", toml: "workers = 1\n" + listen},
		{name: "good with users", toml: "[auth]\nrealm = \"x\"\n" + inlineUser("u", "p") + listen},
		{name: "unknown key", toml: "workers = 1\n\n# comment\nbogus_key = 3\n" + listen, want: []string{"bogus_key"}, line: 4},
		{name: "unknown key in a table", toml: "[timeouts]\nconect = \"5s\"\n" + listen, want: []string{"conect"}, line: 2},
		{name: "unknown key in a listener", toml: listen + "port = 3128\n", want: []string{"port"}, line: 3},
		{name: "bad duration", toml: "[timeouts]\nread_header = \"5s\"\nconnect = \"ten\"\n" + listen, want: []string{"connect"}, line: 3},
		{name: "wrong type", toml: "\nworkers = \"two\"\n" + listen, want: []string{"workers"}, line: 2},
		{name: "bad choice", toml: "via = true\nforwarded = \"bogus\"\n" + listen, want: []string{"forwarded"}, line: 2},
		{name: "negative", toml: "\n\nworkers = -1\n" + listen, want: []string{"workers"}, line: 3},
		{name: "bad protocol", toml: listen + "protocol = \"gopher\"\n", want: []string{"protocol"}, line: 3},
		{name: "open proxy", toml: "[[listen]]\naddress = \"0.0.0.0:0\"\n", want: []string{"listen[0]", "open proxy"}},
		{name: "non-bcrypt htpasswd", toml: fmt.Sprintf("[auth]\nhtpasswd = [%q]\n", md5File) + listen,
			want: []string{"md5.htpasswd"}, line: 1},
		{name: "TOML syntax", toml: "workers = 1\nforwarded = \"none\n" + listen, want: []string{}, line: 2},
		{name: "unknown access log field", toml: listen + "\n[access_log]\ntemplate = \"{time} {passwd}\"\n",
			want: []string{"access_log.template", "unknown field {passwd}"}, line: 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "rustle.toml", tc.toml)
			r := runRustle(t, "", "check", "-c", path)
			if tc.want == nil {
				if r.code != 0 || !strings.Contains(r.stdout, "OK") {
					t.Fatalf("rustle check: exit %d stdout %q stderr %q, want OK", r.code, r.stdout, r.stderr)
				}
				return
			}
			if r.code == 0 {
				t.Fatalf("rustle check accepted\n%s\nstdout %q", tc.toml, r.stdout)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("rustle check message %q does not name %q", r.stderr, w)
				}
			}
			if tc.line > 0 && !regexp.MustCompile(fmt.Sprintf(`(:|line )%d\b`, tc.line)).MatchString(r.stderr) {
				t.Errorf("rustle check message %q does not name line %d", r.stderr, tc.line)
			}
		})
	}
	t.Run("example config", func(t *testing.T) {
		r := runRustle(t, "", "check", "-c", filepath.Join(moduleRoot, "rustle.example.toml"))
		if r.code != 0 {
			t.Fatalf("rustle check -c rustle.example.toml: exit %d stderr %q", r.code, r.stderr)
		}
	})
}

// TestDefaultRun starts rustle without arguments: the embedded default
// configuration on 127.0.0.1:3128, without auth, and a curl hint.
func TestDefaultRun(t *testing.T) {
	const addr = "127.0.0.1:3128"
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("%s is in use (%v); the default run needs it free", addr, err)
	}
	ln.Close()
	p := startRustle(t)
	deadline := time.Now().Add(15 * time.Second)
	for !startedRE.MatchString(p.log.String()) {
		if p.exited() {
			if strings.Contains(p.log.String(), "address already in use") {
				t.Skipf("%s was taken before rustle started", addr)
			}
			t.Fatalf("rustle without arguments exited (%v):\n%s", p.waitErr, p.log.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("rustle without arguments did not start:\n%s", p.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	hint := "curl -x http://" + addr + " "
	deadline = time.Now().Add(5 * time.Second)
	for !strings.Contains(p.log.String(), hint) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(p.log.String(), hint) {
		t.Errorf("no curl hint %q in the output:\n%s", hint, p.log.String())
	}
	o := newOrigin(t, "127.0.0.1", false)
	resp, body := newProxyClient(t, proxyURL(addr, "", ""), nil).fetch(t, "GET", o.URL+"/hello", nil)
	if resp.StatusCode != 200 || body != "hello from origin\n" {
		t.Fatalf("GET through the default proxy without credentials: status %s body %q", resp.Status, body)
	}
	p.signal(t, syscall.SIGTERM)
	if code := p.exitCode(5 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// TestSignals checks the drain on SIGTERM and SIGINT: a slow request in
// flight completes, the process exits 0 soon after (well before the
// drain timeout), and an idle tunnel is closed when the drain ends, the
// exit status (3) saying that the drain was cut short.
func TestSignals(t *testing.T) {
	t.Parallel()
	signals := []struct {
		name string
		sig  syscall.Signal
	}{{"SIGTERM", syscall.SIGTERM}, {"SIGINT", syscall.SIGINT}}
	for _, s := range signals {
		sig := s.sig
		t.Run(s.name+" in-flight request", func(t *testing.T) {
			t.Parallel()
			const drain = 10 * time.Second
			path := writeFile(t, "rustle.toml", proxyConfig("127.0.0.1:0", drain.String(), ""))
			p := startRustle(t, "-c", path)
			p.waitStarted(t)
			o := newOrigin(t, "127.0.0.1", false)
			c := newProxyClient(t, proxyURL(p.addr(), "", ""), nil)

			var wg sync.WaitGroup
			var status int
			var body string
			var reqErr error
			wg.Go(func() {
				var resp *http.Response
				resp, reqErr = c.Get(o.URL + "/slow")
				if reqErr != nil {
					return
				}
				defer resp.Body.Close()
				status = resp.StatusCode
				var b []byte
				b, reqErr = io.ReadAll(resp.Body)
				body = string(b)
			})
			select {
			case <-o.slowStarted:
			case <-time.After(10 * time.Second):
				wg.Wait()
				t.Fatalf("the slow request did not reach the origin (%v)", reqErr)
			}
			sent := time.Now()
			p.signal(t, sig)
			wg.Wait()
			if reqErr != nil || status != 200 || body != "slow done\n" {
				t.Errorf("in-flight request during the drain: status %d body %q err %v; want it to complete", status, body, reqErr)
			}
			code := p.exitCode(drain + 5*time.Second)
			took := time.Since(sent)
			if code != 0 {
				t.Fatalf("exit code %d after %s, want 0", code, s.name)
			}
			if took > 3*time.Second {
				t.Errorf("rustle took %v to exit after %s with a %v request in flight; want it prompt (drain timeout %v)",
					took.Round(time.Millisecond), s.name, slowDelay, drain)
			}
			t.Logf("%s: exited 0 %v after the signal", s.name, took.Round(time.Millisecond))
		})
	}

	t.Run("SIGTERM idle tunnel", func(t *testing.T) {
		t.Parallel()
		const drain = time.Second
		path := writeFile(t, "rustle.toml", proxyConfig("127.0.0.1:0", drain.String(), ""))
		p := startRustle(t, "-c", path)
		p.waitStarted(t)
		echo := newEchoServer(t)
		tun, err := openTunnel(t.Context(), p.addr(), echo.addr(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer tun.Close()
		if err := echoOnce(tun, []byte("before the signal")); err != nil {
			t.Fatal(err)
		}
		sent := time.Now()
		p.signal(t, syscall.SIGTERM)
		code := p.exitCode(drain + 5*time.Second)
		took := time.Since(sent)
		if code != 3 {
			t.Fatalf("exit code %d after SIGTERM with an idle tunnel cut at the drain timeout, want 3", code)
		}
		if took > drain+2*time.Second {
			t.Errorf("rustle took %v to exit with an idle tunnel; the drain timeout is %v", took, drain)
		}
		tun.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := tun.Read(make([]byte, 1)); err == nil {
			t.Errorf("the tunnel is still open after rustle exited (read %d bytes)", n)
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("the tunnel was not closed when rustle exited: %v", err)
		}
	})
}

// TestWorkersSharePort checks that with workers = 2 the listener is two
// listening sockets (SO_REUSEPORT) on the one logged port.
func TestWorkersSharePort(t *testing.T) {
	t.Parallel()
	p := startProxy(t, "127.0.0.1:0", "")
	_, port, err := net.SplitHostPort(p.addr())
	if err != nil {
		t.Fatal(err)
	}
	if n := listenSockets(t, p.pid(), port); n != 2 {
		t.Errorf("rustle with workers = 2 has %d listening sockets on port %s, want 2", n, port)
	}
}

// listenSockets counts the IPv4 TCP sockets of pid listening on port.
func listenSockets(t testing.TB, pid int, port string) int {
	t.Helper()
	inodes := make(map[string]bool)
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Skipf("cannot list sockets: %v", err)
	}
	for _, e := range ents {
		link, err := os.Readlink(filepath.Join(dir, e.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	table, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/tcp", pid))
	if err != nil {
		t.Skipf("cannot list sockets: %v", err)
	}
	portNum, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	wantLocal := fmt.Sprintf(":%04X", portNum)
	n := 0
	for line := range strings.Lines(string(table)) {
		f := strings.Fields(line)
		// sl local_address rem_address st ... uid timeout inode
		if len(f) < 10 || f[3] != "0A" || !strings.HasSuffix(f[1], wantLocal) {
			continue
		}
		if inodes[f[9]] {
			n++
		}
	}
	return n
}

// TestSystemdNotify runs rustle with NOTIFY_SOCKET naming a unix datagram
// socket of the test, as systemd's Type=notify does, and checks that it
// says READY=1 once listening and STOPPING=1 on SIGTERM, then exits 0.
func TestSystemdNotify(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan string, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	})
	t.Cleanup(func() {
		conn.Close()
		wg.Wait()
	})
	var seen []string
	// await waits up to 10s for a datagram holding the line want.
	await := func(want string) {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case m := <-msgs:
				seen = append(seen, m)
				if slices.Contains(strings.Split(m, "\n"), want) {
					return
				}
			case <-timeout:
				t.Fatalf("no %s on NOTIFY_SOCKET within 10s; got %q", want, seen)
			}
		}
	}

	path := writeFile(t, "rustle.toml", proxyConfig("127.0.0.1:0", "5s", ""))
	p := startEnv(t, []string{"NOTIFY_SOCKET=" + sock}, append(slices.Clone(allowLoopback), "-c", path)...)
	await("READY=1")
	p.waitStarted(t)
	o := newOrigin(t, "127.0.0.1", false)
	if resp, body := newProxyClient(t, proxyURL(p.addr(), "", ""), nil).fetch(t, "GET", o.URL+"/hello", nil); resp.StatusCode != 200 {
		t.Fatalf("GET through rustle after READY=1: %s %q", resp.Status, body)
	}
	p.signal(t, syscall.SIGTERM)
	await("STOPPING=1")
	if code := p.exitCode(10 * time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM with nothing in flight, want 0", code)
	}
}
