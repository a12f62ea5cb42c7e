//go:build linux

package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/leaktest"
	"github.com/rustle-proxy/rustle/internal/server"
)

// TestMain fails the run when an access log writer or an admin server
// outlives the tests.
func TestMain(m *testing.M) {
	os.Exit(leaktest.Main(m, 5*time.Second, "internal/accesslog.", "internal/admin."))
}

// syncBuffer is a bytes.Buffer written and read from different
// goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitFor waits until re matches what b holds and returns the submatches.
func waitFor(t *testing.T, b *syncBuffer, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if m := re.FindStringSubmatch(b.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q in the log:\n%s", re, b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// fakeSystemd listens on a unixgram socket in a temporary directory and
// points NOTIFY_SOCKET at it.
func fakeSystemd(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return c
}

// notification reads the next datagram sent to the fake systemd.
func notification(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(15 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestRunOps runs rustle in-process with an admin listener, an access log
// file and a fake systemd, and walks through its life: READY, the admin
// endpoints, SIGUSR1 reopening the log after a rename, then SIGTERM with
// STOPPING and exit status 0.
func TestRunOps(t *testing.T) {
	notify := fakeSystemd(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "rustle.toml")
	logPath := filepath.Join(dir, "access.log")
	src := "workers = 1\n[access_log]\nenabled = true\nformat = \"json\"\npath = \"access.log\"\n" +
		"[[listen]]\naddress = \"127.0.0.1:0\"\n"
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"-c", cfgPath, "--admin", "127.0.0.1:0"}, nil, &stdout, &stderr) }()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			syscall.Kill(os.Getpid(), syscall.SIGTERM)
			<-done
		}
	})

	if got := notification(t, notify); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	if got := notification(t, notify); !regexp.MustCompile(`^STATUS=serving http 127\.0\.0\.1:\d+$`).MatchString(got) {
		t.Errorf("status %q, want STATUS=serving http 127.0.0.1:PORT", got)
	}
	admin := waitFor(t, &stderr, regexp.MustCompile(`msg="admin listening" addr=(\S+)`))[1]
	base := "http://" + admin
	if code, body := httpGet(t, base+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %q after READY, want 200", code, body)
	}
	if code, _ := httpGet(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d, want 200", code)
	}
	code, body := httpGet(t, base+"/metrics")
	for _, want := range []string{"rustle_build_info{", "rustle_tunnels_open 0", "rustle_upstream_pool_hits_total 0",
		"rustle_access_log_dropped_total 0", "go_goroutines "} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/metrics = %d without %q", code, want)
		}
	}

	if _, err := os.Stat(logPath); err != nil {
		t.Fatalf("access log file not created: %v", err)
	}
	if err := os.Rename(logPath, logPath+".1"); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(os.Getpid(), syscall.SIGUSR1)
	waitFor(t, &stderr, regexp.MustCompile(`msg="access log reopened"`))
	if _, err := os.Stat(logPath); err != nil {
		t.Errorf("no new access log file after SIGUSR1: %v", err)
	}

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	if got := notification(t, notify); got != "STOPPING=1" {
		t.Errorf("notification after SIGTERM %q, want STOPPING=1", got)
	}
	select {
	case code := <-done:
		stopped = true
		if code != 0 {
			t.Errorf("exit status %d, want 0\n%s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("rustle did not stop after SIGTERM:\n%s", stderr.String())
	}
	if c, err := net.DialTimeout("tcp", admin, time.Second); err == nil {
		c.Close()
		t.Errorf("the admin listener still accepts after exit")
	}
}

// TestOpsReadiness checks /readyz through a start and a drain: 503 until
// started, 200 while serving, 503 from the start of the drain.
func TestOpsReadiness(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	cfg := config.Default()
	cfg.Admin = "127.0.0.1:0"
	cfg.SetDefaults()
	o, err := startOps(cfg, slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.close(context.Background()) })
	url := "http://" + o.admin.Addr().String() + "/readyz"
	for _, step := range []struct {
		name string
		do   func()
		want int
	}{
		{"starting", func() {}, 503},
		{"started", func() { o.started(nil) }, 200},
		{"draining", o.stopping, 503},
	} {
		step.do()
		if code, _ := httpGet(t, url); code != step.want {
			t.Errorf("%s: /readyz = %d, want %d", step.name, code, step.want)
		}
	}
}

