package admin_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/admin"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/server"
)

// The running proxy serves the page's panels and actions.
var _ admin.ConsoleProxy = (*server.Server)(nil)

// startServer starts a server of the TOML src with m and al, closed at
// the end of the test.
func startServer(t *testing.T, src string, m *metrics.Metrics, al *accesslog.Logger) *server.Server {
	t.Helper()
	cfg, err := config.Parse([]byte(src), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(cfg, nil, server.WithMetrics(m), server.WithAccessLog(al))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	srv.RegisterMetrics(m)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	return srv
}

// consoleClient calls the admin listener as the user op.
type consoleClient struct {
	t    *testing.T
	base string
	auth string
}

func (c *consoleClient) do(method, path string, body any, header ...string) (int, []byte) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range header {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp.StatusCode, b
}

// get decodes the JSON answer of GET path into v.
func (c *consoleClient) get(path string, v any) {
	c.t.Helper()
	code, b := c.do("GET", path, nil)
	if code != http.StatusOK {
		c.t.Fatalf("GET %s: %d %s", path, code, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		c.t.Fatalf("GET %s: %v in %s", path, err, b)
	}
}

// TestConsole runs a proxy with a quota, a parent and the access log,
// sends it traffic, and checks each panel of the page's API against what
// was sent, then the actions: revoking a user ends its tunnel, a quota
// reset lets the user in again, a reload asks the configured function;
// each is logged with who asked, and a cross-site POST is refused.
func TestConsole(t *testing.T) {
	origin := proxytest.NewOrigin(t, proxytest.Respond(200, "hello"))
	echo := proxytest.NewEcho(t)
	parent := startServer(t, "workers = 1\nallow_private = [\"127.0.0.0/8\"]\n[[listen]]\nname = \"p\"\naddress = \"127.0.0.1:0\"\n",
		nil, nil)
	parentAddr := parent.Addrs()[0].Addr.String()

	const password = "pw-7c1e-secret"
	var users strings.Builder
	for _, u := range []string{"alice", "bob", "carol", "dave"} {
		fmt.Fprintf(&users, "[[auth.users]]\nname = %q\npassword = %q\n", u, password)
	}
	m := metrics.New(metrics.Config{PerUser: true})
	var lines proxytest.LogBuffer
	al, err := accesslog.New(accesslog.Config{Writer: &lines})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	srv := startServer(t, `workers = 1
allow_private = ["127.0.0.0/8"]
[[listen]]
name = "main"
address = "127.0.0.1:0"
[[quota.rules]]
name = "daily"
users = ["carol"]
requests = 3
[[parents]]
name = "up1"
url = "http://`+parentAddr+`"
max_fails = 1
cooldown = "1m"
probe_interval = "50ms"
[[routes]]
name = "via-up1"
users = ["dave"]
via = "up1"
`+users.String(), m, al)
	proxyAddr := srv.Addrs()[0].Addr.String()

	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte("op-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(dir, "admin.htpasswd")
	if err := os.WriteFile(htpasswd, []byte("op:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	access, err := admin.LoadAccess(config.AdminAccess{Htpasswd: htpasswd})
	if err != nil {
		t.Fatal(err)
	}
	var adminLog proxytest.LogBuffer
	a := admin.New("127.0.0.1:0", m.Handler(), nil, slog.New(slog.NewTextHandler(&adminLog, nil)), access)
	a.HandleProxy(srv)
	var reloadMu sync.Mutex
	var reloadedBy []string
	var console *admin.Console
	console = a.HandleConsole(admin.ConsoleConfig{
		Proxy: srv, Metrics: m, AccessLog: al, Version: "v-test", SampleInterval: 20 * time.Millisecond,
		Info: func() admin.RunInfo {
			return admin.RunInfo{Workers: 1, AccessLog: "text to stdout",
				Listeners: []admin.ListenerInfo{{Name: "main", Protocol: "http", Address: proxyAddr, Auth: "basic"}}}
		},
		Reload: func(ctx context.Context, by string) error {
			reloadMu.Lock()
			reloadedBy = append(reloadedBy, by)
			n := len(reloadedBy)
			reloadMu.Unlock()
			err := error(nil)
			if n > 1 {
				err = errors.New("config: test.toml:3: workers changed: needs a restart")
			}
			console.NoteReload(err, by)
			return err
		},
	})
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	c := &consoleClient{t: t, base: "http://" + a.Addr().String(),
		auth: "Basic " + base64.StdEncoding.EncodeToString([]byte("op:op-pw"))}

	// The traffic: what each number below must show.
	client := func(user, pass string) *http.Client {
		u := &url.URL{Scheme: "http", User: url.UserPassword(user, pass), Host: proxyAddr}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
	}
	getStatus := func(user, pass string) int {
		t.Helper()
		cl := client(user, pass)
		defer cl.CloseIdleConnections()
		resp, err := cl.Get(origin.URL("/x"))
		if err != nil {
			t.Fatalf("GET as %s: %v", user, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	var sent []int // statuses
	for _, tc := range []struct {
		user, pass string
		n, want    int
	}{
		{"alice", password, 7, 200},
		{"carol", password, 3, 200},
		{"carol", password, 1, 429},   // the quota is spent
		{"mallory", password, 1, 407}, // not a user
		{"dave", password, 2, 200},    // through the parent
	} {
		for range tc.n {
			if got := getStatus(tc.user, tc.pass); got != tc.want {
				t.Fatalf("GET as %s: %d, want %d", tc.user, got, tc.want)
			}
			sent = append(sent, tc.want)
		}
	}
	tunnel := proxytest.Connect(t, proxyAddr, echo.Addr, "Proxy-Authorization: Basic "+
		base64.StdEncoding.EncodeToString([]byte("bob:"+password)))
	sent = append(sent, 200)
	if _, err := tunnel.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(tunnel, buf); err != nil {
		t.Fatalf("read the echo through bob's tunnel: %v", err)
	}

	var tr admin.Traffic
	proxytest.WaitFor(t, "every request in the totals and the access log", func() bool {
		c.get("/api/traffic", &tr)
		return tr.Totals.Requests == uint64(len(sent)) && tr.Totals.Refusals["quota"] == 1 && tr.Totals.Refusals["auth-failed"] == 1
	})
	seq := tr.Seq
	proxytest.WaitFor(t, "a sample after the traffic", func() bool {
		c.get("/api/traffic", &tr)
		return tr.Seq > seq+1
	})

	t.Run("traffic", func(t *testing.T) {
		ok, refused := 0, 0
		for _, s := range sent {
			if s == 200 {
				ok++
			} else {
				refused++
			}
		}
		tot := tr.Totals
		if tot.Status["2xx"] != uint64(ok) || tot.Status["4xx"] != uint64(refused) || tot.Tunnels != 1 ||
			tot.TunnelsOpen != 1 || tot.RefusalsFrom != "access_log" || tot.RefusalsTotal != 2 {
			t.Errorf("totals %+v, want %d 2xx, %d 4xx, 1 tunnel open, 2 refusals from the access log", tot, ok, refused)
		}
		// The open tunnel's bytes count when it ends.
		if p := tot.Protocols["http"]; p.Requests != uint64(len(sent)) || p.BytesUp != 0 || p.BytesDown != 5*uint64(ok-1) {
			t.Errorf("http totals %+v, want %d requests, %d bodies of 5 bytes down", p, len(sent), ok-1)
		}
		// The rates of the samples, times the time between them, add up
		// to what was counted.
		var count float64
		times, rates := tr.Times, tr.Series["requests:http"]
		if len(rates) != len(times) || len(times) < 3 {
			t.Fatalf("%d times, %d rates of requests:http", len(times), len(rates))
		}
		for i := 1; i < len(times); i++ {
			count += rates[i] * float64(times[i]-times[i-1]) / 1000
		}
		if math.Abs(count-float64(len(sent))) > 0.1 {
			t.Errorf("the samples of requests:http add up to %.3f requests, want %d", count, len(sent))
		}
		for _, name := range []string{"bytes:up", "bytes:down", "open:connections", "open:tunnels", "refusals:quota", "refusals:auth-failed", "tunnels:http"} {
			if len(tr.Series[name]) != len(times) {
				t.Errorf("series %s: %d values for %d times", name, len(tr.Series[name]), len(times))
			}
		}
		if last := tr.Series["open:tunnels"]; last[len(last)-1] != 1 {
			t.Errorf("open:tunnels now = %v, want 1", last[len(last)-1])
		}
		var next admin.Traffic
		c.get(fmt.Sprintf("/api/traffic?since=%d", tr.Seq), &next)
		if next.Seq < tr.Seq || len(next.Times) != int(next.Seq-tr.Seq) {
			t.Errorf("since=%d: %d samples up to %d, want only the newer ones", tr.Seq, len(next.Times), next.Seq)
		}
		if code, b := c.do("GET", "/api/traffic?since=x", nil); code != 400 || !strings.Contains(string(b), "since") {
			t.Errorf("since=x: %d %s, want 400 naming since", code, b)
		}
	})

	t.Run("users and quotas", func(t *testing.T) {
		var u admin.Users
		c.get("/api/users", &u)
		rows := map[string]admin.UserRow{}
		for _, r := range u.ByRequests {
			rows[r.Name] = r
		}
		if !u.PerUser || rows["alice"].Requests != 7 || rows["alice"].BytesDown != 35 || rows["dave"].Requests != 2 || rows["carol"].Requests != 4 {
			t.Errorf("users by requests %+v, want alice 7 (35 bytes down), carol 4, dave 2", u.ByRequests)
		}
		if u.ByRequests[0].Name != "alice" || len(u.ByBytes) != len(u.ByRequests) {
			t.Errorf("top user by requests %q, want alice", u.ByRequests[0].Name)
		}
		cq := rows["carol"].Quotas
		if len(cq) != 1 || cq[0].Rule != "daily" || cq[0].RequestsUsed != 3 || cq[0].RequestsLimit != 3 || cq[0].Reset.IsZero() {
			t.Errorf("carol's quotas %+v, want daily 3 of 3 with its reset", cq)
		}
		var q admin.Quotas
		c.get("/api/quotas", &q)
		if q.Count != 1 || len(q.Counters) != 1 || q.Counters[0].Scope != "carol" || q.Counters[0].Used != 1 || q.Cluster {
			t.Errorf("quotas %+v, want carol's counter spent, no cluster", q)
		}
	})

	t.Run("log", func(t *testing.T) {
		for _, tc := range []struct {
			query string
			n     int
			check func(admin.LogRecord) bool
		}{
			{"", len(sent) - 1, nil}, // bob's tunnel is logged when it ends
			{"?user=alice", 7, func(r admin.LogRecord) bool { return r.User == "alice" && r.Status == 200 }},
			{"?reason=quota", 1, func(r admin.LogRecord) bool {
				return r.User == "carol" && r.Status == 429 && strings.Contains(r.Line, " carol ") && strings.Contains(r.Line, " quota")
			}},
			{"?status=4xx", 2, func(r admin.LogRecord) bool { return r.Status/100 == 4 }},
			{"?status=407", 1, func(r admin.LogRecord) bool { return r.User == "mallory" && r.Reason == "auth-failed" }},
			{"?host=" + strings.Split(origin.Addr, ":")[0] + "&user=dave", 2, func(r admin.LogRecord) bool { return r.Parent == "up1" }},
			{"?host=nowhere.example", 0, nil},
			{"?reason=-&limit=3", 3, func(r admin.LogRecord) bool { return r.Reason == "" }},
		} {
			var l admin.Log
			c.get("/api/log"+tc.query, &l)
			if !l.Enabled || len(l.Records) != tc.n {
				t.Errorf("log%s: %d records, want %d", tc.query, len(l.Records), tc.n)
				continue
			}
			for _, r := range l.Records {
				if tc.check != nil && !tc.check(r) {
					t.Errorf("log%s: record %+v", tc.query, r)
				}
				if strings.Contains(r.Line, password) || !strings.Contains(lines.String(), r.Line+"\n") {
					t.Errorf("log%s: line %q is not one the access log wrote, or shows the password", tc.query, r.Line)
				}
			}
		}
	})

	t.Run("parents", func(t *testing.T) {
		var p admin.Parents
		c.get("/api/parents", &p)
		if len(p.Parents) != 1 || p.Parents[0].Name != "up1" || !p.Parents[0].Up || p.Parents[0].Requests < 1 || p.Parents[0].DialMS <= 0 {
			t.Fatalf("parents %+v, want up1 up with dave's requests", p.Parents)
		}
		parent.Close()
		proxytest.WaitFor(t, "up1 down on the page", func() bool {
			c.get("/api/parents", &p)
			return !p.Parents[0].Up && p.Parents[0].Failures > 0
		})
	})

	t.Run("summary", func(t *testing.T) {
		var s admin.Summary
		c.get("/api/summary", &s)
		if s.Version != "v-test" || s.You != "op" || s.Cluster || !s.CanReload || len(s.Listeners) != 1 ||
			s.Listeners[0].Address != proxyAddr || s.LastReload != nil || s.Instance == "" {
			t.Errorf("summary %+v", s)
		}
	})

	t.Run("page", func(t *testing.T) {
		code, body := c.do("GET", "/", nil)
		page := string(body)
		if code != 200 || !strings.Contains(page, `<b id="total-requests">`+fmt.Sprint(len(sent))+`</b>`) ||
			!strings.Contains(page, `data-user="alice"`) || !strings.Contains(page, `data-parent="up1" class="down"`) ||
			!strings.Contains(page, `data-scope="carol"`) || !strings.Contains(page, "carol http GET") {
			t.Errorf("GET /: %d, the snapshot lacks the numbers:\n%s", code, page)
			for _, want := range []string{`<b id="total-requests">` + fmt.Sprint(len(sent)) + `</b>`, `data-user="alice"`, `data-parent="up1" class="down"`, `data-scope="carol"`, "carol http GET"} {
				if !strings.Contains(page, want) {
					t.Errorf("missing %q", want)
				}
			}
		}
		resp, err := http.DefaultClient.Do(mustRequest(t, "GET", c.base+"/", c.auth))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") ||
			!strings.Contains(csp, "frame-ancestors 'none'") || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
			t.Errorf("GET / headers %v", resp.Header)
		}
		for _, f := range []string{"app.js", "style.css"} {
			resp, err := http.DefaultClient.Do(mustRequest(t, "GET", c.base+"/ui/"+f, c.auth))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			etag := resp.Header.Get("ETag")
			if resp.StatusCode != 200 || etag == "" || resp.ContentLength < 100 {
				t.Fatalf("GET /ui/%s: %d, ETag %q, %d bytes", f, resp.StatusCode, etag, resp.ContentLength)
			}
			req := mustRequest(t, "GET", c.base+"/ui/"+f, c.auth)
			req.Header.Set("If-None-Match", etag)
			resp, err = http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotModified {
				t.Errorf("GET /ui/%s with its ETag: %d, want 304", f, resp.StatusCode)
			}
		}
		if code, _ := c.do("GET", "/ui/missing.js", nil); code != 404 {
			t.Errorf("GET /ui/missing.js: %d, want 404", code)
		}
		anon := &consoleClient{t: t, base: c.base}
		for _, p := range []string{"/", "/api/summary", "/api/log", "/ui/app.js"} {
			if code, _ := anon.do("GET", p, nil); code != 401 {
				t.Errorf("GET %s without credentials: %d, want 401", p, code)
			}
		}
	})

	t.Run("actions", func(t *testing.T) {
		// A cross-site request, with the browser's credentials, and a
		// form's content type are refused before the action.
		if code, _ := c.do("POST", "/api/revoke", map[string]string{"user": "bob"},
			"Origin: http://evil.example", "Sec-Fetch-Site: cross-site"); code != 403 {
			t.Errorf("cross-site POST /api/revoke: %d, want 403", code)
		}
		req := mustRequest(t, "POST", c.base+"/api/revoke", c.auth)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Body = io.NopCloser(strings.NewReader("user=bob"))
		if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 415 {
			t.Errorf("form POST /api/revoke: %v %v, want 415", resp, err)
		} else {
			resp.Body.Close()
		}
		if _, err := tunnel.Write([]byte("pong")); err != nil {
			t.Fatalf("bob's tunnel ended by a refused request: %v", err)
		}
		if _, err := io.ReadFull(tunnel, buf); err != nil {
			t.Fatalf("bob's tunnel ended by a refused request: %v", err)
		}

		for _, tc := range []struct {
			name, path string
			body       any
			code       int
			want       string
		}{
			{"revoke without a user", "/api/revoke", map[string]string{}, 400, "user"},
			{"an unknown field", "/api/revoke", map[string]string{"usr": "bob"}, 400, "usr"},
			{"revoke bob", "/api/revoke", map[string]string{"user": "bob"}, 200, "revoke bob: its sessions and tunnels were ended"},
			{"revoke nobody", "/api/revoke", map[string]string{"user": "zed"}, 200, "no session or tunnel"},
			{"reset an unknown quota", "/api/quota/reset", map[string]string{"rule": "daily", "scope": "zed"}, 404, "no counter"},
			{"reset carol's quota", "/api/quota/reset", map[string]string{"rule": "daily", "scope": "carol"}, 200, "daily of carol starts from zero"},
			{"reload", "/api/reload", map[string]string{}, 200, "configuration reloaded"},
			{"a refused reload", "/api/reload", map[string]string{}, 422, "needs a restart"},
		} {
			code, b := c.do("POST", tc.path, tc.body)
			if code != tc.code || !strings.Contains(string(b), tc.want) {
				t.Errorf("%s: %d %s, want %d with %q", tc.name, code, b, tc.code, tc.want)
			}
		}
		tunnel.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := tunnel.Read(buf); err == nil {
			t.Errorf("bob's tunnel still carries data after the revocation (%d bytes)", n)
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("bob's tunnel still open 5s after the revocation")
		}
		proxytest.WaitFor(t, "no tunnel open in the samples", func() bool {
			var tr admin.Traffic
			c.get("/api/traffic", &tr)
			open := tr.Series["open:tunnels"]
			return tr.Totals.TunnelsOpen == 0 && open[len(open)-1] == 0
		})
		if got := getStatus("carol", password); got != 200 {
			t.Errorf("carol after her quota's reset: %d, want 200", got)
		}
		var bob admin.Log
		proxytest.WaitFor(t, "bob's tunnel in the access log", func() bool {
			c.get("/api/log?user=bob", &bob)
			return len(bob.Records) == 1
		})
		if r := bob.Records[0]; r.Method != "CONNECT" || r.Reason != "revoked" || r.BytesUp != 8 || r.Target != echo.Addr {
			t.Errorf("bob's tunnel logged as %+v, want a CONNECT to %s revoked after 8 bytes up", r, echo.Addr)
		}
		reloadMu.Lock()
		by := strings.Join(reloadedBy, ",")
		reloadMu.Unlock()
		if by != "admin op,admin op" {
			t.Errorf("reloads asked by %q, want admin op twice", by)
		}
		var s admin.Summary
		c.get("/api/summary", &s)
		if r := s.LastReload; r == nil || r.OK || r.By != "admin op" || !strings.Contains(r.Error, "needs a restart") {
			t.Errorf("last reload %+v, want the refused one", r)
		}
		l := adminLog.String()
		for _, want := range []string{
			`msg="admin action" action=revoke by=op remote=127.0.0.1:`,
			`user=bob done="revoke bob: its sessions and tunnels were ended"`,
			`msg="admin action" action=quota-reset by=op`,
			`msg="admin action failed" action=reload by=op`,
			`msg="admin request refused" reason=cross-origin status=403 method=POST path=/api/revoke`,
			`msg="admin request refused" reason=content-type status=415 method=POST path=/api/revoke`,
		} {
			if !strings.Contains(l, want) {
				t.Errorf("the admin log lacks %q:\n%s", want, l)
			}
		}
		if strings.Contains(l, "op-pw") || strings.Contains(l, password) {
			t.Errorf("the admin log shows a password:\n%s", l)
		}
	})
}

func mustRequest(t *testing.T, method, url, auth string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", auth)
	return req
}

// TestConsoleOff checks the page with health_and_metrics_only: / stays
// the text index, the API answers 404, and nothing is sampled or tapped.
func TestConsoleOff(t *testing.T) {
	m := metrics.New(metrics.Config{})
	al, err := accesslog.New(accesslog.Config{Writer: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	srv := startServer(t, "workers = 1\n[[listen]]\naddress = \"127.0.0.1:0\"\n", m, al)
	a := admin.New("127.0.0.1:0", m.Handler(), nil, nil, admin.Access{HealthAndMetricsOnly: true})
	a.HandleConsole(admin.ConsoleConfig{Proxy: srv, Metrics: m, AccessLog: al})
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	c := &consoleClient{t: t, base: "http://" + a.Addr().String()}
	if code, b := c.do("GET", "/", nil); code != 200 || !strings.HasPrefix(string(b), "rustle admin\n") {
		t.Errorf("GET /: %d %q, want the text index", code, b)
	}
	for _, p := range []string{"/api/summary", "/api/traffic", "/ui/app.js"} {
		if code, b := c.do("GET", p, nil); code != 404 || !strings.Contains(string(b), "health_and_metrics_only") {
			t.Errorf("GET %s: %d %q, want 404 naming health_and_metrics_only", p, code, b)
		}
	}
	if code, _ := c.do("POST", "/api/revoke", map[string]string{"user": "bob"}); code != 404 {
		t.Errorf("POST /api/revoke: %d, want 404", code)
	}
}

// TestConsoleShutdown checks that the sampler stops with the server
// (the package's TestMain fails a run that leaves it behind) and that a
// console without metrics or an access log still answers.
func TestConsoleShutdown(t *testing.T) {
	srv := startServer(t, "workers = 1\n[[listen]]\naddress = \"127.0.0.1:0\"\n", nil, nil)
	a := admin.New("127.0.0.1:0", nil, nil, nil, admin.Access{})
	a.HandleConsole(admin.ConsoleConfig{Proxy: srv, SampleInterval: time.Millisecond})
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	c := &consoleClient{t: t, base: "http://" + a.Addr().String()}
	var tr admin.Traffic
	proxytest.WaitFor(t, "samples", func() bool {
		c.get("/api/traffic", &tr)
		return tr.Seq > 3
	})
	var l admin.Log
	c.get("/api/log", &l)
	if l.Enabled || len(l.Records) != 0 {
		t.Errorf("log without an access log: %+v", l)
	}
	if code, _ := c.do("GET", "/", nil); code != 200 {
		t.Errorf("GET / without metrics: %d", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := net.DialTimeout("tcp", a.Addr().String(), time.Second); err == nil {
		t.Errorf("the admin listener still accepts after Shutdown")
	}
}

// TestConsoleCluster runs two instances sharing quotas through a real
// Redis: the page of one names it, says the counts are shared and in
// sync, shows the quota totals of both instances, and refuses a reset.
func TestConsoleCluster(t *testing.T) {
	redis := proxytest.StartRedis(t)
	origin := proxytest.NewOrigin(t, proxytest.Respond(200, "hello"))
	instance := func(name string) (*server.Server, *metrics.Metrics) {
		m := metrics.New(metrics.Config{PerUser: true})
		srv := startServer(t, `workers = 1
allow_private = ["127.0.0.0/8"]
[[listen]]
address = "127.0.0.1:0"
[[auth.users]]
name = "alice"
password = "pw"
[[quota.rules]]
name = "daily"
users = ["alice"]
requests = 10
[cluster]
redis = "redis://`+redis.Addr+`"
sync_interval = "50ms"
instance = "`+name+`"
`, m, nil)
		return srv, m
	}
	east, m := instance("east")
	west, _ := instance("west")
	for _, srv := range []*server.Server{east, east, west, west, west} {
		u := &url.URL{Scheme: "http", User: url.UserPassword("alice", "pw"), Host: srv.Addrs()[0].Addr.String()}
		cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(u)}}
		resp, err := cl.Get(origin.URL("/"))
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		cl.CloseIdleConnections()
		if resp.StatusCode != 200 {
			t.Fatalf("GET as alice: %d", resp.StatusCode)
		}
	}
	a := admin.New("127.0.0.1:0", m.Handler(), nil, nil, admin.Access{})
	a.HandleConsole(admin.ConsoleConfig{Proxy: east, Metrics: m})
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	c := &consoleClient{t: t, base: "http://" + a.Addr().String()}
	var s admin.Summary
	c.get("/api/summary", &s)
	if s.Instance != "east" || !s.Cluster || !s.RedisUp {
		t.Errorf("summary: instance %q, cluster %v, redis up %v; want east, shared and in sync", s.Instance, s.Cluster, s.RedisUp)
	}
	var q admin.Quotas
	proxytest.WaitFor(t, "the shared total of both instances on east's page", func() bool {
		c.get("/api/quotas", &q)
		return len(q.Counters) == 1 && q.Counters[0].RequestsUsed == 5
	})
	if !q.Cluster || !q.RedisUp || q.Counters[0].Used != 0.5 {
		t.Errorf("quotas %+v, want alice's 5 of 10 shared through Redis", q)
	}
	if code, b := c.do("POST", "/api/quota/reset", map[string]string{"rule": "daily", "scope": "alice"}); code != 409 ||
		!strings.Contains(string(b), "shared through the cluster") {
		t.Errorf("quota reset with a cluster: %d %s, want 409 saying why", code, b)
	}
	code, page := c.do("GET", "/", nil)
	if code != 200 || !strings.Contains(string(page), "<title>rustle · east</title>") ||
		!strings.Contains(string(page), "quotas shared through Redis, in sync") {
		t.Errorf("GET /: %d, the page does not name east and its cluster:\n%s", code, page)
	}
}
