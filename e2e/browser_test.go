//go:build linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/google/go-cmp/cmp"
)

// The browser test drives Debian's Chromium with the npm package
// playwright-core (pinned in browser/package-lock.json); see
// browser/drive.mjs for the protocol between the two.
const (
	// defaultChromium is Debian's chromium launcher; RUSTLE_E2E_CHROMIUM
	// overrides it.
	defaultChromium = "/usr/bin/chromium"
	// minNodeMajor is the oldest Node.js the pinned playwright-core runs
	// on. 1.61 is the last release for Node.js 18, Debian bookworm's; it
	// drives Chromium 156 fine (checked with Node.js 18.20 and 20.20).
	minNodeMajor = 18

	browserUser = "chromium"
	browserPass = "pw-4f9c2e"
)

// TestBrowser loads pages from local origins in headless Chromium through
// rustle's https and http listeners, both with Basic auth that Playwright
// answers after the 407: a plain page with a script and a fetch
// (absolute-form requests), the same page from a TLS origin (CONNECT),
// and a page exchanging WebSocket messages with a ws:// origin. It checks
// what the pages wrote into their DOM, that every connection an origin
// accepted came from rustle's process and carried no proxy credentials,
// and, from Chromium's net log, that Chromium connected to nothing but
// the proxy and which ALPN protocol it spoke to the https listener.
func TestBrowser(t *testing.T) {
	tools := needBrowser(t)

	certDir := rustleFiles(t, "cert")
	serverPEM := filepath.Join(certDir, "server.pem")
	httpsListen := fmt.Sprintf("https://%s:%s@127.0.0.1:0?cert=%s&key=%s", browserUser, browserPass,
		url.QueryEscape(serverPEM), url.QueryEscape(filepath.Join(certDir, "server.key")))
	httpListen := fmt.Sprintf("http://%s:%s@127.0.0.1:0", browserUser, browserPass)
	// via = true lets the plain origins tell forwarded requests from
	// direct ones; it is the only thing the file adds to the -L listeners.
	cfg := writeFile(t, "rustle.toml", "via = true\n\n[log]\nlevel = \"info\"\n")
	p := startRustle(t, "-c", cfg, "-L", httpsListen, "-L", httpListen)
	p.waitStarted(t)
	if len(p.addrs) != 2 {
		t.Fatalf("rustle listens on %q, want an https and an http listener", p.addrs)
	}
	httpsProxy, httpProxy := p.addrs[0], p.addrs[1]

	proxyCert := readCertPEM(t, serverPEM)
	caPool := x509.NewCertPool()
	caPool.AddCert(readCertPEM(t, filepath.Join(certDir, "ca.pem")))
	// What rustle negotiates with a client offering both: Chromium offers
	// h2 and http/1.1 too, so it must end up with the same. Once rustle
	// offers h2 this becomes "h2" and the test checks Chromium's HTTP/2
	// to the proxy with no change here.
	offered := negotiatedALPN(t, httpsProxy, caPool, []string{"h2", "http/1.1"})

	site := newBrowserSite(t, p.pid())
	// Chromium trusts exactly two keys beyond its roots: rustle's and the
	// TLS origin's. ignoreHTTPSErrors would not do for the proxy: it only
	// covers page loads, and a proxy with an untrusted certificate fails
	// with net::ERR_PROXY_CERTIFICATE_INVALID.
	spkiList := spkiHash(proxyCert) + "," + spkiHash(site.secure.Certificate())

	pages := []struct {
		name string
		url  string
		want map[string]string // element id -> text
	}{
		{
			name: "http page, absolute-form",
			url:  site.plain.URL + "/page",
			want: map[string]string{"scheme": "http", "sub": "script " + site.nonce, "data": "data " + site.nonce + " tls=false"},
		},
		{
			name: "https page, CONNECT",
			url:  site.secure.URL + "/page",
			want: map[string]string{"scheme": "https", "sub": "script " + site.nonce, "data": "data " + site.nonce + " tls=true"},
		},
		{
			name: "websocket page",
			url:  site.plain.URL + "/ws-page",
			want: map[string]string{
				"text":   "echo: hello " + site.nonce,
				"binary": "echo bytes: 1,2,3,255",
				"closed": "closed 1000 clean=true",
				"error":  "",
			},
		},
	}

	for _, tc := range []struct {
		name  string
		proxy string // proxy URL Chromium is given
		addr  string
		alpn  string // ALPN protocol Chromium must speak to the proxy; "" for plain http
	}{
		{name: "https-proxy", proxy: "https://" + httpsProxy, addr: httpsProxy, alpn: offered},
		{name: "http-proxy", proxy: "http://" + httpProxy, addr: httpProxy},
	} {
		t.Run(tc.name, func(t *testing.T) {
			site.takeSeen() // forget what an earlier run left
			dir := t.TempDir()
			netLog := filepath.Join(dir, "netlog.json")
			run := driveRun{
				Name:        tc.name,
				UserDataDir: filepath.Join(dir, "profile"),
				Proxy: &driveProxy{
					Server:   tc.proxy,
					Username: browserUser,
					Password: browserPass,
					Bypass:   bypassHostNames,
				},
				Args: []string{
					"--no-sandbox",
					"--disable-gpu",
					"--disable-quic",
					"--no-first-run",
					"--disable-background-networking",
					"--disable-component-update",
					"--disable-sync",
					"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
					"--ignore-certificate-errors-spki-list=" + spkiList,
					"--log-net-log=" + netLog,
					"--net-log-capture-mode=Default",
				},
			}
			for _, pg := range pages {
				run.Pages = append(run.Pages, pg.url)
			}
			start := time.Now()
			events := runDriver(t, tools, run, dir)
			t.Logf("Chromium through %s: %d pages in %v", tc.proxy, len(pages), time.Since(start).Round(time.Millisecond))

			var launched *driveEvent
			got := map[string]driveEvent{}
			for i, ev := range events {
				switch ev.Event {
				case "launched":
					launched = &events[i]
				case "page":
					got[ev.URL] = ev
				}
			}
			if launched == nil {
				t.Fatalf("the driver never launched Chromium; events: %+v", events)
			}
			for _, want := range []string{
				"--proxy-server=" + tc.proxy,
				"--proxy-bypass-list=" + strings.ReplaceAll(bypassHostNames, ",", ";"),
				"--user-data-dir=" + run.UserDataDir,
				"--no-sandbox",
				"--headless",
			} {
				if !slices.Contains(launched.Cmdline, want) {
					t.Errorf("Chromium's command line lacks %q: %q", want, launched.Cmdline)
				}
			}
			for _, pg := range pages {
				ev, ok := got[pg.url]
				if !ok {
					t.Errorf("%s: no result for %s; events: %+v", pg.name, pg.url, events)
					continue
				}
				if ev.Error != "" || ev.State != "done" || ev.Status != http.StatusOK {
					t.Errorf("%s: status %d, state %q, error %q", pg.name, ev.Status, ev.State, ev.Error)
					continue
				}
				dom := map[string]string{}
				for id := range pg.want {
					dom[id] = ev.DOM[id]
				}
				if diff := cmp.Diff(pg.want, dom); diff != "" {
					t.Errorf("%s: DOM (-want +got):\n%s", pg.name, diff)
				}
			}

			site.checkSeen(t)

			if keep := os.Getenv("RUSTLE_E2E_NETLOG_DIR"); keep != "" {
				keepNetLog(t, netLog, filepath.Join(keep, tc.name+".json"))
			}
			nl := readNetLog(t, netLog)
			t.Logf("Chromium %s", nl.version)
			for _, a := range nl.connects {
				if a != tc.addr {
					t.Errorf("Chromium connected to %s; everything must go through the proxy at %s", a, tc.addr)
				}
			}
			if nl.challenges == 0 {
				t.Errorf("Chromium's net log shows no 407 from the proxy; auth was not exercised")
			}
			for _, line := range nl.requestLines {
				if target := requestTarget(line); target != "" && !strings.HasPrefix(target, "127.0.0.1:") {
					t.Errorf("Chromium sent %q through the proxy; only loopback targets may reach it", line)
				}
			}
			wsVia := "a CONNECT tunnel"
			if slices.ContainsFunc(nl.requestLines, func(l string) bool { return strings.HasPrefix(l, "GET http://"+site.ws.Listener.Addr().String()) }) {
				wsVia = "an absolute-form GET with Upgrade"
			}
			t.Logf("Chromium sent ws:// through the proxy as %s", wsVia)
			if len(nl.originALPN) == 0 {
				t.Errorf("Chromium's net log shows no TLS handshake with the origin through a tunnel")
			}
			if tc.alpn == "" {
				if len(nl.proxyALPN) != 0 {
					t.Errorf("Chromium negotiated TLS with the plain http proxy: %q", nl.proxyALPN)
				}
				return
			}
			if len(nl.proxyALPN) == 0 {
				t.Fatalf("Chromium's net log shows no TLS handshake with the proxy at %s", tc.addr)
			}
			for _, proto := range nl.proxyALPN {
				if proto != tc.alpn {
					t.Errorf("Chromium spoke %q to the https proxy, want %q (what rustle negotiates)", proto, tc.alpn)
				}
			}
			t.Logf("Chromium spoke %s to the https proxy on %d TLS connections (rustle offers %q to a client offering h2 and http/1.1)",
				nl.proxyALPN[0], len(nl.proxyALPN), tc.alpn)
		})
	}
}