// TestStartOpsErrors checks that a bad access log path or a used admin
// address fails the start and leaves nothing running.
func TestStartOpsErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	for _, tt := range []struct {
		name   string
		modify func(c *config.Config)
		want   string
	}{
		{"access log in a missing directory", func(c *config.Config) {
			c.AccessLog = config.AccessLog{Enabled: true, Path: filepath.Join(dir, "no", "access.log")}
		}, "no such file"},
		{"admin address in use", func(c *config.Config) {
			c.AccessLog = config.AccessLog{Enabled: true, Path: filepath.Join(dir, "access.log")}
			c.Admin = ln.Addr().String()
		}, ln.Addr().String()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			tt.modify(cfg)
			cfg.SetDefaults()
			_, err := startOps(cfg, slog.New(slog.DiscardHandler), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("startOps = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestAdminFlag(t *testing.T) {
	dir := t.TempDir()
	withAdmin := filepath.Join(dir, "admin.toml")
	if err := os.WriteFile(withAdmin, []byte("admin = \"127.0.0.1:9090\"\n[[listen]]\nname = \"main\"\naddress = \"127.0.0.1:0\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		file    string
		flag    *optionalString
		want    string
		wantErr string
	}{
		{"no flag, no key", "", nil, "", ""},
		{"flag", "", &optionalString{set: true, v: "127.0.0.1:9091"}, "127.0.0.1:9091", ""},
		{"file", withAdmin, &optionalString{}, "127.0.0.1:9090", ""},
		{"flag overrides file", withAdmin, &optionalString{set: true, v: "[::1]:9092"}, "[::1]:9092", ""},
		{"empty flag turns it off", withAdmin, &optionalString{set: true, v: ""}, "", ""},
		{"bad flag", "", &optionalString{set: true, v: "localhost"}, "", "admin"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := loadConfig(tt.file, []string{"http://127.0.0.1:0"}, "", tt.flag)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("loadConfig = %v, want an error about %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Admin != tt.want {
				t.Errorf("admin = %q, want %q", cfg.Admin, tt.want)
			}
		})
	}
}

// TestNotifyFailureLogged checks that a broken NOTIFY_SOCKET is logged,
// not fatal.
func TestNotifyFailureLogged(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "missing.sock"))
	var logs syncBuffer
	o := &ops{log: slog.New(slog.NewTextHandler(&logs, nil))}
	o.started([]server.Addr{{Protocol: "http", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}}})
	if !o.ready.Load() {
		t.Errorf("not ready after started")
	}
	if !strings.Contains(logs.String(), "systemd notification failed") {
		t.Errorf("a failed notification was not logged:\n%s", logs.String())
	}
}

