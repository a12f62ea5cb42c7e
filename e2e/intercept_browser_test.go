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
	"slices"
	"strings"
	"sync/atomic"
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
	_, originPort := startTLSOrigin(t, pair, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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

	caDir := rustleFiles(t, "ca")
	certDir := rustleFiles(t, "cert")
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

// TestInterceptChromiumHTTP11Required checks that rustle's
// HTTP_1_1_REQUIRED towards an HTTP/2 client inside an interception
// makes a real browser retry over HTTP/1.1. Headless Chromium, the
// interception CA and the TLS listener's trusted through certutil's NSS
// database, goes through rustle's plain port and its TLS port (where it
// speaks h2 to rustle too, and its tunnels are CONNECT streams), rustle
// intercepting the tunnels to 127.0.0.1:
//
//   - ntlm: it loads a page from a proxytest.NTLMOrigin, whose 401
//     offering NTLM and Negotiate rustle does not hand an HTTP/2 client
//     (its answer would not be bound to the connection that carried the
//     challenge) but resets the stream with HTTP_1_1_REQUIRED;
//   - post: a page's script POSTs to an origin that chooses h2 and resets
//     every stream with HTTP_1_1_REQUIRED (as IIS does), which rustle
//     cannot send again (the body is gone) and so resets Chromium's
//     stream with the same code; over HTTP/1.1 the origin answers 200.
//
// Chromium's net log must show the request sent on an HTTP/2 stream,
// ended by ERR_HTTP_1_1_REQUIRED (once, or more when Chromium takes
// another HTTP/2 tunnel it had opened), then sent over HTTP/1.1 and
// answered (ntlm: the origin's 401 and its body, which headless
// Chromium, with no NTLM credentials and no prompt, does not render: the
// navigation ends with ERR_INVALID_AUTH_CREDENTIALS; post: the script's
// result is in the DOM); its last TLS connection through the tunnel on http/1.1; and the
// access log since a mark an intercepted h2 request for the URL with
// status 0 and reason http-1.1-required for each of those, then the same
// URL over HTTP/1.1 answered.
func TestInterceptChromiumHTTP11Required(t *testing.T) {
	tools := needBrowser(t)
	certutil := proxytest.RequireTool(t, "certutil", "libnss3-tools")

	pki := newOriginPKI(t)
	_, _, pair := pki.leaf(t, "origin")
	ntlm := proxytest.StartNTLMOrigin(t, pair)
	_, ntlmPort, _ := net.SplitHostPort(ntlm.Addr)

	// An origin that resets its HTTP/2 streams, with CORS for the page's
	// origin: one for each run, since rustle speaks HTTP/1.1 alone to it
	// once it has reset a stream.
	var resets atomic.Int32
	startResetting := func() (postURL string) {
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("Access-Control-Allow-Origin", "*")
			w.Header().Set("Cache-Control", "no-store")
			fmt.Fprintf(w, "%s %s body=%s", r.Proto, r.Method, body)
		}))
		srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, NextProtos: []string{"h2", "http/1.1"}}
		srv.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){
			"h2": func(_ *http.Server, c *tls.Conn, _ http.Handler) {
				proxytest.ResetH2Streams(c, func() { resets.Add(1) })
			},
		}
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
		srv.StartTLS()
		t.Cleanup(srv.Close)
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		return "https://127.0.0.1:" + port + "/post"
	}
	// The page whose script POSTs to the URL in its query's post.
	_, pagesPort := startTLSOrigin(t, pair, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html>
<html><head><title>rustle HTTP_1_1_REQUIRED</title><link rel="icon" href="data:,"></head>
<body data-state="loading">
<p id="data">pending</p>
<script>
fetch(%q, {method: 'POST', body: 'a body'}).then(r => r.text().then(t => {
  document.getElementById('data').textContent = r.status + ' ' + t;
  document.body.dataset.state = 'done';
})).catch(e => {
  document.getElementById('data').textContent = 'error ' + e;
  document.body.dataset.state = 'error';
});
</script>
</body></html>
`, r.URL.Query().Get("post"))
	}))

	caDir := rustleFiles(t, "ca")
	certDir := rustleFiles(t, "cert")
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
`, logPath, filepath.Join(caDir, "ca.pem"), filepath.Join(caDir, "ca-key.pem"), pki.caPath))
	httpsListen := fmt.Sprintf("https://127.0.0.1:0?cert=%s&key=%s",
		url.QueryEscape(filepath.Join(certDir, "server.pem")), url.QueryEscape(filepath.Join(certDir, "server.key")))
	p := startRustle(t, "-c", cfg, "-L", httpsListen, "-L", "http://127.0.0.1:0")
	p.waitStarted(t)
	if len(p.addrs) != 2 {
		t.Fatalf("rustle listens on %q, want an https and an http listener", p.addrs)
	}

	type testCase struct {
		name     string
		proxy    string // Chromium's proxy
		page     string // what Chromium loads
		url      string // the request told HTTP_1_1_REQUIRED
		method   string
		steps    []string // in Chromium's net log, for url
		body     string   // what Chromium read for url
		status   int      // of url over HTTP/1.1, in the access log
		data     string   // the page's #data; "": the page is url, not rendered
		h2Resets int32    // streams the resetting origin reset
	}
	var cases []testCase
	for _, proxy := range []struct{ name, url string }{
		{"plain-port", "http://" + p.addrs[1]},
		{"tls-port", "https://" + p.addrs[0]},
	} {
		postURL := startResetting()
		cases = append(cases, testCase{
			name: proxy.name + "/ntlm", proxy: proxy.url,
			page: "https://127.0.0.1:" + ntlmPort + "/ntlm", url: "https://127.0.0.1:" + ntlmPort + "/ntlm", method: "GET",
			steps:  []string{"h2 GET /ntlm", "h2 error ERR_HTTP_1_1_REQUIRED", "GET /ntlm HTTP/1.1", "HTTP/1.1 401 Unauthorized"},
			body:   "401 authenticate with NTLM\n",
			status: http.StatusUnauthorized,
		}, testCase{
			name: proxy.name + "/post", proxy: proxy.url,
			page: "https://127.0.0.1:" + pagesPort + "/page?post=" + url.QueryEscape(postURL), url: postURL, method: "POST",
			steps:    []string{"h2 POST /post", "h2 error ERR_HTTP_1_1_REQUIRED", "POST /post HTTP/1.1", "HTTP/1.1 200 OK"},
			body:     "HTTP/1.1 POST body=a body",
			status:   http.StatusOK,
			data:     "200 HTTP/1.1 POST body=a body",
			h2Resets: 1,
		})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			nssdb := filepath.Join(dir, "home", ".pki", "nssdb")
			if err := os.MkdirAll(nssdb, 0o700); err != nil {
				t.Fatal(err)
			}
			runCertutil(t, certutil, "-N", "-d", "sql:"+nssdb, "--empty-password")
			runCertutil(t, certutil, "-A", "-d", "sql:"+nssdb, "-t", "C,,", "-n", "rustle-intercept", "-i", filepath.Join(caDir, "ca.pem"))
			runCertutil(t, certutil, "-A", "-d", "sql:"+nssdb, "-t", "C,,", "-n", "rustle-listener", "-i", filepath.Join(certDir, "ca.pem"))

			// The mark: the access log's size before Chromium's requests.
			var mark int64
			if fi, err := os.Stat(logPath); err == nil {
				mark = fi.Size()
			}
			resetsBefore := resets.Load()
			netLog := filepath.Join(dir, "netlog.json")
			events := runDriver(t, tools, driveRun{
				Name:        tc.name,
				UserDataDir: filepath.Join(dir, "profile"),
				Proxy:       &driveProxy{Server: tc.proxy, Bypass: bypassHostNames},
				Args: []string{"--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
					"--disable-background-networking", "--disable-component-update", "--disable-sync",
					"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
					"--log-net-log=" + netLog, "--net-log-capture-mode=Everything"},
				Pages: []string{tc.page},
			}, dir)
			if keep := os.Getenv("RUSTLE_E2E_NETLOG_DIR"); keep != "" {
				keepNetLog(t, netLog, filepath.Join(keep, "http11-required-"+strings.ReplaceAll(tc.name, "/", "-")+".json"))
			}

			var page *driveEvent
			for i, ev := range events {
				if ev.Event == "page" && ev.URL == tc.page {
					page = &events[i]
				}
			}
			if page == nil {
				t.Fatalf("no result for %s; events: %+v", tc.page, events)
			}
			if tc.data == "" {
				t.Logf("Chromium's navigation to %s ended with status %d, error %q", tc.page, page.Status, page.Error)
			} else if page.State != "done" || page.DOM["data"] != tc.data {
				t.Errorf("the page: state %q, error %q, #data %q; want done, %q", page.State, page.Error, page.DOM["data"], tc.data)
			}
			// Chromium may send the request on another HTTP/2 connection
			// through rustle before it moves to HTTP/1.1: one its
			// preconnect to the page's origin had opened, and which it
			// took from its pool after the first reset. Each such
			// attempt is told HTTP_1_1_REQUIRED too.
			nr := readNetLogRequest(t, netLog, tc.url)
			steps, attempts := nr.steps, 0
			for len(steps) > len(tc.steps)-2 && slices.Equal(steps[:2], tc.steps[:2]) {
				steps, attempts = steps[2:], attempts+1
			}
			if attempts == 0 || !slices.Equal(steps, tc.steps[2:]) || nr.body != tc.body {
				t.Errorf("Chromium's net log of %s: %q, read %q; want %q (its first two steps once or more), read %q", tc.url, nr.steps, nr.body, tc.steps, tc.body)
			}
			if attempts > 1 {
				t.Logf("Chromium sent %s %d times over HTTP/2 before HTTP/1.1", tc.url, attempts)
			}
			nl := readNetLog(t, netLog)
			t.Logf("Chromium negotiated %q with the proxy, %q through tunnels", nl.proxyALPN, nl.originALPN)
			if len(nl.originALPN) < 2 || !slices.Contains(nl.originALPN, "h2") || nl.originALPN[len(nl.originALPN)-1] != "http/1.1" {
				t.Errorf("Chromium %s negotiated %q on its TLS connections through tunnels, want h2, and http/1.1 last", nl.version, nl.originALPN)
			}
			if n := resets.Load() - resetsBefore; n != tc.h2Resets {
				t.Errorf("the resetting origin reset %d streams, want %d", n, tc.h2Resets)
			}

			// The access log since the mark: url over h2, reset with
			// HTTP_1_1_REQUIRED, then over HTTP/1.1.
			type record struct {
				Method, Target, Protocol, Reason string
				Status                           int
				Intercepted                      bool
			}
			var recs []record
			var b []byte
			defer func() {
				if t.Failed() {
					t.Logf("access log since the mark:\n%s", b)
				}
			}()
			proxytest.WaitFor(t, "the access log's records of "+tc.url+" over h2 and HTTP/1.1", func() bool {
				f, err := os.ReadFile(logPath)
				if err != nil || int64(len(f)) < mark {
					return false
				}
				b = f[mark:]
				recs = recs[:0]
				for line := range strings.Lines(string(b)) {
					if !strings.HasSuffix(line, "\n") {
						break // a record rustle is writing now
					}
					var r record
					if err := json.Unmarshal([]byte(line), &r); err != nil {
						t.Fatalf("access log line %q: %v", line, err)
					}
					if r.Target == tc.url {
						recs = append(recs, r)
					}
				}
				return slices.ContainsFunc(recs, func(r record) bool { return r.Protocol == "http" })
			})
			// As many h2 records as Chromium's attempts, each refused
			// with HTTP_1_1_REQUIRED, then one over HTTP/1.1 answered.
			h1 := slices.IndexFunc(recs, func(r record) bool { return r.Protocol == "http" })
			if h1 != attempts || h1 != len(recs)-1 {
				t.Errorf("the access log has %d records of %s, the HTTP/1.1 one at %d; want %d over h2, then one over HTTP/1.1", len(recs), tc.url, h1, attempts)
			}
			for _, r := range recs[:h1] {
				if r.Protocol != "h2" || r.Status != 0 || r.Reason != "http-1.1-required" || !r.Intercepted || r.Method != tc.method {
					t.Errorf("an h2 request: %+v, want an intercepted %s, status 0, reason http-1.1-required", r, tc.method)
				}
			}
			if r := recs[h1]; r.Status != tc.status || !r.Intercepted || r.Method != tc.method {
				t.Errorf("the HTTP/1.1 request: %+v, want an intercepted %s answered %d", r, tc.method, tc.status)
			}
		})
	}
}