// bypassHostNames sends every host name with a letter around the proxy,
// where --host-resolver-rules makes it fail to resolve: Chromium's
// background requests (update.googleapis.com, accounts.google.com, even
// with --disable-background-networking) then never reach rustle, which
// would try to resolve and dial them. <-loopback> keeps 127.0.0.1, where
// the test's origins are, on the proxy; Chromium bypasses loopback by
// default.
var bypassHostNames = func() string {
	var rules []string
	for c := 'a'; c <= 'z'; c++ {
		rules = append(rules, "*"+string(c)+"*")
	}
	return strings.Join(append(rules, "<-loopback>"), ",")
}()

// browserTools is what the browser test runs.
type browserTools struct {
	chromium string // Chromium executable
	node     string // node executable
	dir      string // e2e/browser, with node_modules installed
}

// needBrowser finds Chromium and Node.js, installing the driver's npm
// packages with npm ci when node_modules is missing, or skips the test.
func needBrowser(t testing.TB) browserTools {
	t.Helper()
	chromium := os.Getenv("RUSTLE_E2E_CHROMIUM")
	if chromium == "" {
		chromium = defaultChromium
	}
	if _, err := os.Stat(chromium); err != nil {
		t.Skipf("Chromium not found (%v); install Debian's chromium (make deps does) or set RUSTLE_E2E_CHROMIUM to run the browser test", err)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node not found in PATH; install Node.js >= 18 and npm (make deps does) to run the browser test")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	version := strings.TrimSpace(string(out))
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	if n, err := strconv.Atoi(major); err != nil || n < minNodeMajor {
		t.Skipf("node %s is too old; the pinned playwright-core needs Node.js >= %d", version, minNodeMajor)
	}
	dir := filepath.Join(moduleRoot, "e2e", "browser")
	want := jsonVersion(t, filepath.Join(dir, "package-lock.json"), "packages", "node_modules/playwright-core", "version")
	if want == "" {
		t.Fatalf("%s/package-lock.json pins no playwright-core", dir)
	}
	// Missing or another version than the lock file's: npm ci.
	if have := jsonVersion(t, filepath.Join(dir, "node_modules", "playwright-core", "package.json"), "version"); have != want {
		npm, err := exec.LookPath("npm")
		if err != nil {
			t.Skip("npm not found in PATH; install it (make deps does) to run the browser test")
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir = dir
		// npm keeps the caller's environment (registry, proxy and cache
		// settings); playwright-core downloads no browser, and this makes
		// sure nothing else does.
		cmd.Env = append(os.Environ(), "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1", "npm_config_update_notifier=false")
		cmd.WaitDelay = 5 * time.Second
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
		t.Logf("npm ci in %s took %v", dir, time.Since(start).Round(time.Millisecond))
	}
	return browserTools{chromium: chromium, node: node, dir: dir}
}

// jsonVersion returns the string at keys in the JSON file path, or ""
// when the file is missing or has none there.
func jsonVersion(t testing.TB, path string, keys ...string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return ""
		}
		v = m[k]
	}
	s, _ := v.(string)
	return s
}

