package server

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// fdHelperEnv, set in the environment of the test binary run again as a
// child, makes TestDescriptorBudgetHelper run a proxy under the open-file
// limit it names.
const fdHelperEnv = "RUSTLE_FD_HELPER_NOFILE"

// TestDescriptorBudgetHelper is not a test: run by startUnderLimit in a
// child process, it lowers the soft open-file limit to $RUSTLE_FD_HELPER_NOFILE,
// serves an http listener (max_connections $RUSTLE_FD_HELPER_MAX, two
// workers) with its log on stderr, prints "addr=ADDRESS" and serves until
// its stdin closes.
func TestDescriptorBudgetHelper(t *testing.T) {
	nofile, err := strconv.ParseUint(os.Getenv(fdHelperEnv), 10, 64)
	if err != nil {
		t.Skip("run by startUnderLimit")
	}
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	lim.Cur = nofile
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatalf("setrlimit nofile %d: %v", nofile, err)
	}
	maxConns, _ := strconv.Atoi(os.Getenv("RUSTLE_FD_HELPER_MAX"))
	cfg := config.Default()
	cfg.Workers = 2
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Listen = []config.Listener{{Address: "127.0.0.1:0"}}
	cfg.Limits.MaxConnections = maxConns
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	s, err := New(cfg, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer s.Close()
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	fmt.Printf("addr=%s\n", s.Addrs()[0].Addr)
	io.Copy(io.Discard, os.Stdin)
}

// underLimit is a proxy running in a child process under a low open-file
// limit.
type underLimit struct {
	addr  string
	log   *logBuffer // the child's log
	conns int        // the connection limit it logged
}

// startUnderLimit runs TestDescriptorBudgetHelper in a child process
// with a soft open-file limit of nofile and max_connections maxConns,
// until the test ends.
func startUnderLimit(t *testing.T, nofile, maxConns int) *underLimit {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDescriptorBudgetHelper$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d", fdHelperEnv, nofile), fmt.Sprintf("RUSTLE_FD_HELPER_MAX=%d", maxConns))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	u := &underLimit{log: &logBuffer{}}
	cmd.Stderr = u.log
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the proxy under a limit: %v", err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	lines := bufio.NewScanner(stdout)
	for lines.Scan() {
		if a, ok := strings.CutPrefix(lines.Text(), "addr="); ok {
			u.addr = a
			break
		}
	}
	if u.addr == "" {
		t.Fatalf("the proxy under a limit gave no address; its log:\n%s", u.log)
	}
	go io.Copy(io.Discard, stdout)
	budget := regexp.MustCompile(`msg="descriptor budget" open_files=(\d+) connections=(\d+)`)
	var m []string
	waitFor(t, "the descriptor budget in the log", func() bool {
		m = budget.FindStringSubmatch(u.log.String())
		return m != nil
	})
	if m[1] != strconv.Itoa(nofile) {
		t.Fatalf("descriptor budget for open_files=%s logged, want %d:\n%s", m[1], nofile, u.log)
	}
	u.conns, _ = strconv.Atoi(m[2])
	return u
}

// connect opens a CONNECT tunnel to target through u and returns it, or
// the proxy's refusal.
func (u *underLimit) connect(t *testing.T, target string) (net.Conn, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", u.addr, proxytest.DefaultTimeout)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	r, err := proxytest.ReadResponse(br, "CONNECT")
	if err != nil {
		return nil, err
	}
	if r.Status != 200 {
		return nil, fmt.Errorf("CONNECT answered %d %s: %q", r.Status, r.Reason, r.Body)
	}
	if br.Buffered() != 0 {
		return nil, fmt.Errorf("%d bytes after the CONNECT answer", br.Buffered())
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// TestIdleTunnelsFillDescriptorBudget checks that an idle tunnel costs its
// two sockets and no splice pipe's share: under an open-file limit of
// 1,200 the proxy admits about (1,200 - a small reserve) / 2 tunnels, every
// one of them opens and the next is refused with 503, not by a descriptor
// shortage; and that bulk transfers on more tunnels at once than the
// pipes the budget leaves go on through memory and deliver every byte.
func TestIdleTunnelsFillDescriptorBudget(t *testing.T) {
	const nofile = 1200
	echo := proxytest.NewEcho(t)
	target := echo.Addr
	u := startUnderLimit(t, nofile, 0)
	// About (1,200 - 128) / 2: a little less, for the pipes' pool.
	least := (nofile-128)/2 - 20
	if u.conns < least {
		t.Errorf("connections=%d under an open-file limit of %d, want at least %d", u.conns, nofile, least)
	}
	tunnels := make([]net.Conn, 0, u.conns)
	for i := range max(u.conns, least) {
		c, err := u.connect(t, target)
		if err != nil {
			t.Fatalf("idle tunnel %d of %d (open-file limit %d): %v\nproxy log:\n%s", i+1, max(u.conns, least), nofile, err, tail(u.log.String(), 20))
		}
		tunnels = append(tunnels, c)
	}
	if _, err := u.connect(t, target); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("tunnel %d past the limit of %d: %v, want a 503", u.conns+1, u.conns, err)
	}

	// Bulk both ways through 40 of the tunnels at once: 80 directions
	// wanting a pipe, against the 18 the budget has.
	const bulk, size = 40, 1 << 20
	var wg sync.WaitGroup
	errs := make(chan error, bulk)
	for i, c := range tunnels[:bulk] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.SetDeadline(time.Now().Add(30 * time.Second))
			payload := bytes.Repeat([]byte{byte('a' + i%26)}, size)
			go c.Write(payload)
			got := make([]byte, size)
			if _, err := io.ReadFull(c, got); err != nil {
				errs <- fmt.Errorf("tunnel %d: read back: %w", i, err)
				return
			}
			if !bytes.Equal(got, payload) {
				errs <- fmt.Errorf("tunnel %d: the bytes came back changed", i)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, bad := range []string{"accept failed", "too many open files"} {
		if strings.Contains(u.log.String(), bad) {
			t.Errorf("proxy log says %q:\n%s", bad, tail(u.log.String(), 20))
		}
	}
}

// TestMaxConnectionsLoweredToBudget checks that a max_connections the
// open-file limit cannot hold, with the splice pipes' pool, is lowered at
// start with a warning naming both figures, and that the lowered limit is
// what holds: each tunnel within it opens.
func TestMaxConnectionsLoweredToBudget(t *testing.T) {
	const nofile, maxConns = 1200, 536
	echo := proxytest.NewEcho(t)
	u := startUnderLimit(t, nofile, maxConns)
	line := fmt.Sprintf(`level=WARN msg="max_connections lowered to what the open-file limit allows" max_connections=%d open_files=%d connections=%d needs_open_files=1238`,
		maxConns, nofile, u.conns)
	if u.conns >= maxConns || !strings.Contains(u.log.String(), line) {
		t.Fatalf("max_connections %d under an open-file limit of %d: connections=%d, want fewer and the line\n%s\nin:\n%s",
			maxConns, nofile, u.conns, line, u.log)
	}
	for i := range u.conns {
		if _, err := u.connect(t, echo.Addr); err != nil {
			t.Fatalf("tunnel %d within the lowered limit of %d: %v", i+1, u.conns, err)
		}
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
