package server

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/proxy"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// This file drives authentication failures through real listeners with
// real clients: what each is answered, logged (access log and debug log)
// and counted, and the cool-downs of a user name and of an address.

// authRig is a running server whose http ("plain"), https ("tls"),
// socks5 ("socks") and mixed ("mixed") listeners authenticate alice (pw)
// and bob (pw2), with its metrics, access log and debug-level log.
type authRig struct {
	addr   map[string]string
	m      *metrics.Metrics
	access *logBuffer
	log    *logBuffer
	roots  *x509.CertPool
	origin string // an origin's URL prefix, "http://127.0.0.1:PORT"
}

func startAuthRig(t *testing.T, modify func(c *config.Config)) *authRig {
	t.Helper()
	cert, roots := proxyCerts(t)
	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Auth.Users = []config.User{{Name: "alice", Password: "pw"}, {Name: "bob", Password: "pw2"}}
	cfg.Listen = []config.Listener{
		{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"},
		{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: cert},
		{Name: "socks", Address: "127.0.0.1:0", Protocol: "socks5"},
		{Name: "mixed", Address: "127.0.0.1:0", Protocol: "mixed"},
	}
	if modify != nil {
		modify(cfg)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	r := &authRig{m: metrics.New(metrics.Config{PerUser: true}), access: &logBuffer{}, log: &logBuffer{}, roots: roots}
	logger := slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, r.addr = startLogged(t, cfg, logger, r.access, WithMetrics(r.m))
	r.origin = fmt.Sprintf("http://127.0.0.1:%d", mixedOrigin(t))
	return r
}

// metric returns the value of a listener's series name.
func (r *authRig) metric(t *testing.T, name, listener string) float64 {
	t.Helper()
	return proxytest.Metric(t, r.m, name, "listener", listener)
}

// records waits until the access log holds n records that match, and
// returns them.
func (r *authRig) records(t *testing.T, n int, match func(conformRecord) bool) []conformRecord {
	t.Helper()
	var got []conformRecord
	waitFor(t, fmt.Sprintf("%d access log records", n), func() bool {
		got = got[:0]
		for line := range strings.Lines(r.access.String()) {
			var rec conformRecord
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("access log line %q: %v", line, err)
			}
			if match(rec) {
				got = append(got, rec)
			}
		}
		return len(got) >= n
	})
	return got
}

// on matches the records of one listener with one reason.
func on(listener, reason string) func(conformRecord) bool {
	return func(r conformRecord) bool { return r.Listener == listener && r.Reason == reason }
}

// noSecret fails the test when a password, or credentials holding it,
// appear in the access log or the debug log.
func (r *authRig) noSecret(t *testing.T, user, pass string) {
	t.Helper()
	cred := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	for name, l := range map[string]*logBuffer{"access log": r.access, "log": r.log} {
		if s := l.String(); strings.Contains(s, pass) || strings.Contains(s, cred) {
			t.Errorf("the %s holds the password %q or the credentials:\n%s", name, pass, s)
		}
	}
}

// dialH2 opens an HTTP/2 connection to the rig's https listener.
func (r *authRig) dialH2(t *testing.T) *http2.ClientConn {
	t.Helper()
	tc, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", r.addr["tls"],
		&tls.Config{RootCAs: r.roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	cc, err := (&http2.Transport{}).NewClientConn(tc)
	if err != nil {
		tc.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// h2Get sends a GET of target on cc with the credentials of user and
// pass (user "" = none) and returns the status.
func h2Get(cc *http2.ClientConn, target, user, pass string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", target, nil)
	if user != "" {
		req.Header.Set("Proxy-Authorization", basicValue(user, pass))
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestAuthChallengeCounted checks that the first 407 of a client that then
// authenticates is a challenge, not a failure: curl --proxy-anyauth asks
// without credentials, is challenged and sends them; Go's transport sends
// them at once. A git clone added one failure per clone before.
func TestAuthChallengeCounted(t *testing.T) {
	r := startAuthRig(t, nil)
	proxyURL := "http://alice:pw@" + r.addr["plain"]
	if out, err := runCurl(t, "--proxy-anyauth", "-x", proxyURL, r.origin+"/curl"); err != nil || out != "origin says /curl" {
		t.Fatalf("curl --proxy-anyauth: %v %q", err, out)
	}
	u, _ := url.Parse(proxyURL)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 10 * time.Second}
	resp, err := client.Get(r.origin + "/go")
	if err != nil {
		t.Fatalf("Go's transport: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("Go's transport: %s", resp.Status)
	}
	recs := r.records(t, 3, func(rec conformRecord) bool { return rec.Listener == "plain" })
	if rec := recs[0]; rec.Status != 407 || rec.Reason != "auth-missing" || rec.User != "" {
		t.Errorf("curl's first record %+v, want a 407 challenge", rec)
	}
	for _, rec := range recs[1:] {
		if rec.Status != 200 || rec.User != "alice" || rec.Reason != "" {
			t.Errorf("record %+v, want alice's 200", rec)
		}
	}
	if got := r.metric(t, "rustle_auth_challenges_total", "plain"); got != 1 {
		t.Errorf("rustle_auth_challenges_total = %v, want 1", got)
	}
	if got := r.metric(t, "rustle_auth_failures_total", "plain"); got != 0 {
		t.Errorf("rustle_auth_failures_total = %v, want 0: a challenge is no failure", got)
	}
}

// TestAuthFailureLogged checks that wrong credentials are logged and
// counted as a failure naming the user tried, on every protocol, with
// curl, Go's transport and golang.org/x/net/proxy's SOCKS5 client; that
// the debug log says so; and that no password byte reaches either log,
// nor a per-user series the name that failed.
func TestAuthFailureLogged(t *testing.T) {
	const secret = "Wr0ng-S3cret"
	r := startAuthRig(t, nil)
	if out, err := runCurl(t, "-x", "http://alice:"+secret+"@"+r.addr["plain"], r.origin+"/curl"); err == nil {
		t.Fatalf("curl with a wrong password succeeded: %q", out)
	}
	u, _ := url.Parse("http://mallory:" + secret + "@" + r.addr["mixed"])
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 10 * time.Second}
	resp, err := client.Get(r.origin + "/go")
	if err != nil {
		t.Fatalf("Go's transport: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("Go's transport with a wrong password: %s, want 407", resp.Status)
	}
	for _, l := range []string{"socks", "mixed"} {
		d, err := proxy.SOCKS5("tcp", r.addr[l], &proxy.Auth{User: "alice", Password: secret}, proxy.Direct)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := d.Dial("tcp", strings.TrimPrefix(r.origin, "http://")); err == nil {
			c.Close()
			t.Fatalf("SOCKS5 to %s with a wrong password connected", l)
		}
	}

	for _, tt := range []struct {
		listener, protocol string
		want               conformRecord
	}{
		{"plain", "http", conformRecord{Listener: "plain", User: "alice", Protocol: "http", Method: "GET",
			Target: r.origin + "/curl", Status: 407, Reason: "auth-failed"}},
		{"socks", "socks5", conformRecord{Listener: "socks", User: "alice", Protocol: "socks5", Status: 1, Reason: "auth-failed"}},
	} {
		rec := r.records(t, 1, on(tt.listener, "auth-failed"))[0]
		rec.Client = ""
		if rec != tt.want {
			t.Errorf("%s record\n got %+v\nwant %+v", tt.listener, rec, tt.want)
		}
		if got := r.metric(t, "rustle_auth_failures_total", tt.listener); got != 1 {
			t.Errorf("%s: rustle_auth_failures_total = %v, want 1", tt.listener, got)
		}
		if got := r.metric(t, "rustle_auth_challenges_total", tt.listener); got != 0 {
			t.Errorf("%s: rustle_auth_challenges_total = %v, want 0", tt.listener, got)
		}
	}
	mixed := r.records(t, 2, on("mixed", "auth-failed"))
	users := map[string]string{}
	for _, rec := range mixed {
		users[rec.Protocol] = rec.User
	}
	if users["http"] != "mallory" || users["socks5"] != "alice" {
		t.Errorf("the mixed port's failures name %v, want mallory (http) and alice (socks5)", users)
	}
	if got := r.metric(t, "rustle_auth_failures_total", "mixed"); got != 2 {
		t.Errorf("mixed: rustle_auth_failures_total = %v, want 2", got)
	}
	waitFor(t, "the refusals' debug lines", func() bool {
		return debugLines(r.log.String(), `msg="gate: request refused"`, ` reason=auth-failed `) == 4
	})
	for _, name := range []string{"alice", "mallory"} {
		if got := proxytest.Metric(t, r.m, "rustle_user_requests_total", "user", name); got != 0 {
			t.Errorf("a per-user series for %s, who did not authenticate: %v", name, got)
		}
	}
	r.noSecret(t, "alice", secret)
	r.noSecret(t, "mallory", secret)
}

// TestSOCKS4RefusedWhereAuthIsOn checks that a SOCKS4a request to a
// listener that authenticates (socks5 and mixed) is answered 91, logged
// as protocol socks4 with the reason auth-missing and counted as a
// challenge.
func TestSOCKS4RefusedWhereAuthIsOn(t *testing.T) {
	r := startAuthRig(t, nil)
	target := strings.TrimPrefix(r.origin, "http://")
	for _, l := range []string{"socks", "mixed"} {
		c, err := net.DialTimeout("tcp", r.addr[l], 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		var ans conformAnswer
		err = trySOCKS4a(c, conformAsk{target: target}, &ans)
		c.Close()
		if err != nil || ans.code != 0x5B {
			t.Fatalf("SOCKS4a to %s: reply %#x %v, want 0x5b", l, ans.code, err)
		}
		rec := r.records(t, 1, on(l, "auth-missing"))[0]
		rec.Client = ""
		want := conformRecord{Listener: l, Protocol: "socks4", Method: "CONNECT", Target: target, Status: 91, Reason: "auth-missing"}
		if rec != want {
			t.Errorf("%s record\n got %+v\nwant %+v", l, rec, want)
		}
		if got := r.metric(t, "rustle_auth_challenges_total", l); got != 1 {
			t.Errorf("%s: rustle_auth_challenges_total = %v, want 1", l, got)
		}
		if got := r.metric(t, "rustle_auth_failures_total", l); got != 0 {
			t.Errorf("%s: rustle_auth_failures_total = %v, want 0", l, got)
		}
	}
	waitFor(t, "the refusals' debug lines", func() bool {
		return debugLines(r.log.String(), `msg="gate: request refused"`, `reason=auth-missing status=91 protocol=socks4 `) == 2
	})
}

// TestAuthCooldown checks the two cool-downs behind one address: a user
// name that failed limits.auth_failures times is refused there (429 with
// Retry-After, the right password too) while another user from the same
// address, and the same user from another, still get through; and
// limits.auth_failures_per_address failures as any names cool the whole
// address down, refusing its new connections on every listener, with
// the line a fail2ban filter matches.
func TestAuthCooldown(t *testing.T) {
	port := mixedOrigin(t)
	target := fmt.Sprintf("http://127.0.0.1:%d/ok", port)
	_, addrs, logs := startConfigured(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Auth.Users = []config.User{{Name: "alice", Password: "pw"}, {Name: "bob", Password: "pw2"}}
		c.Limits.AuthFailures = 2
		c.Limits.AuthFailuresPerAddress = 4
		c.Limits.AuthCooldown.Duration = time.Hour
		c.Listen = append(c.Listen, config.Listener{Address: "127.0.0.1:0", Protocol: "socks5"})
	})
	auth := func(user, pass string) string {
		return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	get := func(local, user, pass string) (string, string) {
		t.Helper()
		status, body, err := rawGet(t, addrs[0], local, target, auth(user, pass))
		if err != nil {
			t.Fatalf("%s from %q: %v", user, local, err)
		}
		return status, body
	}
	if status, _ := get("", "alice", "wrong"); !strings.HasPrefix(status, "407") {
		t.Fatalf("alice's first wrong password: %q", status)
	}
	if status, _ := get("", "alice", "wrong"); status != "429 Too Many Requests 3600" {
		t.Fatalf("alice's second wrong password: %q, want 429 with Retry-After 3600", status)
	}
	if status, _ := get("", "alice", "pw"); !strings.HasPrefix(status, "429 ") || strings.HasSuffix(status, " ") {
		t.Errorf("alice's right password while she cools down: %q, want 429 with Retry-After", status)
	}
	if _, body := get("", "bob", "pw2"); body != "origin says /ok" {
		t.Errorf("bob from the address where alice cools down: %q", body)
	}
	if _, body := get("127.0.0.2", "alice", "pw"); body != "origin says /ok" {
		t.Errorf("alice from another address: %q", body)
	}
	const nameLine = `msg="auth failures of one user name" client=127.0.0.1 user=alice failures=2 window=1m0s cooldown=1h0m0s`
	if got := strings.Count(logs.String(), nameLine); got != 1 {
		t.Errorf("%d lines %q, want 1:\n%s", got, nameLine, logs)
	}
	const fail2ban = `msg="auth failures" client=127.0.0.1 failures=4 window=1m0s cooldown=1h0m0s`
	if strings.Contains(logs.String(), `msg="auth failures" `) {
		t.Errorf("one user name's cool-down logged the address's fail2ban line:\n%s", logs)
	}

	// Two more names bring the address to 4 failures.
	get("", "carol", "x")
	if status, _ := get("", "dave", "x"); status != "429 Too Many Requests 3600" {
		t.Fatalf("the address's fourth failure: %q, want 429 with Retry-After 3600", status)
	}
	if status, _, err := rawGet(t, addrs[0], "", target, auth("bob", "pw2")); err == nil && !strings.HasPrefix(status, "429 ") {
		t.Errorf("bob from the cooling address: %q, want 429", status)
	}
	// The SOCKS listener closes the cooling address at once.
	c, err := net.Dial("tcp", addrs[1])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte{5, 1, 2})
	if n, err := c.Read(make([]byte, 2)); err == nil {
		t.Errorf("SOCKS from a cooling address read %d bytes, want a closed connection", n)
	}
	if _, body := get("127.0.0.2", "bob", "pw2"); body != "origin says /ok" {
		t.Errorf("bob from another address: %q", body)
	}
	if got := strings.Count(logs.String(), fail2ban); got != 1 {
		t.Errorf("%d fail2ban lines, want 1:\n%s", got, logs)
	}
}

// TestAuthCooldownEveryConnection checks that a cool-down refuses a
// user's credentials on connections opened before it began: an HTTP/1.1
// keep-alive connection, a SOCKS5 connection that has greeted, an HTTP/2
// connection; the right password included, and none of them checked.
func TestAuthCooldownEveryConnection(t *testing.T) {
	r := startAuthRig(t, func(c *config.Config) {
		c.Limits.AuthFailures = 3
		c.Limits.AuthCooldown.Duration = time.Hour
	})
	// h1 is challenged once and kept alive.
	h1, err := net.DialTimeout("tcp", r.addr["plain"], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Close()
	h1.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(h1)
	get1 := func(authz string) int {
		t.Helper()
		req := "GET " + r.origin + "/h1 HTTP/1.1\r\nHost: x\r\n"
		if authz != "" {
			req += "Proxy-Authorization: " + authz + "\r\n"
		}
		if _, err := io.WriteString(h1, req+"\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("HTTP/1.1 response: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get1(""); code != 407 {
		t.Fatalf("HTTP/1.1 without credentials: %d", code)
	}
	// s5 has greeted: its server waits for the login.
	s5, err := net.DialTimeout("tcp", r.addr["socks"], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s5.Close()
	s5.SetDeadline(time.Now().Add(10 * time.Second))
	s5.Write([]byte{5, 1, 2})
	if sel := make([]byte, 2); !readFull(s5, sel) || sel[1] != 2 {
		t.Fatalf("SOCKS5 method selection %x", sel)
	}
	h2c := r.dialH2(t)
	if code, err := h2Get(h2c, r.origin+"/h2", "", ""); err != nil || code != 407 {
		t.Fatalf("h2 without credentials: %d %v", code, err)
	}

	for range 3 {
		if status, _, err := rawGet(t, r.addr["plain"], "", r.origin+"/x", "Proxy-Authorization: "+basicValue("alice", "wrong")); err != nil || !strings.HasPrefix(status, "4") {
			t.Fatalf("wrong password: %q %v", status, err)
		}
	}
	failures := r.metric(t, "rustle_auth_failures_total", "plain")

	if code := get1(basicValue("alice", "pw")); code != 429 {
		t.Errorf("alice's right password on a keep-alive connection opened before the cool-down: %d, want 429", code)
	}
	msg := append([]byte{1, 5}, "alice"...)
	s5.Write(append(append(msg, 2), "pw"...))
	if st := make([]byte, 2); !readFull(s5, st) || st[1] == 0 {
		t.Errorf("alice's SOCKS5 login on a connection opened before the cool-down: status %x, want a failure", st)
	}
	if code, err := h2Get(h2c, r.origin+"/h2", "alice", "pw"); err != nil || code != 429 {
		t.Errorf("alice's right password on an h2 connection opened before the cool-down: %d %v, want 429", code, err)
	}
	if got := r.metric(t, "rustle_auth_failures_total", "plain"); got != failures {
		t.Errorf("failures went from %v to %v: credentials were checked while cooling down", failures, got)
	}
	// One record on each listener: the last wrong password on plain may
	// be refused cooling down too, so three records are not one of each.
	for _, l := range []string{"plain", "socks", "tls"} {
		r.records(t, 1, func(rec conformRecord) bool {
			return rec.Listener == l && rec.Reason == "cooling-down" && rec.User == "alice"
		})
	}
}

// debugLines counts the debug lines of log holding every one of parts.
func debugLines(log string, parts ...string) int {
	n := 0
	for line := range strings.Lines(log) {
		if !strings.Contains(line, "level=DEBUG ") {
			continue
		}
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			n++
		}
	}
	return n
}

// readFull reads len(b) bytes from c, reporting whether it could.
func readFull(c net.Conn, b []byte) bool {
	_, err := io.ReadFull(c, b)
	return err == nil
}

// TestH2ParallelGuesses checks that one HTTP/2 connection cannot have its
// guesses checked side by side: of 30 streams guessing alice's password at
// once, the three that reach limits.auth_failures are checked and the
// cool-down they start refuses the rest unchecked (it checked every one
// before: 60 bcrypts in parallel, and a right guess among them passed).
func TestH2ParallelGuesses(t *testing.T) {
	r := startAuthRig(t, func(c *config.Config) {
		c.Limits.AuthFailures = 3
		c.Limits.AuthCooldown.Duration = time.Hour
	})
	cc := r.dialH2(t)
	const streams = 30
	codes := make([]int, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			codes[i], _ = h2Get(cc, r.origin+"/guess", "alice", fmt.Sprintf("guess-%d", i))
		})
	}
	wg.Wait()
	count := map[int]int{}
	for _, c := range codes {
		count[c]++
	}
	if count[200] != 0 || count[407] > 2 {
		t.Errorf("answers by status %v: want no 200 and at most two 407", count)
	}
	if got := r.metric(t, "rustle_auth_failures_total", "tls"); got != 3 {
		t.Errorf("%v guesses checked, want 3: the cool-down did not stop the streams queued behind it", got)
	}
}