// drivePlan is the plan browser/drive.mjs reads.
type drivePlan struct {
	ExecutablePath string     `json:"executablePath"`
	TimeoutMs      int        `json:"timeoutMs"`  // per page and for the launch
	WatchdogMs     int        `json:"watchdogMs"` // for the whole run
	Runs           []driveRun `json:"runs"`
}

// driveRun is one Chromium launch with its pages.
type driveRun struct {
	Name              string      `json:"name"`
	UserDataDir       string      `json:"userDataDir"`
	Proxy             *driveProxy `json:"proxy,omitempty"` // nil: none (Chromium's own flags, a PAC URL, decide)
	IgnoreHTTPSErrors bool        `json:"ignoreHTTPSErrors"`
	Args              []string    `json:"args"`
	Pages             []string    `json:"pages"`
}

// driveProxy is Playwright's proxy option.
type driveProxy struct {
	Server   string `json:"server"`
	Username string `json:"username"`
	Password string `json:"password"`
	Bypass   string `json:"bypass"`
}

// driveEvent is one line of the driver's output.
type driveEvent struct {
	Event   string            `json:"event"` // "launched", "page", "closed"
	Run     string            `json:"run"`
	PID     int               `json:"pid"`     // launched: Chromium's browser process
	Cmdline []string          `json:"cmdline"` // launched: its command line
	URL     string            `json:"url"`
	Status  int               `json:"status"`
	State   string            `json:"state"`
	DOM     map[string]string `json:"dom"`
	Error   string            `json:"error"`
}

