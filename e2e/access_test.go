//go:build linux

package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPrivateGuard checks the private-destination guard of the built
// binary: on by default (403 for a loopback origin, and the start line
// saying no private range is allowed), lifted by --allow-private and by
// allow_private in the file, and never for the proxy's own address.
func TestPrivateGuard(t *testing.T) {
	o := newOrigin(t, "127.0.0.1", false)
	path := writeFile(t, "rustle.toml", proxyConfig("127.0.0.1:0", "5s", ""))

	t.Run("on by default", func(t *testing.T) {
		p := startGuarded(t, "-c", path)
		p.waitStarted(t)
		resp, body := rawExchange(t, p.addr(), "GET", "GET "+o.URL+"/hello HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "private or local address") {
			t.Errorf("GET of a loopback origin: %s %q", resp.Status, body)
		}
		checkOneLine(t, body)
		resp, _ = rawExchange(t, p.addr(), "CONNECT", "CONNECT localhost:"+o.URL[strings.LastIndex(o.URL, ":")+1:]+" HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("CONNECT to a name resolving to loopback: %s", resp.Status)
		}
		if n := o.conns.Load(); n != 0 {
			t.Errorf("the origin accepted %d connections", n)
		}
		if !strings.Contains(p.log.String(), `msg="private-destination guard on" allowed_private=none`) {
			t.Errorf("no start line saying which private ranges are allowed:\n%s", p.log)
		}
	})
	t.Run("--allow-private", func(t *testing.T) {
		p := startGuarded(t, "-c", path, "--allow-private", "127.0.0.1/32")
		p.waitStarted(t)
		resp, body := rawExchange(t, p.addr(), "GET", "GET "+o.URL+"/hello HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != http.StatusOK || body != "hello from origin\n" {
			t.Errorf("GET of an allowed loopback origin: %s %q", resp.Status, body)
		}
		resp, body = rawExchange(t, p.addr(), "GET", "GET http://"+p.addr()+"/ HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "is this proxy") {
			t.Errorf("GET of the proxy's own address: %s %q", resp.Status, body)
		}
		if !strings.Contains(p.log.String(), "allowed_private=127.0.0.1/32") {
			t.Errorf("the start line does not name the allowed range:\n%s", p.log)
		}
	})
	t.Run("bad --allow-private", func(t *testing.T) {
		r := runCmd(t, "", rustleBin, "-c", path, "--allow-private", "localhost")
		if r.code != 2 || !strings.Contains(r.stderr, "localhost") {
			t.Errorf("--allow-private localhost: exit %d, stderr %q", r.code, r.stderr)
		}
	})
	t.Run("allow_private in the file", func(t *testing.T) {
		file := writeFile(t, "rustle.toml", "allow_private = [\"127.0.0.0/8\"]\n"+proxyConfig("127.0.0.1:0", "5s", ""))
		p := startGuarded(t, "-c", file)
		p.waitStarted(t)
		resp, _ := rawExchange(t, p.addr(), "GET", "GET "+o.URL+"/hello HTTP/1.1\r\nHost: x\r\n\r\n")
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET with allow_private in the file: %s", resp.Status)
		}
	})
}

// TestACL checks rules from the file: a deny rule answered 403 without
// naming the rule, the rule named in the debug log, and a rule's
// allow_private letting its requests through the guard.
func TestACL(t *testing.T) {
	o := newOrigin(t, "127.0.0.1", false)
	cfg := strings.Replace(proxyConfig("127.0.0.1:0", "5s", `
[acl]
default = "deny"

[acl.groups]
staff = ["alice"]

[[acl.rules]]
name = "secret-no-blob"
action = "deny"
methods = ["POST"]

[[acl.rules]]
name = "staff-local"
action = "allow"
groups = ["staff"]
allow_private = ["127.0.0.1/32"]
`+inlineUser("alice", "pw")+inlineUser("bob", "pw")), `level = "info"`, `level = "debug"`, 1)
	p := startGuarded(t, "-c", writeFile(t, "rustle.toml", cfg))
	p.waitStarted(t)
	for _, tt := range []struct {
		user, method string
		status       int
	}{
		{"alice", "GET", 200},
		{"alice", "POST", 403}, // the deny rule comes first
		{"bob", "GET", 403},    // no rule matches: the default
	} {
		req := tt.method + " " + o.URL + "/hello HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n" + basicAuth(tt.user, "pw") + "\r\n"
		resp, body := rawExchange(t, p.addr(), tt.method, req)
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s: %s %q, want %d", tt.user, tt.method, resp.Status, body, tt.status)
		}
		if strings.Contains(body, "secret") {
			t.Errorf("the answer names the rule: %q", body)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for !(strings.Contains(p.log.String(), "rule=secret-no-blob") && strings.Contains(p.log.String(), "rule=default")) &&
		time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(p.log.String(), "rule=secret-no-blob") || !strings.Contains(p.log.String(), "rule=default") {
		t.Errorf("the debug log does not name the deciding rules:\n%s", p.log)
	}
}

// TestAuthFailureCooldown checks the cool-downs and the fail2ban
// contract: after limits.auth_failures wrong passwords a user name gets
// 429 with Retry-After at the address, logged on a line of its own that
// a fail2ban filter for the address does not match; after
// limits.auth_failures_per_address failures as any names the address
// does, with the one line the filter matches.
func TestAuthFailureCooldown(t *testing.T) {
	o := newOrigin(t, "127.0.0.1", false)
	p := startProxy(t, "127.0.0.1:0", inlineUser("alice", "pw")+
		"\n[limits]\nauth_failures = 3\nauth_failures_per_address = 5\nauth_cooldown = \"10m\"\n")
	get := func(user, pass string) *http.Response {
		resp, _ := rawExchange(t, p.addr(), "GET", "GET "+o.URL+"/hello HTTP/1.1\r\nHost: x\r\n"+basicAuth(user, pass)+"\r\n")
		return resp
	}
	// waitLine waits for line and checks it is in the log n times.
	waitLine := func(line string, n int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for n > 0 && !strings.Contains(p.log.String(), line) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := strings.Count(p.log.String(), line); got != n {
			t.Errorf("%d lines %q in the log, want %d:\n%s", got, line, n, p.log)
		}
	}
	for i := range 2 {
		if resp := get("alice", "wrong"); resp.StatusCode != http.StatusProxyAuthRequired {
			t.Fatalf("wrong password %d: %s", i+1, resp.Status)
		}
	}
	if resp := get("alice", "wrong"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "600" {
		t.Fatalf("third wrong password: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	if resp := get("alice", "pw"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("right password while cooling down: %s", resp.Status)
	}
	waitLine(`level=WARN msg="auth failures of one user name" client=127.0.0.1 user=alice failures=3 window=1m0s cooldown=10m0s`, 1)
	const fail2ban = `level=WARN msg="auth failures" client=127.0.0.1 failures=5 window=1m0s cooldown=10m0s`
	waitLine(`msg="auth failures" `, 0)
	if resp := get("carol", "x"); resp.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("carol: %s", resp.Status)
	}
	if resp := get("dave", "x"); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "600" {
		t.Fatalf("the address's fifth failure: %s, Retry-After %q", resp.Status, resp.Header.Get("Retry-After"))
	}
	waitLine(fail2ban, 1)
}
