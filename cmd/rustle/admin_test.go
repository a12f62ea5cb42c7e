//go:build linux

package main

import (
	"bytes"
	"net"
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

// TestAdminRefusesForeignCalls runs rustle with its admin listener on
// loopback, without authentication, and sends it what a browser can be
// made to send: a foreign Host (DNS rebinding) is answered 421, a
// cross-site form post (text/plain, a foreign Origin) 403, a form's
// content type 415, each with a reason and a log line; a call with
// application/json from a client of its own goes through, and /healthz
// answers any Host.
func TestAdminRefusesForeignCalls(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "rustle.toml")
	if err := os.WriteFile(cfgPath, []byte("workers = 1\n[[listen]]\naddress = \"127.0.0.1:0\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"-c", cfgPath, "--admin", "127.0.0.1:0"}, nil, &stdout, &stderr) }()
	t.Cleanup(func() {
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		<-done
	})
	admin := waitFor(t, &stderr, regexp.MustCompile(`msg="admin listening" addr=(\S+)`))[1]
	waitFor(t, &stderr, regexp.MustCompile(`msg="rustle started"`))
	_, port, _ := net.SplitHostPort(admin)
	for _, tc := range []struct {
		name, head string
		method     string
		want       int
		body       string
	}{
		{"foreign Host", "GET /quota?user=bob HTTP/1.1\r\nHost: rebound.example:" + port + "\r\n\r\n", "GET", 421, "Host"},
		{"foreign Host, revoke", "POST /revoke?user=bob HTTP/1.1\r\nHost: rebound.example\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n", "POST", 421, "Host"},
		{"cross-site form post", "POST /revoke?user=bob HTTP/1.1\r\nHost: " + admin + "\r\nOrigin: http://attacker.example\r\n" +
			"Content-Type: text/plain\r\nContent-Length: 1\r\n\r\nx", "POST", 403, "cross-origin"},
		{"cross-site, fetch metadata", "POST /revoke?user=bob HTTP/1.1\r\nHost: " + admin + "\r\nSec-Fetch-Site: cross-site\r\n" +
			"Content-Type: application/json\r\nContent-Length: 0\r\n\r\n", "POST", 403, "cross-origin"},
		{"form content type", "POST /revoke?user=bob HTTP/1.1\r\nHost: " + admin + "\r\n" +
			"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 3\r\n\r\na=b", "POST", 415, "application/json"},
		{"no content type", "POST /revoke?user=bob HTTP/1.1\r\nHost: " + admin + "\r\nContent-Length: 0\r\n\r\n", "POST", 415, "application/json"},
		{"json revoke", "POST /revoke?user=bob HTTP/1.1\r\nHost: " + admin + "\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n", "POST", 200, "revoked 0"},
		{"localhost", "GET /quota?user=bob HTTP/1.1\r\nHost: localhost:" + port + "\r\n\r\n", "GET", 200, `"user":"bob"`},
		{"healthz, any Host", "GET /healthz HTTP/1.1\r\nHost: lb.example\r\n\r\n", "GET", 200, "ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := proxytest.Dial(t, admin)
			defer c.Close()
			c.Write(tc.head)
			r := c.ReadResponse(tc.method)
			if r.Status != tc.want || !strings.Contains(string(r.Body), tc.body) {
				t.Errorf("%d %q, want %d with %q", r.Status, r.Body, tc.want, tc.body)
			}
		})
	}
	for _, reason := range []string{"host", "cross-origin", "content-type"} {
		waitFor(t, &stderr, regexp.MustCompile(`msg="admin request refused" reason=`+reason+` `))
	}
}

// TestCheckAdminOffLoopback checks that rustle check refuses an admin
// listener off loopback without authentication, naming the key and the
// way out, and accepts it with a token file or serving only health and
// metrics; a token file too short is refused too.
func TestCheckAdminOffLoopback(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(token, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.token")
	if err := os.WriteFile(short, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const listen = "[[listen]]\naddress = \"127.0.0.1:3128\"\n"
	for _, tc := range []struct {
		name, src string
		ok        bool
		want      []string
	}{
		{"wildcard, no authentication", "admin = \"0.0.0.0:9090\"\n" + listen, false,
			[]string{"admin", "not on loopback", "admin_access.token_file", "admin_access.htpasswd"}},
		{"all addresses, no authentication", "admin = \":9090\"\n" + listen, false, []string{"admin_access.token_file"}},
		{"loopback", "admin = \"127.0.0.1:9090\"\n" + listen, true, nil},
		{"localhost", "admin = \"localhost:9090\"\n" + listen, true, nil},
		{"wildcard with a token", "admin = \"0.0.0.0:9090\"\n" + listen + "[admin_access]\ntoken_file = \"admin.token\"\n", true, nil},
		{"wildcard, health and metrics only", "admin = \"[::]:9090\"\n" + listen + "[admin_access]\nhealth_and_metrics_only = true\n", true, nil},
		{"short token", "admin = \"0.0.0.0:9090\"\n" + listen + "[admin_access]\ntoken_file = \"short.token\"\n", false,
			[]string{"admin_access.token_file", "at least"}},
		{"missing token file", "admin = \"0.0.0.0:9090\"\n" + listen + "[admin_access]\ntoken_file = \"none.token\"\n", false,
			[]string{"admin_access.token_file", "none.token"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfgPath := filepath.Join(dir, "rustle.toml")
			if err := os.WriteFile(cfgPath, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := check([]string{"-c", cfgPath}, &stdout, &stderr)
			if (code == 0) != tc.ok {
				t.Fatalf("rustle check exit %d, want ok=%v\nstdout %s\nstderr %s", code, tc.ok, stdout.String(), stderr.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("rustle check said %q, want it to name %q", stderr.String(), w)
				}
			}
			if strings.Contains(stderr.String(), "secret") {
				t.Errorf("rustle check showed the token: %q", stderr.String())
			}
		})
	}
}