// runDriver runs browser/drive.mjs for run and returns its events. Every
// Chromium process of the run has dir in its command line (run's profile
// is in dir, and so is the HOME it gets, which holds Chromium's crash
// handler database); the driver closes Chromium and kills it from a
// watchdog, and whatever is left when it returns is killed here by pid.
func runDriver(t testing.TB, tools browserTools, run driveRun, dir string) []driveEvent {
	t.Helper()
	plan := drivePlan{
		ExecutablePath: tools.chromium,
		TimeoutMs:      10000,
		WatchdogMs:     45000,
		Runs:           []driveRun{run},
	}
	b, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	planPath := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(planPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil { // it may hold an NSS database already
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 55*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tools.node, "drive.mjs", planPath)
	cmd.Dir = tools.dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "LC_ALL=C"}
	var stdout bytes.Buffer
	stderr := &logBuffer{}
	cmd.Stdout = &stdout
	cmd.Stderr = stderr
	cmd.WaitDelay = 5 * time.Second
	runErr := cmd.Run()
	killStragglers(t, dir)

	var events []driveEvent
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev driveEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Errorf("driver printed %q: %v", sc.Text(), err)
			continue
		}
		events = append(events, ev)
	}
	if runErr != nil {
		t.Fatalf("node drive.mjs: %v\nstderr:\n%s\nevents: %+v", runErr, stderr.String(), events)
	}
	return events
}

// killStragglers kills, by pid, the processes whose command line names
// dir: Chromium's helpers (zygotes, crash handlers) outlive the browser
// process by a second or two, and a driver killed on timeout leaves all
// of them. It waits until they are gone.
func killStragglers(t testing.TB, dir string) {
	t.Helper()
	killed := map[int]bool{}
	start := time.Now()
	for {
		pids := processesNaming(dir)
		if len(pids) == 0 {
			break
		}
		waited := time.Since(start)
		if waited > 5*time.Second {
			t.Errorf("processes %v naming %s survive SIGKILL", pids, dir)
			return
		}
		// A moment for a clean exit after the browser closed; then kill.
		if waited > 500*time.Millisecond {
			for _, pid := range pids {
				if !killed[pid] {
					syscall.Kill(pid, syscall.SIGKILL)
					killed[pid] = true
				}
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	if len(killed) > 0 {
		t.Logf("killed %d Chromium helper processes left after the driver", len(killed))
	}
}

// processesNaming returns the pids of processes with s in their command line.
func processesNaming(s string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte(s)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// browserSite holds the origins the browser test's pages come from.
type browserSite struct {
	nonce     string // in every page, so nothing stale passes
	rustlePID int
	plain     *httptest.Server // the pages over http
	secure    *httptest.Server // the same over https
	ws        *httptest.Server // WebSocket echo at /echo

	mu   sync.Mutex
	seen []originRequest // guarded by mu
}

// originRequest is what an origin saw of one request.
type originRequest struct {
	origin    string // "plain", "secure" or "ws"
	path      string
	proxyAuth string // Proxy-Authorization header
	via       string // Via header
	owner     string // "" when the client socket belongs to rustle, else why not
	wsClose   string // ws: how the WebSocket ended
}

// newBrowserSite starts the origins, which check that every client socket
// belongs to the process rustlePID.
func newBrowserSite(t testing.TB, rustlePID int) *browserSite {
	t.Helper()
	var nb [6]byte
	rand.Read(nb[:])
	s := &browserSite{nonce: hex.EncodeToString(nb[:]), rustlePID: rustlePID}

	s.ws = httptest.NewUnstartedServer(http.HandlerFunc(s.serveWS))
	s.ws.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.ws.Start()
	t.Cleanup(s.ws.Close)

	mux := http.NewServeMux()
	mux.HandleFunc("GET /page", s.servePage)
	mux.HandleFunc("GET /sub.js", s.serveScript)
	mux.HandleFunc("GET /data", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintf(w, "data %s tls=%t", s.nonce, r.TLS != nil)
	})
	mux.HandleFunc("GET /ws-page", s.serveWSPage)
	s.plain = httptest.NewUnstartedServer(s.record("plain", mux))
	s.secure = httptest.NewUnstartedServer(s.record("secure", mux))
	for _, srv := range []*httptest.Server{s.plain, s.secure} {
		srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	}
	s.plain.Start()
	s.secure.StartTLS()
	t.Cleanup(s.plain.Close)
	t.Cleanup(s.secure.Close)
	return s
}

// record wraps h, noting each request.
func (s *browserSite) record(origin string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.add(s.inspect(origin, r))
		h.ServeHTTP(w, r)
	})
}

// inspect returns what the origin sees of r, while its connection is open.
func (s *browserSite) inspect(origin string, r *http.Request) originRequest {
	or := originRequest{
		origin:    origin,
		path:      r.URL.Path,
		proxyAuth: r.Header.Get("Proxy-Authorization"),
		via:       r.Header.Get("Via"),
	}
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if local == nil {
		or.owner = "no local address"
	} else if err := socketOwnedBy(s.rustlePID, r.RemoteAddr, local.String()); err != nil {
		or.owner = err.Error()
	}
	return or
}

func (s *browserSite) add(or originRequest) {
	s.mu.Lock()
	s.seen = append(s.seen, or)
	s.mu.Unlock()
}

// takeSeen returns the requests noted so far and forgets them.
func (s *browserSite) takeSeen() []originRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := s.seen
	s.seen = nil
	return seen
}

