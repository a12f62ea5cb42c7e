//go:build linux

package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestAdminNotAProxyDestination runs rustle with its admin listener on
// loopback and allow_private = 127.0.0.0/8 (the quick start for local
// origins): a proxy client's CONNECT and GET to the admin address
// (POST /revoke, GET /quota) are refused 403 with the reason, before and
// after a reload that opens another listener, while a local origin is
// still reached.
func TestAdminNotAProxyDestination(t *testing.T) {
	notify := fakeSystemd(t)
	origin := proxytest.NewOrigin(t, proxytest.Respond(200, "origin"))
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "rustle.toml")
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const base = "workers = 1\nallow_private = [\"127.0.0.0/8\"]\n[[listen]]\nname = \"main\"\naddress = \"127.0.0.1:0\"\n"
	write(base)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"-c", cfgPath, "--admin", "127.0.0.1:0"}, nil, &stdout, &stderr) }()
	t.Cleanup(func() {
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Errorf("rustle did not stop after SIGTERM")
		}
	})
	if got := notification(t, notify); got != "READY=1" {
		t.Fatalf("first notification %q, want READY=1", got)
	}
	notification(t, notify) // STATUS=serving ...
	admin := waitFor(t, &stderr, regexp.MustCompile(`msg="admin listening" addr=(\S+)`))[1]
	proxy := waitFor(t, &stderr, regexp.MustCompile(`msg=listening listener=main protocol=http addr=(\S+)`))[1]
	try := func(proxy string) {
		t.Helper()
		if r := askProxy(t, proxy, "GET http://"+origin.Addr+"/ HTTP/1.1\r\nHost: "+origin.Addr+"\r\n\r\n", "GET"); r.Status != 200 {
			t.Errorf("through %s, GET of a local origin: %d %q", proxy, r.Status, r.Body)
		}
		for _, req := range []struct{ method, head string }{
			{"CONNECT", "CONNECT " + admin + " HTTP/1.1\r\nHost: " + admin + "\r\n\r\n"},
			{"GET", "GET http://" + admin + "/quota?user=bob HTTP/1.1\r\nHost: " + admin + "\r\n\r\n"},
			{"POST", "POST http://" + admin + "/revoke?user=bob HTTP/1.1\r\nHost: " + admin +
				"\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n"},
		} {
			r := askProxy(t, proxy, req.head, req.method)
			if r.Status != 403 || !strings.Contains(string(r.Body), "is this proxy") {
				t.Errorf("through %s, %s to the admin listener %s: %d %q, want 403 naming it", proxy, req.method, admin, r.Status, r.Body)
			}
		}
	}
	try(proxy)

	write(base + "[[listen]]\nname = \"extra\"\naddress = \"127.0.0.1:0\"\n")
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	waitFor(t, &stderr, regexp.MustCompile(`msg="configuration reloaded"`))
	extra := waitFor(t, &stderr, regexp.MustCompile(`msg=listening listener=extra protocol=http addr=(\S+)`))[1]
	try(proxy)
	try(extra)
}

// askProxy sends head on a fresh connection to the proxy at proxy and
// returns the answer to method.
func askProxy(t *testing.T, proxy, head, method string) *proxytest.Response {
	t.Helper()
	c := proxytest.Dial(t, proxy)
	defer c.Close()
	c.Write(head)
	return c.ReadResponse(method)
}