// TestRunReload runs rustle in-process and reloads it with SIGHUP: a new
// password and a second listener take effect, with --allow-private kept
// from the command line; then a config that does not parse is refused,
// logged in one line, and the previous one keeps serving. Each reload is
// bracketed by RELOADING and READY notifications.
func TestRunReload(t *testing.T) {
	notify := fakeSystemd(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "origin "+r.URL.Path)
	}))
	defer origin.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "rustle.toml")
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const listen = "[[listen]]\nname = \"main\"\naddress = \"127.0.0.1:0\"\n"
	write("workers = 1\n[auth]\nusers = [{ name = \"alice\", password = \"old\" }]\n" + listen)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"-c", cfgPath, "--allow-private", "127.0.0.0/8"}, nil, &stdout, &stderr)
	}()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			syscall.Kill(os.Getpid(), syscall.SIGTERM)
			<-done
		}
	})
	if got := notification(t, notify); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	notification(t, notify) // STATUS=serving ...
	addr := waitFor(t, &stderr, regexp.MustCompile(`msg=listening listener=main protocol=http addr=(\S+)`))[1]
	get := func(proxy, pass string) int {
		t.Helper()
		u := &url.URL{Scheme: "http", User: url.UserPassword("alice", pass), Host: proxy}
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true}}
		resp, err := c.Get(origin.URL + "/x")
		if err != nil {
			t.Fatalf("GET through %s: %v", proxy, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := get(addr, "old"); got != 200 {
		t.Fatalf("before the reload: %d", got)
	}
	reload := func() {
		t.Helper()
		syscall.Kill(os.Getpid(), syscall.SIGHUP)
		if got := notification(t, notify); !strings.HasPrefix(got, "RELOADING=1") {
			t.Errorf("notification after SIGHUP %q, want RELOADING=1", got)
		}
		if got := notification(t, notify); got != "READY=1" {
			t.Errorf("notification after the reload %q, want READY=1", got)
		}
	}

	write("workers = 1\n[auth]\nusers = [{ name = \"alice\", password = \"new\" }]\n" + listen +
		"[[listen]]\nname = \"extra\"\naddress = \"127.0.0.1:0\"\n")
	reload()
	waitFor(t, &stderr, regexp.MustCompile(`msg="configuration reloaded"`))
	extra := waitFor(t, &stderr, regexp.MustCompile(`msg=listening listener=extra protocol=http addr=(\S+)`))[1]
	for _, tc := range []struct {
		proxy, pass string
		want        int
	}{{addr, "old", 407}, {addr, "new", 200}, {extra, "new", 200}} {
		if got := get(tc.proxy, tc.pass); got != tc.want {
			t.Errorf("through %s with password %s: %d, want %d", tc.proxy, tc.pass, got, tc.want)
		}
	}

	write("workers = 1\n[auth\n")
	reload()
	line := waitFor(t, &stderr, regexp.MustCompile(`(?m)^.*msg="reload refused; the running configuration stays".*$`))[0]
	if !strings.Contains(line, "rustle.toml") {
		t.Errorf("refusal does not name the file: %s", line)
	}
	if got := get(addr, "new"); got != 200 {
		t.Errorf("after a refused reload: %d, want 200", got)
	}

	syscall.Kill(os.Getpid(), syscall.SIGTERM)
	select {
	case code := <-done:
		stopped = true
		if code != 0 {
			t.Errorf("exit status %d, want 0\n%s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("rustle did not stop after SIGTERM:\n%s", stderr.String())
	}
}

// TestForwardFlag checks -F: a parent F and a catch-all route through
// it; a bad URL and a loop to rustle's own -L listener are refused
// without the password.
func TestForwardFlag(t *testing.T) {
	cfg, err := loadConfig("", []string{"http://127.0.0.1:3128"}, "socks5h://u:secret@127.0.0.1:1080", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Parents) != 1 || cfg.Parents[0].Name != "F" || len(cfg.Routes) != 1 || cfg.Routes[0].Via[0] != "F" {
		t.Errorf("-F gave parents %+v, routes %+v", cfg.Parents, cfg.Routes)
	}
	for _, bad := range []string{"gopher://u:secret@127.0.0.1:1", "http://u:secret@127.0.0.1:3128"} {
		_, err := loadConfig("", []string{"http://127.0.0.1:3128"}, bad, nil)
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("-F %s: %v", bad, err)
		}
	}
}

// TestOpsReadyRequiresParents runs rustle with ready_requires_parents and
// a route through one parent, probed: /readyz answers 503 once the probe
// finds the parent dead, and 200 again once a parent listens at its
// address and the probe brings it back.
func TestOpsReadyRequiresParents(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	parent := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "rustle.toml")
	src := "workers = 1\nready_requires_parents = true\n" +
		"[[listen]]\naddress = \"127.0.0.1:0\"\n" +
		"[[parents]]\nname = \"up\"\nurl = \"http://" + parent + "\"\nmax_fails = 1\nprobe_interval = \"50ms\"\n" +
		"[[routes]]\nvia = \"up\"\n"
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"-c", cfgPath, "--admin", "127.0.0.1:0"}, nil, &stdout, &stderr) }()
	t.Cleanup(func() {
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		<-done
	})
	url := "http://" + waitFor(t, &stderr, regexp.MustCompile(`msg="admin listening" addr=(\S+)`))[1] + "/readyz"
	readyz := func(want int) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			code, _ := httpGet(t, url)
			if code == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("/readyz = %d, want %d\n%s", code, want, stderr.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	readyz(503) // the probe found nothing at the parent's address
	pl, err := net.Listen("tcp4", parent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pl.Close() })
	go func() {
		for {
			c, err := pl.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	readyz(200) // the probe brought it back
}