// checkSeen checks the requests the origins saw: every page and
// subresource, each from rustle without proxy credentials, with Via on
// forwarded plain requests and none through tunnels.
func (s *browserSite) checkSeen(t testing.TB) {
	t.Helper()
	// The WebSocket is noted when its close handshake is over, which
	// can be a moment after the page saw it.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		s.mu.Lock()
		done := slices.ContainsFunc(s.seen, func(r originRequest) bool { return r.origin == "ws" && r.path == "/echo" })
		s.mu.Unlock()
		if done {
			break
		}
	}
	seen := s.takeSeen()
	for _, want := range []struct{ origin, path string }{
		{"plain", "/page"}, {"plain", "/sub.js"}, {"plain", "/data"}, {"plain", "/ws-page"},
		{"secure", "/page"}, {"secure", "/sub.js"}, {"secure", "/data"},
		{"ws", "/echo"},
	} {
		if !slices.ContainsFunc(seen, func(r originRequest) bool { return r.origin == want.origin && r.path == want.path }) {
			t.Errorf("the %s origin never saw %s; it saw %+v", want.origin, want.path, seen)
		}
	}
	for _, r := range seen {
		if r.proxyAuth != "" {
			t.Errorf("the %s origin got Proxy-Authorization %q on %s", r.origin, r.proxyAuth, r.path)
		}
		// Chromium asks for /favicon.ico on its own and resets the
		// request as the page closes, racing the socket lookup; the net
		// log check below already shows every connection went to the
		// proxy.
		if r.owner != "" && r.path != "/favicon.ico" {
			t.Errorf("the %s origin's client for %s is not rustle: %s", r.origin, r.path, r.owner)
		}
		switch {
		case r.origin == "plain" && r.via != "1.1 rustle" && r.via != "2 rustle":
			// Via names the version of the message rustle received:
			// 1.1 from an HTTP/1.1 proxy connection, 2 over h2.
			t.Errorf("the plain origin got Via %q on %s, want \"1.1 rustle\" or \"2 rustle\" (forwarded by rustle)", r.via, r.path)
		case r.origin == "secure" && r.via != "":
			t.Errorf("the TLS origin got Via %q on %s through a tunnel", r.via, r.path)
		case r.origin == "ws" && r.path == "/echo" && r.wsClose != "StatusNormalClosure":
			t.Errorf("the WebSocket ended with %s, want a close handshake with StatusNormalClosure", r.wsClose)
		}
	}
}

func (s *browserSite) servePage(w http.ResponseWriter, r *http.Request) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintf(w, `<!doctype html>
<html><head><title>rustle e2e</title></head>
<body data-state="loading">
<p id="scheme">%s</p>
<p id="sub">pending</p>
<p id="data">pending</p>
<script src="/sub.js"></script>
</body></html>
`, scheme)
}

