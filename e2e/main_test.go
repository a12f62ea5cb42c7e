//go:build linux

package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// rustleBin is the path of the binary TestMain built.
var rustleBin string

// moduleRoot is the directory holding go.mod.
var moduleRoot string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	flag.Parse()
	if f := flag.Lookup("test.list"); f != nil && f.Value.String() != "" {
		return m.Run() // listing tests needs no binary
	}
	dir, err := os.MkdirTemp("", "rustle-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := buildRustle(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	return m.Run()
}

// buildRustle builds ./cmd/rustle from the module root into dir.
func buildRustle(dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return errors.New("go env GOMOD: not inside a module")
	}
	moduleRoot = filepath.Dir(gomod)
	rustleBin = filepath.Join(dir, "rustle")
	// -buildvcs=auto stamps the revision of a git checkout (rustle
	// version prints it) whatever GOFLAGS says.
	args := []string{"build", "-buildvcs=auto", "-o", rustleBin}
	if os.Getenv("RUSTLE_E2E_RACE") == "1" {
		args = append(args, "-race")
	}
	args = append(args, "./cmd/rustle")
	cmd := exec.Command(goBin, args...)
	cmd.Dir = moduleRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/rustle: %w\n%s", err, out)
	}
	return nil
}

// logBuffer collects a process's stderr; it is safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer // guarded by mu
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// proc is a running rustle process.
type proc struct {
	cmd *exec.Cmd
	log *logBuffer

	done    chan struct{} // closed when the process has been waited for
	waitErr error         // cmd.Wait's result; read after done is closed

	// addrs are the bound listener addresses, in configuration order,
	// read from the "listening" log lines.
	addrs []string
}

// pid returns the process id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// addr returns the first listener's address.
func (p *proc) addr() string { return p.addrs[0] }

// exited reports whether the process has exited.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitCode waits up to d for the process to exit and returns its exit
// code, or -1 when it is still running (or died from a signal).
func (p *proc) exitCode(d time.Duration) int {
	select {
	case <-p.done:
	case <-time.After(d):
		return -1
	}
	if p.waitErr == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(p.waitErr, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// signal sends sig to the process by its pid.
func (p *proc) signal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(p.pid(), sig); err != nil {
		t.Fatalf("kill -%d %d: %v", sig, p.pid(), err)
	}
}

// allowLoopback lifts the private-destination guard for the loopback
// addresses the tests' origins listen on.
var allowLoopback = []string{"--allow-private", "127.0.0.0/8", "--allow-private", "::1/128"}

// startRustle starts the binary with allowLoopback and args; see
// startGuarded.
func startRustle(t testing.TB, args ...string) *proc {
	t.Helper()
	return startGuarded(t, append(slices.Clone(allowLoopback), args...)...)
}

// startGuarded starts the binary with args alone (its private-destination
// guard refuses the loopback origins unless args lift it) and registers a
// cleanup that kills it by pid and waits for it. It does not wait for the
// listeners; see waitStarted.
func startGuarded(t testing.TB, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, args...)
}

// startEnv is startGuarded with env (NAME=value) added to the child's
// clean environment.
func startEnv(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(rustleBin, args...)
	cmd.Env = append(cleanEnv(t), env...)
	lb := &logBuffer{}
	cmd.Stdout = lb
	cmd.Stderr = lb
	cmd.WaitDelay = 2 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatalf("start rustle %v: %v", args, err)
	}
	p := &proc{cmd: cmd, log: lb, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			syscall.Kill(p.pid(), syscall.SIGKILL)
		}
		<-p.done
		if s := lb.String(); strings.Contains(s, "WARNING: DATA RACE") {
			t.Errorf("rustle %v reported a data race:\n%s", args, s)
		}
		if t.Failed() {
			t.Logf("rustle %v log:\n%s", args, lb.String())
		}
	})
	return p
}

var (
	listeningRE = regexp.MustCompile(`(?m)^.*msg=listening .* addr=(\S+)`)
	startedRE   = regexp.MustCompile(`(?m)msg="rustle started"`)
)

// waitStarted waits until the process logs that it has started and
// records the addresses of its listeners.
func (p *proc) waitStarted(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		s := p.log.String()
		if startedRE.MatchString(s) {
			for _, m := range listeningRE.FindAllStringSubmatch(s, -1) {
				p.addrs = append(p.addrs, m[1])
			}
			if len(p.addrs) == 0 {
				t.Fatalf("rustle started without a listening line:\n%s", s)
			}
			return
		}
		if p.exited() {
			t.Fatalf("rustle exited before starting (%v):\n%s", p.waitErr, s)
		}
		if time.Now().After(deadline) {
			t.Fatalf("rustle did not start within 15s:\n%s", s)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startProxy writes a configuration with one listener on listenAddr
// (port 0), two workers and extra appended (tables only), starts rustle
// on it and waits for it to listen.
func startProxy(t testing.TB, listenAddr, extra string) *proc {
	t.Helper()
	path := writeFile(t, "rustle.toml", proxyConfig(listenAddr, "5s", extra))
	p := startRustle(t, "-c", path)
	p.waitStarted(t)
	return p
}

// proxyConfig returns a configuration with one listener on listenAddr,
// two workers, the given drain timeout and extra appended after it.
func proxyConfig(listenAddr, drain, extra string) string {
	return fmt.Sprintf(`workers = 2

[log]
level = "info"

[timeouts]
connect = "5s"
drain = %q

[[listen]]
name = "e2e"
address = %q
protocol = "http"

%s
`, drain, listenAddr, extra)
}

// inlineUser returns an [[auth.users]] table with a plain password.
func inlineUser(name, password string) string {
	return fmt.Sprintf("[[auth.users]]\nname = %q\npassword = %q\n", name, password)
}

// writeFile writes content to name in a new temporary directory and
// returns its path.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// cleanEnv returns an environment for child processes without proxy
// variables or user configuration files.
func cleanEnv(t testing.TB) []string {
	t.Helper()
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"LC_ALL=C",
	}
}

// result is what a finished command left behind.
type result struct {
	stdout, stderr string
	code           int
}

// runCmd runs name with args and stdin (may be "") to completion within
// 30 seconds.
func runCmd(t testing.TB, stdin, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = cleanEnv(t)
	cmd.WaitDelay = 2 * time.Second
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.Exited():
		r.code = ee.ExitCode()
	default:
		t.Fatalf("%s %q: %v\nstderr: %s", name, args, err, r.stderr)
	}
	return r
}

// runRustle runs a one-shot rustle subcommand.
func runRustle(t testing.TB, stdin string, args ...string) result {
	t.Helper()
	return runCmd(t, stdin, rustleBin, args...)
}

// rustleFiles runs `rustle sub DIR` ("ca": a CA for interception;
// "cert": a test CA and a server certificate) into a new directory of
// the test's and returns it.
func rustleFiles(t testing.TB, sub string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), sub)
	if r := runRustle(t, "", sub, dir); r.code != 0 {
		t.Fatalf("rustle %s: exit %d: %s", sub, r.code, r.stderr)
	}
	return dir
}

// needCurl returns the path of curl or skips the test.
func needCurl(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("curl not found in PATH; install it (make deps does) to run the curl tests")
	}
	return path
}

// curl runs curl with args (after -q -sS and a 20 s limit).
func curl(t testing.TB, args ...string) result {
	t.Helper()
	path := needCurl(t)
	return runCmd(t, "", path, append([]string{"-q", "-sS", "--max-time", "20"}, args...)...)
}
