//go:build linux

package e2e

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestBrowserPAC starts headless Chromium with no proxy but
// --proxy-pac-url pointing at rustle's /proxy.pac (generated: bypass
// direct.test, the proxy named by the host Chromium fetched the file
// from) and loads a page from each of two origins: proxied.test goes
// through rustle (the origin sees rustle's Via), direct.test, a bypass
// host, goes direct (no Via). Both names lead to loopback origins
// (Chromium's --host-resolver-rules, rustle's [dns] hosts).
func TestBrowserPAC(t *testing.T) {
	tools := needBrowser(t)

	type seen struct {
		mu  sync.Mutex
		via []string // the Via of each request
	}
	origin := func(who string, s *seen) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.mu.Lock()
			s.via = append(s.via, r.Header.Get("Via"))
			s.mu.Unlock()
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<!doctype html><html><body data-state="done"><p id="who">%s</p></body></html>`, who)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	var proxiedSeen, directSeen seen
	proxied, direct := origin("proxied", &proxiedSeen), origin("direct", &directSeen)
	port := func(s *httptest.Server) string { return s.URL[strings.LastIndexByte(s.URL, ':')+1:] }

	cfg := writeFile(t, "rustle.toml", `via = true
allow_private = ["127.0.0.0/8"]

[dns]
resolvers = ["udp://127.0.0.1:9"]
hosts = { "proxied.test" = ["127.0.0.1"] }

[[listen]]
name = "web"
address = "127.0.0.1:0"

[pac]
listeners = ["web"]
bypass = ["direct.test"]
`)
	p := startRustle(t, "-c", cfg)
	p.waitStarted(t)
	proxy := p.addrs[0]

	dir := t.TempDir()
	run := driveRun{
		Name:        "pac",
		UserDataDir: filepath.Join(dir, "profile"),
		Args: []string{
			"--no-sandbox",
			"--disable-gpu",
			"--disable-quic",
			"--no-first-run",
			"--disable-background-networking",
			"--disable-component-update",
			"--disable-sync",
			"--proxy-pac-url=http://" + proxy + "/proxy.pac",
			"--host-resolver-rules=MAP proxied.test 127.0.0.1, MAP direct.test 127.0.0.1, MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
		},
		Pages: []string{
			"http://proxied.test:" + port(proxied) + "/page",
			"http://direct.test:" + port(direct) + "/page",
		},
	}
	events := runDriver(t, tools, run, dir)
	got := map[string]string{}
	for _, ev := range events {
		if ev.Event == "page" {
			if ev.Error != "" || ev.Status != http.StatusOK {
				t.Errorf("%s: status %d, error %q", ev.URL, ev.Status, ev.Error)
			}
			got[ev.URL] = ev.DOM["who"]
		}
	}
	if got[run.Pages[0]] != "proxied" || got[run.Pages[1]] != "direct" {
		t.Fatalf("pages: %v; events: %+v\nrustle's log:\n%s", got, events, p.log)
	}
	proxiedSeen.mu.Lock()
	directSeen.mu.Lock()
	defer proxiedSeen.mu.Unlock()
	defer directSeen.mu.Unlock()
	if len(proxiedSeen.via) == 0 || !strings.Contains(proxiedSeen.via[0], "rustle") {
		t.Errorf("the proxied origin saw Via %q; want rustle's", proxiedSeen.via)
	}
	for _, v := range directSeen.via {
		if v != "" {
			t.Errorf("the bypass origin saw Via %q; it must be reached directly", v)
		}
	}
	if len(directSeen.via) == 0 {
		t.Error("the bypass origin saw no request")
	}
}