func (s *browserSite) serveScript(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/javascript")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintf(w, `document.getElementById('sub').textContent = 'script ' + %q;
fetch('/data').then((r) => r.text()).then(
  (text) => { document.getElementById('data').textContent = text; document.body.dataset.state = 'done'; },
  (err) => { document.getElementById('data').textContent = 'fetch failed: ' + err; document.body.dataset.state = 'error'; },
);
`, s.nonce)
}

func (s *browserSite) serveWSPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintf(w, `<!doctype html>
<html><head><title>rustle e2e websocket</title></head>
<body data-state="loading">
<p id="text">pending</p>
<p id="binary">pending</p>
<p id="closed">pending</p>
<p id="error"></p>
<script>
const out = (id, text) => { document.getElementById(id).textContent = text; };
const ws = new WebSocket(%q);
ws.binaryType = 'arraybuffer';
let echoes = 0;
ws.onopen = () => { ws.send('hello ' + %q); ws.send(new Uint8Array([1, 2, 3, 255])); };
ws.onmessage = (ev) => {
  if (typeof ev.data === 'string') out('text', 'echo: ' + ev.data);
  else out('binary', 'echo bytes: ' + Array.from(new Uint8Array(ev.data)).join(','));
  if (++echoes === 2) ws.close(1000, 'done');
};
ws.onerror = () => out('error', 'websocket error');
ws.onclose = (ev) => {
  out('closed', 'closed ' + ev.code + ' clean=' + ev.wasClean);
  document.body.dataset.state = echoes === 2 ? 'done' : 'error';
};
</script>
</body></html>
`, "ws://"+s.ws.Listener.Addr().String()+"/echo", s.nonce)
}

// serveWS echoes every WebSocket message until the client closes.
func (s *browserSite) serveWS(w http.ResponseWriter, r *http.Request) {
	or := s.inspect("ws", r)
	if r.URL.Path != "/echo" {
		s.add(or)
		http.NotFound(w, r)
		return
	}
	// The page comes from the plain origin, another port.
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: []string{s.plain.Listener.Addr().String()}})
	if err != nil {
		or.wsClose = "accept: " + err.Error()
		s.add(or)
		return
	}
	defer c.CloseNow()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			or.wsClose = "read: " + err.Error()
			if code := websocket.CloseStatus(err); code != -1 {
				or.wsClose = code.String()
			}
			s.add(or)
			return
		}
		if err := c.Write(ctx, typ, msg); err != nil {
			or.wsClose = "write: " + err.Error()
			s.add(or)
			return
		}
	}
}

// socketOwnedBy returns nil when process pid holds the socket of the TCP
// connection from peer to local (as the accepting side sees them),
// found through /proc/net/tcp{,6} and /proc/PID/fd.
func socketOwnedBy(pid int, peer, local string) error {
	peerAP, err := netip.ParseAddrPort(peer)
	if err != nil {
		return fmt.Errorf("parse peer %q: %w", peer, err)
	}
	localAP, err := netip.ParseAddrPort(local)
	if err != nil {
		return fmt.Errorf("parse local %q: %w", local, err)
	}
	inode, state := "", ""
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			return fmt.Errorf("read %s: %w", table, err)
		}
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) < 10 || f[0] == "sl" {
				continue
			}
			l, err1 := parseProcAddr(f[1])
			r, err2 := parseProcAddr(f[2])
			if err1 == nil && err2 == nil && l == peerAP && r == localAP {
				inode, state = f[9], f[3]
				break
			}
		}
		if inode != "" {
			break
		}
	}
	if inode == "" {
		return fmt.Errorf("no socket %s -> %s in /proc/net/tcp", peer, local)
	}
	if state != "01" {
		// Not ESTABLISHED: rustle has already closed its end (Chromium
		// reset the stream, say, and rustle dropped the upstream), so
		// no process holds the socket any more; there is nothing left
		// to check.
		return nil
	}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return fmt.Errorf("read %s: %w", fdDir, err)
	}
	want := "socket:[" + inode + "]"
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(fdDir, e.Name())); err == nil && target == want {
			return nil
		}
	}
	// rustle may have closed the socket while the descriptors were being
	// read (Chromium resets its favicon streams, and rustle drops the
	// upstream at once): only a socket still established and held by
	// nobody in rustle is a failure.
	if still, _ := tcpState(peerAP, localAP); still != "01" {
		return nil
	}
	return fmt.Errorf("socket %s -> %s (inode %s) is not held by rustle (pid %d)", peer, local, inode, pid)
}

// tcpState returns the state field (hex, "01" = ESTABLISHED) of the TCP
// socket from l to r in /proc/net/tcp{,6}, or "" when there is none.
func tcpState(l, r netip.AddrPort) (string, error) {
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			return "", err
		}
		for line := range strings.Lines(string(b)) {
			f := strings.Fields(line)
			if len(f) < 10 || f[0] == "sl" {
				continue
			}
			fl, err1 := parseProcAddr(f[1])
			fr, err2 := parseProcAddr(f[2])
			if err1 == nil && err2 == nil && fl == l && fr == r {
				return f[3], nil
			}
		}
	}
	return "", nil
}

// parseProcAddr parses an address of /proc/net/tcp or tcp6: the address
// as 32-bit words in host byte order, in hex, a colon and the port in hex.
func parseProcAddr(s string) (netip.AddrPort, error) {
	a, p, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("odd address %q", s)
	}
	raw, err := hex.DecodeString(a)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("odd address %q", s)
	}
	port, err := strconv.ParseUint(p, 16, 16)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("odd port in %q", s)
	}
	ip := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(ip[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	addr, _ := netip.AddrFromSlice(ip)
	return netip.AddrPortFrom(addr.Unmap(), uint16(port)), nil
}

// netLogSummary is what the browser test reads from Chromium's net log.
type netLogSummary struct {
	version      string   // Chromium's version
	connects     []string // remote address of every TCP connection
	proxyALPN    []string // ALPN protocol of each TLS connection to the proxy
	originALPN   []string // the same for TLS connections to origins, through tunnels
	requestLines []string // request lines Chromium sent (to the proxy or through tunnels)
	challenges   int      // 407 answers read
}

// keepNetLog copies Chromium's net log to dst, for a look with
// https://netlog-viewer.appspot.com or jq.
func keepNetLog(t testing.TB, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err == nil {
		err = os.WriteFile(dst, b, 0o644)
	}
	if err != nil {
		t.Errorf("keep the net log: %v", err)
		return
	}
	t.Logf("net log kept in %s", dst)
}

// netLogEvent is one event of Chromium's net log, its type by name.
type netLogEvent struct {
	name   string
	phase  int // 0 none, 1 begin, 2 end
	source int // the id of the source (socket, request) it belongs to
	params json.RawMessage
}

// parseNetLog reads the net log Chromium wrote with --log-net-log: its
// events in order, and Chromium's version.
func parseNetLog(t testing.TB, path string) (events []netLogEvent, version string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("Chromium's net log: %v", err)
	}
	var raw struct {
		Constants struct {
			LogEventTypes map[string]int `json:"logEventTypes"`
			ClientInfo    struct {
				Version string `json:"version"`
			} `json:"clientInfo"`
		} `json:"constants"`
		Events []struct {
			Type   int `json:"type"`
			Phase  int `json:"phase"`
			Source struct {
				ID int `json:"id"`
			} `json:"source"`
			Params json.RawMessage `json:"params"`
		} `json:"events"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("parse Chromium's net log %s: %v", path, err)
	}
	names := map[int]string{}
	for name, n := range raw.Constants.LogEventTypes {
		names[n] = name
	}
	events = make([]netLogEvent, len(raw.Events))
	for i, ev := range raw.Events {
		events[i] = netLogEvent{name: names[ev.Type], phase: ev.Phase, source: ev.Source.ID, params: ev.Params}
	}
	return events, raw.Constants.ClientInfo.Version
}

