package server

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestListsServed checks lists and audit mode through a running server:
// a deny rule's hosts_url is fetched before the first request is served
// (the first request meets the list, not the stand-in of one not yet
// loaded), refreshed every lists.refresh and swapped in for the requests
// that follow; the same rule on a listener in audit mode lets the
// request through with would_deny in its access log record; the
// rustle_list_* series report the list.
func TestListsServed(t *testing.T) {
	var mu sync.Mutex
	body := "localhost\n"
	lists := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		io.WriteString(w, body)
	}))
	t.Cleanup(lists.Close)
	origin := fmt.Sprintf("127.0.0.1:%d", mixedOrigin(t))
	cfg := reloadConfig(t, func(c *config.Config) {
		c.Listen = append(c.Listen, config.Listener{Name: "audit", Address: "127.0.0.1:0", ACLMode: config.ACLAudit})
		c.Lists.Refresh = config.Duration{Duration: 50 * time.Millisecond}
		c.ACL.Default = "allow"
		c.ACL.Rules = []config.ACLRule{{Name: "blocklist", Action: "deny", Criteria: config.Criteria{HostsURL: lists.URL + "/block.txt"}}}
	})
	m := metrics.New(metrics.Config{})
	var access logBuffer
	_, addrs := startLogged(t, cfg, nil, &access, WithMetrics(m))
	auth := basic("alice", "pw")
	port := origin[strings.LastIndexByte(origin, ':'):]
	blocked, other := "http://localhost"+port+"/ok", "http://127.0.0.1"+port+"/ok"
	if got := status(t, addrs["main"], blocked, auth); got != 403 {
		t.Fatalf("the first request, to a listed host: %d, want 403", got)
	}
	if got := status(t, addrs["main"], other, auth); got != 200 {
		t.Fatalf("a host not listed: %d, want 200", got)
	}
	if got := status(t, addrs["audit"], blocked, auth); got != 200 {
		t.Fatalf("a listed host on the listener in audit mode: %d, want 200", got)
	}
	proxytest.WaitFor(t, "the audited request's record", func() bool {
		return strings.Contains(access.String(), `"target":"`+blocked+`","status":200`) &&
			strings.Contains(access.String(), `"rule":"blocklist","would_deny":"blocklist"`)
	})
	if n := proxytest.Metric(t, m, "rustle_acl_would_deny_total", "listener", "audit", "rule", "blocklist"); n != 1 {
		t.Errorf("rustle_acl_would_deny_total = %v, want 1", n)
	}
	list := lists.URL + "/block.txt"
	if proxytest.Metric(t, m, "rustle_list_loaded", "list", list) != 1 || proxytest.Metric(t, m, "rustle_list_entries", "list", list) != 1 {
		t.Error("rustle_list_loaded or rustle_list_entries do not report the list")
	}

	mu.Lock()
	body = ".elsewhere.example\n"
	mu.Unlock()
	proxytest.WaitFor(t, "the refreshed list in use", func() bool {
		return status(t, addrs["main"], blocked, auth) == 200
	})
}

// TestListFileReload checks a hosts_file across reloads: a reload reads
// it again, and a reload that finds it broken fails and keeps the list
// in use.
func TestListFileReload(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "allow.txt")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("# where the fleet may go\nlocalhost\n")
	origin := fmt.Sprintf(":%d", mixedOrigin(t))
	conf := func() *config.Config {
		return reloadConfig(t, func(c *config.Config) {
			c.ACL.Rules = []config.ACLRule{{Name: "fleet", Action: "allow", Criteria: config.Criteria{HostsFile: file}}}
		})
	}
	s := startReloadable(t, conf())
	addr, auth := addrOf(s, "main"), basic("alice", "pw")
	one, two := "http://localhost"+origin+"/ok", "http://127.0.0.1"+origin+"/ok"
	if a, b := status(t, addr, one, auth), status(t, addr, two, auth); a != 200 || b != 403 {
		t.Fatalf("before the reload: %d %d, want 200 403", a, b)
	}
	write("127.0.0.0/8\n")
	if err := s.Reload(conf()); err != nil {
		t.Fatal(err)
	}
	if a, b := status(t, addr, one, auth), status(t, addr, two, auth); a != 200 || b != 200 {
		t.Errorf("after the reload: %d %d, want 200 200", a, b)
	}
	write(strings.Repeat("not a host name\n", 10))
	err := s.Reload(conf())
	if err == nil || !strings.Contains(err.Error(), "acl.rules[0].hosts_file: "+file+": 10 of 10 lines are not entries") {
		t.Errorf("Reload with a broken list = %v", err)
	}
	if b := status(t, addr, two, auth); b != 200 {
		t.Errorf("after the failed reload: %d, want the list in use to allow it", b)
	}
}

// TestListNotLoadedFailsClosed checks a deny rule whose list URL fails
// when rustle starts: rustle starts, refuses every request the rule's
// other criteria match until the list loads, says why in its log, and
// serves once a retry loads the list.
func TestListNotLoadedFailsClosed(t *testing.T) {
	var mu sync.Mutex
	up := false
	lists := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if !up {
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, ".ads.example\n")
	}))
	t.Cleanup(lists.Close)
	origin := fmt.Sprintf("http://127.0.0.1:%d/ok", mixedOrigin(t))
	cfg := reloadConfig(t, func(c *config.Config) {
		c.Lists.Refresh = config.Duration{Duration: 50 * time.Millisecond}
		c.ACL.Default = "allow"
		c.ACL.Rules = []config.ACLRule{{Name: "ads", Action: "deny", Criteria: config.Criteria{HostsURL: lists.URL + "/ads.txt"}}}
	})
	var logs logBuffer
	var access logBuffer
	_, addrs := startLogged(t, cfg, slog.New(slog.NewTextHandler(&logs, nil)), &access)
	auth := basic("alice", "pw")
	if got := status(t, addrs["main"], origin, auth); got != 403 {
		t.Fatalf("with the list not loaded: %d, want 403", got)
	}
	if l := logs.String(); !strings.Contains(l, "list not loaded") || !strings.Contains(l, "503 Service Unavailable") {
		t.Errorf("log %q does not say the list did not load and why", l)
	}
	mu.Lock()
	up = true
	mu.Unlock()
	proxytest.WaitFor(t, "the list loaded by a retry", func() bool { return status(t, addrs["main"], origin, auth) == 200 })
}
