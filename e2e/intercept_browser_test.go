//go:build linux

package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestInterceptChromium loads a page and a fetch from a TLS origin at
// 127.0.0.1 in headless Chromium through rustle's plain and TLS ports,
// rustle intercepting the tunnel, with no certificate error ignored:
// Chromium trusts rustle's interception CA, and the https listener's
// certificate, only through the NSS database that certutil
// (libnss3-tools) made in its HOME. The page must be the origin's answer
// to requests carrying the rule's Authorization, which Chromium never
// had, over a [[header_rules]] entry's (which applies inside, its
// X-Team arriving too), and the access log must hold both requests as intercepted https
// URLs, without the token.
func TestInterceptChromium(t *testing.T) {
	tools := needBrowser(t)
	certutil := proxytest.RequireTool(t, "certutil", "libnss3-tools")

	pki := newOriginPKI(t)
	_, _, pair := pki.leaf(t, "origin")
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		switch r.URL.Path {
		case "/page":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprintf(w, `<!doctype html>
<html><head><title>rustle intercept</title><link rel="icon" href="data:,"></head>
<body data-state="loading">
<p id="page">page auth=%s team=%s</p>
<p id="data">pending</p>
<script>
fetch('/data').then(r => r.text()).then(t => {
  document.getElementById('data').textContent = t;
  document.body.dataset.state = 'done';
}).catch(e => {
  document.getElementById('data').textContent = 'error ' + e;
  document.body.dataset.state = 'error';
});
</script>
</body></html>
`, r.Header.Get("Authorization"), r.Header.Get("X-Team"))
		case "/data":
			fmt.Fprintf(w, "data auth=%s team=%s", r.Header.Get("Authorization"), r.Header.Get("X-Team"))
		default:
			http.NotFound(w, r)
		}
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	srv.EnableHTTP2 = true
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, originPort, _ := net.SplitHostPort(srv.Listener.Addr().String())

	caDir := filepath.Join(t.TempDir(), "ca")
	if r := runRustle(t, "", "ca", caDir); r.code != 0 {
		t.Fatalf("rustle ca: exit %d: %s", r.code, r.stderr)
	}
	certDir := t.TempDir()
	if r := runRustle(t, "", "cert", certDir); r.code != 0 {
		t.Fatalf("rustle cert: exit %d: %s", r.code, r.stderr)
	}
	token := writeFile(t, "token", "chromium-s3cret\n")
	logPath := filepath.Join(t.TempDir(), "access.log")
	cfg := writeFile(t, "rustle.toml", fmt.Sprintf(`[access_log]
enabled = true
format = "json"
path = %q

[intercept]
ca_cert = %q
ca_key = %q
upstream_ca = %q

[[intercept.rules]]
hosts = ["127.0.0.1"]
request_headers = { set = { Authorization = "Bearer {file:%s}" } }

[[header_rules]]
protocols = ["https"]
request_headers = { set = { Authorization = "Bearer entry", X-Team = "e2e" } }
`, logPath, filepath.Join(caDir, "ca.pem"), filepath.Join(caDir, "ca-key.pem"), pki.caPath, token))
	httpsListen := fmt.Sprintf("https://127.0.0.1:0?cert=%s&key=%s",
		url.QueryEscape(filepath.Join(certDir, "server.pem")), url.QueryEscape(filepath.Join(certDir, "server.key")))
	p := startRustle(t, "-c", cfg, "-L", httpsListen, "-L", "http://127.0.0.1:0")
	p.waitStarted(t)
	if len(p.addrs) != 2 {
		t.Fatalf("rustle listens on %q, want an https and an http listener", p.addrs)
	}

	pageURL := "https://127.0.0.1:" + originPort + "/page"
	want := map[string]string{"page": "page auth=Bearer chromium-s3cret team=e2e", "data": "data auth=Bearer chromium-s3cret team=e2e"}
	for _, tc := range []struct{ name, proxy string }{
		{"tls-port", "https://" + p.addrs[0]},
		{"plain-port", "http://" + p.addrs[1]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			nssdb := filepath.Join(dir, "home", ".pki", "nssdb")
			if err := os.MkdirAll(nssdb, 0o700); err != nil {
				t.Fatal(err)
			}
			runCertutil(t, certutil, "-N", "-d", "sql:"+nssdb, "--empty-password")
			runCertutil(t, certutil, "-A", "-d", "sql:"+nssdb, "-t", "C,,", "-n", "rustle-intercept", "-i", filepath.Join(caDir, "ca.pem"))
			runCertutil(t, certutil, "-A", "-d", "sql:"+nssdb, "-t", "C,,", "-n", "rustle-listener", "-i", filepath.Join(certDir, "ca.pem"))
			run := driveRun{
				Name:        tc.name,
				UserDataDir: filepath.Join(dir, "profile"),
				Proxy:       &driveProxy{Server: tc.proxy, Bypass: bypassHostNames},
				Args: []string{"--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
					"--disable-background-networking", "--disable-component-update", "--disable-sync",
					"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"},
				Pages: []string{pageURL},
			}
			var page *driveEvent
			events := runDriver(t, tools, run, dir)
			for i, ev := range events {
				if ev.Event == "page" && ev.URL == pageURL {
					page = &events[i]
				}
			}
			if page == nil {
				t.Fatalf("no result for %s; events: %+v", pageURL, events)
			}
			if page.Error != "" || page.State != "done" || page.Status != http.StatusOK {
				t.Fatalf("status %d, state %q, error %q, dom %q", page.Status, page.State, page.Error, page.DOM)
			}
			for id, w := range want {
				if got := page.DOM[id]; got != w {
					t.Errorf("#%s = %q, want %q", id, got, w)
				}
			}
		})
	}

	// Each run's two requests, intercepted and logged as https URLs.
	type record struct {
		Method, Target string
		Status         int
		Intercepted    bool
	}
	var b []byte
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ = os.ReadFile(logPath)
		count := map[string]int{}
		for line := range strings.Lines(string(b)) {
			var r record
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("access log line %q: %v", line, err)
			}
			if r.Method == "GET" && r.Intercepted && r.Status == 200 {
				count[r.Target]++
			}
		}
		if count[pageURL] == 2 && count["https://127.0.0.1:"+originPort+"/data"] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the access log lacks each run's page and fetch, intercepted:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if strings.Contains(string(b), "chromium-s3cret") {
		t.Error("the access log shows the injected token")
	}
}

// runCertutil runs NSS's certutil with args, failing the test when it
// fails.
func runCertutil(t testing.TB, certutil string, args ...string) {
	t.Helper()
	if r := runCmd(t, "", certutil, args...); r.code != 0 {
		t.Fatalf("certutil %s: exit %d: %s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
}