// readNetLog reads the net log Chromium wrote with --log-net-log.
func readNetLog(t testing.TB, path string) netLogSummary {
	t.Helper()
	events, version := parseNetLog(t, path)
	nl := netLogSummary{version: version}
	const phaseEnd = 2
	// The sockets Chromium connected, and whether each has sent a CONNECT:
	// a TLS handshake before that is with the proxy, one after it with the
	// origin through the tunnel (the net log puts both on the socket).
	tunneled := map[int]bool{}
	for _, ev := range events {
		if len(ev.params) == 0 {
			continue
		}
		var p struct {
			RemoteAddress string   `json:"remote_address"`
			NextProto     string   `json:"next_proto"`
			Line          string   `json:"line"`
			Headers       []string `json:"headers"`
		}
		if err := json.Unmarshal(ev.params, &p); err != nil {
			continue // params of other shapes
		}
		switch ev.name {
		case "TCP_CONNECT":
			if ev.phase == phaseEnd && p.RemoteAddress != "" {
				nl.connects = append(nl.connects, p.RemoteAddress)
				tunneled[ev.source] = false
			}
		case "SSL_CONNECT":
			if ev.phase != phaseEnd {
				break
			}
			if t, ok := tunneled[ev.source]; ok && !t {
				nl.proxyALPN = append(nl.proxyALPN, p.NextProto)
			} else {
				nl.originALPN = append(nl.originALPN, p.NextProto)
			}
		case "HTTP_TRANSACTION_SEND_TUNNEL_HEADERS":
			if _, ok := tunneled[ev.source]; ok {
				tunneled[ev.source] = true
			}
			fallthrough
		case "HTTP_TRANSACTION_SEND_REQUEST_HEADERS":
			if p.Line != "" {
				nl.requestLines = append(nl.requestLines, strings.TrimSpace(p.Line))
			}
		case "HTTP_TRANSACTION_READ_RESPONSE_HEADERS", "HTTP_TRANSACTION_READ_TUNNEL_RESPONSE_HEADERS":
			if len(p.Headers) > 0 && strings.Contains(p.Headers[0], " 407 ") {
				nl.challenges++
			}
		case "HTTP2_SESSION_RECV_HEADERS":
			// Over an h2 proxy connection answers are header lists.
			if slices.Contains(p.Headers, ":status: 407") {
				nl.challenges++
			}
		case "HTTP2_SESSION_SEND_HEADERS":
			// And requests too: rebuild a request line from the
			// pseudo-header fields so that the target checks apply.
			if line := h2RequestLine(p.Headers); line != "" {
				nl.requestLines = append(nl.requestLines, line)
			}
		}
	}
	return nl
}

// h2RequestLine turns the pseudo-header fields of an HTTP/2 request, as
// the net log lists them (":method: GET"), into a request line: CONNECT
// with its authority, or the method and the absolute URL.
func h2RequestLine(headers []string) string {
	pseudo := map[string]string{}
	for _, h := range headers {
		if name, value, ok := strings.Cut(h, ": "); ok && strings.HasPrefix(name, ":") {
			pseudo[name] = value
		}
	}
	method, authority := pseudo[":method"], pseudo[":authority"]
	if method == "" || authority == "" {
		return ""
	}
	if method == http.MethodConnect && pseudo[":protocol"] == "" {
		return method + " " + authority + " HTTP/2"
	}
	return method + " " + pseudo[":scheme"] + "://" + authority + pseudo[":path"] + " HTTP/2"
}

// requestTarget returns the host:port a proxy request line names: the
// authority of CONNECT or of an absolute-form URL; "" for origin-form.
func requestTarget(line string) string {
	f := strings.Fields(line)
	if len(f) != 3 {
		return ""
	}
	if f[0] == http.MethodConnect {
		return f[1]
	}
	u, err := url.Parse(f[1])
	if err != nil || u.Host == "" {
		return ""
	}
	if u.Port() == "" {
		return u.Host + ":" + map[string]string{"http": "80", "https": "443", "ws": "80", "wss": "443"}[u.Scheme]
	}
	return u.Host
}

// negotiatedALPN returns the ALPN protocol the TLS server at addr picks
// from offer.
func negotiatedALPN(t testing.TB, addr string, roots *x509.CertPool, offer []string) string {
	t.Helper()
	d := tls.Dialer{
		NetDialer: &net.Dialer{Timeout: 5 * time.Second},
		Config:    &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: offer},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("TLS handshake with the https proxy %s: %v", addr, err)
	}
	defer c.Close()
	return c.(*tls.Conn).ConnectionState().NegotiatedProtocol
}

// readCertPEM reads the first certificate of a PEM file.
func readCertPEM(t testing.TB, path string) *x509.Certificate {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			t.Fatalf("%s: no CERTIFICATE block", path)
		}
		if blk.Type == "CERTIFICATE" {
			c, err := x509.ParseCertificate(blk.Bytes)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return c
		}
	}
}

// spkiHash is the base64 SHA-256 of a certificate's public key, as
// Chromium's --ignore-certificate-errors-spki-list takes it.
func spkiHash(c *x509.Certificate) string {
	h := sha256.Sum256(c.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(h[:])
}

// netLogRequest is what Chromium's net log says of the requests for one
// URL.
type netLogRequest struct {
	// steps are, in order: "h2 METHOD PATH" for a request sent on an
	// HTTP/2 stream, "h2 error NET_ERROR" for the stream's end in error,
	// the request line ("GET /path HTTP/1.1") of one sent over HTTP/1.1,
	// and the status line of each answer read ("HTTP/1.1 401
	// Unauthorized"; Chromium writes HTTP/2 answers so too).
	steps []string
	body  string // the answer's bytes Chromium read, decoded
}

// readNetLogRequest reads from the net log at path what Chromium did with
// its requests for url.
func readNetLogRequest(t testing.TB, path, url string) netLogRequest {
	t.Helper()
	events, _ := parseNetLog(t, path)
	var nr netLogRequest
	sources := map[int]bool{} // the URL requests for url
	for _, ev := range events {
		var p struct {
			URL      string   `json:"url"`
			Line     string   `json:"line"`
			Headers  []string `json:"headers"`
			NetError any      `json:"net_error"`
			Bytes    string   `json:"bytes"`
		}
		if len(ev.params) > 0 {
			if err := json.Unmarshal(ev.params, &p); err != nil {
				continue // params of other shapes
			}
		}
		name := ev.name
		if name == "REQUEST_ALIVE" && ev.phase == 1 && p.URL == url {
			sources[ev.source] = true
		}
		if !sources[ev.source] {
			continue
		}
		step := ""
		switch name {
		case "HTTP_TRANSACTION_HTTP2_SEND_REQUEST_HEADERS":
			pseudo := map[string]string{}
			for _, h := range p.Headers {
				if k, v, ok := strings.Cut(h, ": "); ok {
					pseudo[k] = v
				}
			}
			step = "h2 " + pseudo[":method"] + " " + pseudo[":path"]
		case "HTTP2_STREAM_ERROR":
			step = fmt.Sprint("h2 error ", p.NetError)
		case "HTTP_TRANSACTION_SEND_REQUEST_HEADERS":
			step = strings.TrimSpace(p.Line)
		case "HTTP_TRANSACTION_READ_RESPONSE_HEADERS":
			if len(p.Headers) > 0 {
				step = p.Headers[0]
			}
		case "URL_REQUEST_JOB_FILTERED_BYTES_READ":
			d, err := base64.StdEncoding.DecodeString(p.Bytes)
			if err != nil {
				t.Fatalf("net log bytes %q: %v", p.Bytes, err)
			}
			nr.body += string(d)
		}
		// Chromium writes a stream's error twice ("Closing session ...",
		// then "Abandoned."): one step.
		if step != "" && (len(nr.steps) == 0 || nr.steps[len(nr.steps)-1] != step) {
			nr.steps = append(nr.steps, step)
		}
	}
	return nr
}
