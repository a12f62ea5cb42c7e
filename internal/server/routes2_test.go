package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
)

// parentRecord is what the route tests read of a parent's access log
// record.
type parentRecord struct {
	User, Protocol, Target string
	Status                 int
}

// startHTTPParent starts a rustle that serves as an HTTP parent: a plain
// listener "phttp" with user parent:ppw, its access log and metrics.
func startHTTPParent(t *testing.T) (addr string, access *logBuffer, m *metrics.Metrics) {
	t.Helper()
	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Auth.Users = []config.User{{Name: "parent", Password: "ppw"}}
	cfg.Listen = []config.Listener{{Name: "phttp", Address: "127.0.0.1:0", Protocol: "http"}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m = metrics.New(metrics.Config{})
	access = &logBuffer{}
	_, addrs := startLogged(t, cfg, nil, access, WithMetrics(m))
	return addrs["phttp"], access, m
}

// headerOrigins starts two HTTP origins that answer "origin METHOD
// PATH" and send the header of each request they get to seen, which
// holds n.
func headerOrigins(t *testing.T, n int) (seen chan http.Header, o1, o2 *httptest.Server) {
	t.Helper()
	seen = make(chan http.Header, n)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		io.WriteString(w, "origin "+r.Method+" "+r.URL.Path)
	})
	o1, o2 = httptest.NewServer(h), httptest.NewServer(h)
	t.Cleanup(o1.Close)
	t.Cleanup(o2.Close)
	return seen, o1, o2
}

// parentRecords returns the records of a parent's access log.
func parentRecords(t *testing.T, access *logBuffer) []parentRecord {
	t.Helper()
	var recs []parentRecord
	for line := range strings.SplitSeq(strings.TrimSpace(access.String()), "\n") {
		if line == "" {
			continue
		}
		var r parentRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("parent access log line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// TestRoutesRetry checks the retry on the next parent: through a
// first-available group whose first parent is dead (a closed port, kept
// up by a high max_fails) a GET, a CONNECT and a SOCKS5 CONNECT reach the
// origin through Squid, the next parent; a POST is not retried (502
// naming the dead parent). Through a group whose first parent is an http
// one that closes every connection before answering, a GET is sent again
// to Squid, a POST with a body is not; so is one whose first parent
// closes after the head of its answer, before the (small) body.
func TestRoutesRetry(t *testing.T) {
	plain, tlsURL, originCA := routeOrigins(t)
	squid := proxytest.StartSquid(t)
	hangup := proxytest.NewOrigin(t, proxytest.Hangup())
	// A parent that dies between the head of its answer and the body.
	cutter := proxytest.NewOrigin(t, proxytest.ThenClose(proxytest.Raw("HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\norigin")))
	plain2, _, _ := routeOrigins(t)
	port2 := plain2[strings.LastIndexByte(plain2, ':')+1:]
	dead := proxytest.ClosedPort(t)
	squidURL := "http://" + proxytest.SquidUser + ":" + proxytest.SquidPassword + "@" + squid.Addr
	addrs, access, m := startRouted(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Parents = []config.Parent{
			{Name: "dead", URL: "socks5h://" + dead, MaxFails: 1000},
			{Name: "hangup", URL: "http://" + hangup.Addr, MaxFails: 1000},
			{Name: "cutter", URL: "http://" + cutter.Addr, MaxFails: 1000},
			{Name: "squid", URL: squidURL},
		}
		c.Routes = []config.Route{
			{Name: "closes", Criteria: config.Criteria{Hosts: []string{"localhost"}}, Via: config.Strings{"hangup", "squid"}, Select: "first-available"},
			{Name: "cuts", Criteria: config.Criteria{Ports: []string{port2}}, Via: config.Strings{"cutter", "squid"}, Select: "first-available"},
			{Name: "unreachable", Via: config.Strings{"dead", "squid"}, Select: "first-available"},
		}
	})
	proxy := "http://" + addrs["plain"]
	port := plain[strings.LastIndexByte(plain, ':')+1:]
	steps := []struct {
		name   string
		args   []string
		want   string // curl's output ends with it
		route  string
		parent string
		reason string
	}{
		{"GET, dead parent", []string{"-x", proxy, plain + "/get"}, "origin GET /get 200", "unreachable", "squid", ""},
		{"HEAD, dead parent", []string{"-x", proxy, "-I", plain + "/head"}, " 200", "unreachable", "squid", ""},
		{"CONNECT, dead parent", []string{"-x", proxy, "--cacert", originCA, tlsURL + "/connect"}, "origin GET /connect 200", "unreachable", "squid", ""},
		{"SOCKS5, dead parent", []string{"--socks5-hostname", addrs["socks"], "--cacert", originCA, tlsURL + "/socks"}, "origin GET /socks 200", "unreachable", "squid", ""},
		{"POST, dead parent: not retried", []string{"-x", proxy, "-d", "x=1", plain + "/post"}, "parent proxy dead is unreachable\n 502", "unreachable", "dead", "parent-unreachable"},
		{"GET, parent closes", []string{"-x", proxy, "http://localhost:" + port + "/get"}, "origin GET /get 200", "closes", "squid", ""},
		{"PUT with a body, parent closes: not retried", []string{"-x", proxy, "-X", "PUT", "-d", "x=1", "http://localhost:" + port + "/put"}, " 502", "closes", "hangup", "upstream-failed"},
		{"DELETE, parent closes", []string{"-x", proxy, "-X", "DELETE", "http://localhost:" + port + "/del"}, "origin DELETE /del 200", "closes", "squid", ""},
		{"GET, parent dies in the middle of a small answer", []string{"-x", proxy, plain2 + "/cut"}, "origin GET /cut 200", "cuts", "squid", ""},
	}
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			out, err := curl(t, append([]string{"-w", " %{http_code}", "--no-fail"}, st.args...)...)
			if err != nil || !strings.HasSuffix(out, st.want) {
				t.Errorf("curl = %q, %v; want it to end with %q\nsquid: %s", out, err, st.want, squid.Output())
			}
			r := lastRecord(t, access, i+1)
			if r.Route != st.route || r.Parent != st.parent || r.Reason != st.reason {
				t.Errorf("record %+v; want route %s parent %q reason %q", r, st.route, st.parent, st.reason)
			}
		})
	}
	// Each request through the dead parent failed one connect; the POST's
	// is the only one not followed by a retry.
	if got := proxytest.Metric(t, m, "rustle_parent_connect_failures_total", "parent", "dead"); got != 5 {
		t.Errorf("rustle_parent_connect_failures_total{dead} = %v, want 5", got)
	}
	if got := hangup.NumRequests(); got != 3 {
		t.Errorf("the closing parent got %d requests, want 3 (each once)", got)
	}
}

// TestRoutesH2HTTPParent checks HTTP/2 streams through an http parent
// (rustle's plain listener, which refuses origin-form): Go's HTTP/2
// transport sends GETs to two origins; they reach the parent in
// absolute form with the parent's credentials (the client's never reach
// the origin) on one kept-alive connection, pooled under the parent's
// key. A GET whose first parent closes the connection before answering
// is sent again through the next parent.
func TestRoutesH2HTTPParent(t *testing.T) {
	seen, o1, o2 := headerOrigins(t, 8)
	paddr, pAccess, pm := startHTTPParent(t)
	hangup := proxytest.NewOrigin(t, proxytest.Hangup())
	tl, roots := proxyCerts(t)
	srv, addrs, access, _ := startRoutedServer(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Auth.Users = []config.User{{Name: "alice", Password: "apw"}}
		c.Listen = append(c.Listen, config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
		c.Parents = []config.Parent{
			{Name: "up", URL: "http://parent:ppw@" + paddr},
			{Name: "hangup", URL: "http://" + hangup.Addr, MaxFails: 1000},
		}
		c.Routes = []config.Route{
			{Name: "closes", Criteria: config.Criteria{Hosts: []string{"localhost"}}, Via: config.Strings{"hangup", "up"}, Select: "first-available"},
			{Name: "all", Via: config.Strings{"up"}},
		}
	})
	r := &authRig{addr: addrs, roots: roots}
	cc := r.dialH2(t)
	port2 := o2.URL[strings.LastIndexByte(o2.URL, ':')+1:]
	targets := []string{o1.URL + "/one", o2.URL + "/two", "http://localhost:" + port2 + "/three"}
	for _, u := range targets {
		if status, err := h2Get(cc, u, "alice", "apw"); err != nil || status != 200 {
			t.Fatalf("h2 GET %s: %d, %v", u, status, err)
		}
		if hdr := <-seen; hdr.Get("Proxy-Authorization") != "" {
			t.Errorf("the origin got Proxy-Authorization %q", hdr.Get("Proxy-Authorization"))
		}
		// The next request waits for this one's connection to be back
		// in the pool.
		proxytest.WaitFor(t, "the parent's connection pooled", func() bool {
			return srv.pool.Len() == 1
		})
	}
	var precs []parentRecord
	proxytest.WaitFor(t, "the parent's three records", func() bool {
		precs = parentRecords(t, pAccess)
		return len(precs) >= 3
	})
	for i, pr := range precs {
		if pr.User != "parent" || pr.Protocol != "http" || pr.Target != targets[i] || pr.Status != 200 {
			t.Errorf("parent record %d: %+v, want user parent, protocol http, target %s, 200", i, pr, targets[i])
		}
	}
	if got := proxytest.Metric(t, pm, "rustle_connections_accepted_total", "listener", "phttp"); got != 1 {
		t.Errorf("the parent accepted %v connections for three requests, want 1 (pooled)", got)
	}
	if got := hangup.NumRequests(); got != 1 {
		t.Errorf("the closing parent got %d requests, want 1", got)
	}
	for i, want := range []string{"all", "all", "closes"} {
		if rec := lastRecord(t, access, i+1); rec.Route != want || rec.Parent != "up" || rec.Upstream != paddr || rec.Status != 200 {
			t.Errorf("record %d: %+v, want route %s, parent up, upstream %s", i+1, rec, want, paddr)
		}
	}
}

// startHTTPSParent starts a rustle that serves as an https parent: an
// https listener "ptls" (HTTP/1.1) with user parent:ppw; ca is its CA's
// PEM file.
func startHTTPSParent(t *testing.T) (addr, ca string, access *logBuffer, m *metrics.Metrics) {
	t.Helper()
	tl, _ := proxyCerts(t)
	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Auth.Users = []config.User{{Name: "parent", Password: "ppw"}}
	cfg.Listen = []config.Listener{{Name: "ptls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, ALPN: []string{"http/1.1"}}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m = metrics.New(metrics.Config{})
	access = &logBuffer{}
	_, addrs := startLogged(t, cfg, nil, access, WithMetrics(m))
	return addrs["ptls"], filepath.Join(filepath.Dir(tl.Cert), tlsconf.CAFile), access, m
}

// wsEcho starts a WebSocket origin that echoes every message.
func wsEcho(t *testing.T) *httptest.Server {
	t.Helper()
	ws := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		for {
			typ, msg, err := c.Read(r.Context())
			if err != nil {
				return
			}
			c.Write(r.Context(), typ, msg)
		}
	}))
	t.Cleanup(ws.Close)
	return ws
}

// wsThrough opens a WebSocket to origin (a wsEcho) with coder/websocket
// through the HTTP proxy proxyURL and checks that two messages come back.
func wsThrough(t *testing.T, proxyURL, origin string) {
	t.Helper()
	pu, err := url.Parse(proxyURL)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu)}, Timeout: 10 * time.Second}
	wsEchoVia(t, client, origin, proxyURL)
}

// wsEchoVia opens a WebSocket to origin (a wsEcho) with coder/websocket
// through client, whose proxy via names, and checks that two messages
// come back.
func wsEchoVia(t *testing.T, client *http.Client, origin, via string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, origin, &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		t.Fatalf("WebSocket through %s: %v", via, err)
	}
	defer c.CloseNow()
	for _, m := range []string{"one", strings.Repeat("x", 20000)} {
		if err := c.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
			t.Fatal(err)
		}
		_, got, err := c.Read(ctx)
		if err != nil || string(got) != m {
			t.Fatalf("echo: %v, %d bytes back for %d", err, len(got), len(m))
		}
	}
	if err := c.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatalf("close handshake: %v", err)
	}
}

// TestRoutesHTTPSParent checks plain HTTP and WebSocket through an https
// parent (rustle's https listener): two curl GETs on the plain port and
// an HTTP/2 GET reach the parent in absolute form with its credentials
// over one pooled TLS connection; a WebSocket handshake (coder/websocket)
// goes to it the same way on that connection, which becomes the tunnel.
func TestRoutesHTTPSParent(t *testing.T) {
	plain, _, _ := routeOrigins(t)
	ws := wsEcho(t)
	paddr, pca, pAccess, pm := startHTTPSParent(t)
	tl, roots := proxyCerts(t)
	srv, addrs, access, _ := startRoutedServer(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Listen = append(c.Listen, config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
		c.Parents = []config.Parent{{Name: "tp", URL: "https://parent:ppw@" + paddr, CAFile: pca}}
		c.Routes = []config.Route{{Name: "all", Via: config.Strings{"tp"}}}
	})
	// Each request waits for the last one's connection to be back in
	// the pool.
	pooled := func() {
		t.Helper()
		proxytest.WaitFor(t, "the parent's connection pooled", func() bool {
			return srv.pool.Len() == 1
		})
	}
	for _, path := range []string{"/one", "/two"} {
		if out, err := curl(t, "-x", "http://"+addrs["plain"], plain+path); err != nil || out != "origin GET "+path {
			t.Fatalf("curl %s = %q, %v", path, out, err)
		}
		pooled()
	}
	r := &authRig{addr: addrs, roots: roots}
	if status, err := h2Get(r.dialH2(t), plain+"/h2", "", ""); err != nil || status != 200 {
		t.Fatalf("h2 GET: %d, %v", status, err)
	}
	pooled()
	wsThrough(t, "http://"+addrs["plain"], ws.URL)
	want := []parentRecord{
		{User: "parent", Protocol: "http", Target: plain + "/one", Status: 200},
		{User: "parent", Protocol: "http", Target: plain + "/two", Status: 200},
		{User: "parent", Protocol: "http", Target: plain + "/h2", Status: 200},
		{User: "parent", Protocol: "websocket", Target: ws.URL + "/", Status: 101},
	}
	var precs []parentRecord
	proxytest.WaitFor(t, "the parent's four records", func() bool {
		precs = parentRecords(t, pAccess)
		return len(precs) >= len(want)
	})
	for i, pr := range precs {
		if i >= len(want) || pr != want[i] {
			t.Errorf("parent record %d: %+v, want %+v", i, pr, want[min(i, len(want)-1)])
		}
	}
	if got := proxytest.Metric(t, pm, "rustle_connections_accepted_total", "listener", "ptls"); got != 1 {
		t.Errorf("the parent accepted %v connections, want 1 (pooled for the plain requests, then the WebSocket's)", got)
	}
	for i, proto := range []string{"http", "http", "h2", "websocket"} {
		if rec := lastRecord(t, access, i+1); rec.Protocol != proto || rec.Route != "all" || rec.Parent != "tp" || rec.Status/100 > 2 && rec.Status != 101 {
			t.Errorf("record %d: %+v, want %s through parent tp", i+1, rec, proto)
		}
	}
}

// TestRoutesSessionKey checks session keys end to end, with Go's
// transport as the client: alice-session-N authenticates as alice with
// alice's password (a wrong one is still 407); a hash-session route over
// three rustle parents keeps session 42 on one parent across 1,000
// keep-alive requests while other sessions spread over the others; the
// access log names the whole user; the per-user metrics count alice; and
// max_connections_per_user counts alice's sessions together.
func TestRoutesSessionKey(t *testing.T) {
	var paddrs [3]string
	var paccess [3]*logBuffer
	for i := range paddrs {
		paddrs[i], paccess[i], _ = startHTTPParent(t)
	}
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "origin "+r.URL.Path)
	}))
	t.Cleanup(o.Close)
	m := metrics.New(metrics.Config{PerUser: true})
	access := &logBuffer{}
	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Metrics.PerUser = true
	cfg.Limits.MaxConnectionsPerUser = 1
	cfg.Auth.Users = []config.User{{Name: "alice", Password: "apw"}}
	cfg.Listen = []config.Listener{{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"}}
	cfg.Parents = []config.Parent{
		{Name: "p0", URL: "http://parent:ppw@" + paddrs[0]},
		{Name: "p1", URL: "http://parent:ppw@" + paddrs[1]},
		{Name: "p2", URL: "http://parent:ppw@" + paddrs[2]},
	}
	cfg.Routes = []config.Route{{Name: "sticky", Via: config.Strings{"p0", "p1", "p2"}, Select: "hash-session"}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	_, addrs := startLogged(t, cfg, nil, access, WithMetrics(m))

	client := func(user, pass string) *http.Client {
		pu := &url.URL{Scheme: "http", Host: addrs["plain"], User: url.UserPassword(user, pass)}
		tr := &http.Transport{Proxy: http.ProxyURL(pu), MaxConnsPerHost: 1}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	get := func(c *http.Client, path string) int {
		t.Helper()
		resp, err := c.Get(o.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := get(client("alice-session-42", "wrong"), "/wrong"); st != 407 {
		t.Fatalf("alice-session-42 with a wrong password: %d, want 407", st)
	}
	c42 := client("alice-session-42", "apw")
	const n = 1000
	for i := range n {
		if st := get(c42, "/s42"); st != 200 {
			t.Fatalf("request %d of session 42: %d", i, st)
		}
	}
	c42.Transport.(*http.Transport).CloseIdleConnections()
	counts := func() (c [3]int) {
		for i := range paccess {
			c[i] = len(parentRecords(t, paccess[i]))
		}
		return c
	}
	var got [3]int
	proxytest.WaitFor(t, "the parents' records of session 42", func() bool {
		got = counts()
		return got[0]+got[1]+got[2] >= n
	})
	if got[0]+got[1]+got[2] != n || got[0] != n && got[1] != n && got[2] != n {
		t.Fatalf("session 42's %d requests reached the parents %v times: want all on one", n, got)
	}
	// Other sessions of alice spread over the parents.
	used := map[string]bool{}
	for s := range 12 {
		user := "alice-session-" + strconv.Itoa(s)
		c := client(user, "apw")
		if st := get(c, "/spread"); st != 200 {
			t.Fatalf("%s: %d", user, st)
		}
		c.Transport.(*http.Transport).CloseIdleConnections()
		used[lastRecord(t, access, 1+n+s+1).Parent] = true
	}
	if len(used) < 2 {
		t.Errorf("12 sessions all went through %v: hash-session does not spread them", used)
	}
	recs := routeRecords(t, access)
	for i, r := range recs[1 : 1+n] {
		if r.Status != 200 || r.Parent != recs[1].Parent {
			t.Fatalf("record %d: %+v, want 200 through %s", i+1, r, recs[1].Parent)
		}
	}
	var users struct{ User string }
	line := strings.SplitN(access.String(), "\n", 3)[1]
	if err := json.Unmarshal([]byte(line), &users); err != nil || users.User != "alice-session-42" {
		t.Errorf("access log user %q (%v), want the whole name alice-session-42", users.User, err)
	}
	if got := proxytest.Metric(t, m, "rustle_user_requests_total", "user", "alice"); got != n+12 {
		t.Errorf("rustle_user_requests_total{user=alice} = %v, want %d", got, n+12)
	}

	// One connection of alice's at a time: session 1 holds a tunnel,
	// session 2 is refused.
	tun := proxytest.Connect(t, addrs["plain"], strings.TrimPrefix(o.URL, "http://"), "Proxy-Authorization: "+basicValue("alice-session-1", "apw"))
	defer tun.Close()
	if st := get(client("alice-session-2", "apw"), "/limited"); st != 429 {
		t.Errorf("a second session of alice while the first holds a tunnel: %d, want 429", st)
	}
}

// TestRoutesWebSocketSquid checks a WebSocket (coder/websocket) through
// Squid as an http parent that allows CONNECT to port 443 only, as
// Squid's default configuration does, and forwards upgrades
// (http_upgrade_request_protocols, as bench/squid.conf): the handshake
// goes to Squid in absolute form, not as a CONNECT to the origin's port.
func TestRoutesWebSocketSquid(t *testing.T) {
	ws := wsEcho(t)
	squid := proxytest.StartSquidWith(t, proxytest.SquidConfig{ConnectPorts: []string{"443"}})
	addrs, access, _ := startRouted(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Parents = []config.Parent{{Name: "squid", URL: "http://" + proxytest.SquidUser + ":" + proxytest.SquidPassword + "@" + squid.Addr}}
		c.Routes = []config.Route{{Name: "all", Via: config.Strings{"squid"}}}
	})
	wsThrough(t, "http://"+addrs["plain"], ws.URL)
	if rec := lastRecord(t, access, 1); rec.Protocol != "websocket" || rec.Status != 101 || rec.Parent != "squid" || rec.Upstream != squid.Addr {
		t.Errorf("record %+v, want a websocket through squid (%s)", rec, squid.Addr)
	}
}

// TestRoutesParentKilled kills a parent while 64 keep-alive clients (Go's
// transport) and 100 CONNECT tunnels run through a round-robin group of
// three real parents (two Squids and a rustle): not one GET fails (each
// whose parent dies before its response is sent again through the next),
// the tunnels through the dead parent end and the others go on, new
// tunnels go through the live parents, and the dead parent, started again
// on its port, is back once its active probe passes (its cool-down is
// far longer than the test) and takes requests again.
func TestRoutesParentKilled(t *testing.T) {
	o := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	}))
	t.Cleanup(o.Close)
	echo := proxytest.NewEcho(t)
	sqA, sqB := proxytest.StartSquid(t), proxytest.StartSquid(t)
	rC, _, _ := startHTTPParent(t)
	squid := func(addr string) string {
		return "http://" + proxytest.SquidUser + ":" + proxytest.SquidPassword + "@" + addr
	}
	addrs, access, m := startRouted(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Parents = []config.Parent{
			{Name: "a", URL: squid(sqA.Addr), Cooldown: config.Duration{Duration: time.Hour},
				ProbeInterval: config.Duration{Duration: 100 * time.Millisecond}},
			{Name: "b", URL: squid(sqB.Addr)},
			{Name: "c", URL: "http://parent:ppw@" + rC},
		}
		c.Routes = []config.Route{{Name: "group", Via: config.Strings{"a", "b", "c"}, Select: "round-robin"}}
	})
	metric := func(name, parent string) float64 {
		return proxytest.Metric(t, m, name, "parent", parent)
	}

	// 64 keep-alive clients, each on one connection, GET in a loop.
	var ok, failed atomic.Int64
	var errMu sync.Mutex
	var errs []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	pu := &url.URL{Scheme: "http", Host: addrs["plain"]}
	for range 64 {
		tr := &http.Transport{Proxy: http.ProxyURL(pu), MaxConnsPerHost: 1}
		client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer tr.CloseIdleConnections()
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := client.Get(o.URL + "/k")
				if err == nil {
					var body []byte
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && (resp.StatusCode != 200 || string(body) != "ok") {
						err = &statusError{resp.StatusCode, string(body)}
					}
				}
				if err != nil {
					failed.Add(1)
					errMu.Lock()
					if len(errs) < 5 {
						errs = append(errs, err.Error())
					}
					errMu.Unlock()
					continue
				}
				ok.Add(1)
			}
		}()
	}
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	t.Cleanup(halt)

	// 100 tunnels, in turn through the parents.
	ping := func(c net.Conn) error {
		c.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
		if _, err := io.WriteString(c, "ping"); err != nil {
			return err
		}
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err != nil {
			return err
		}
		if string(buf) != "ping" {
			return io.ErrUnexpectedEOF
		}
		return nil
	}
	tunnels := make([]net.Conn, 100)
	for i := range tunnels {
		tunnels[i] = proxytest.Connect(t, addrs["plain"], echo.Addr)
		if err := ping(tunnels[i]); err != nil {
			t.Fatalf("tunnel %d: %v", i, err)
		}
	}
	proxytest.WaitFor(t, "requests through every parent", func() bool {
		return ok.Load() >= 64*5 && metric("rustle_parent_requests_total", "a") > 0 &&
			metric("rustle_parent_requests_total", "b") > 0 && metric("rustle_parent_requests_total", "c") > 0
	})

	sqA.Stop()
	before := ok.Load()
	dead := 0
	for i, c := range tunnels {
		if ping(c) != nil {
			dead++
			c.Close()
			tunnels[i] = nil
		}
	}
	if dead == 0 || dead == len(tunnels) {
		t.Errorf("%d of %d tunnels ended with parent a; want those through a, about a third", dead, len(tunnels))
	}
	proxytest.WaitFor(t, "parent a down", func() bool { return metric("rustle_parent_up", "a") == 0 })
	proxytest.WaitFor(t, "more requests after the kill", func() bool { return ok.Load() >= before+64*10 })
	// The tunnels that ended were a's: their records say so. The log
	// holds a record per GET too: it is read as it grows.
	connects := &routeTail{log: access, keep: func(r routeRecord) bool { return r.Protocol == "connect" }}
	proxytest.WaitFor(t, "the ended tunnels' records", func() bool {
		n := 0
		for _, r := range connects.records(t) {
			if r.Parent == "a" {
				n++
			}
		}
		return n == dead
	})
	// New tunnels go through b and c.
	newTunnels := 30
	for i := range newTunnels {
		c := proxytest.Connect(t, addrs["plain"], echo.Addr)
		if err := ping(c); err != nil {
			t.Errorf("new tunnel %d: %v", i, err)
		}
		c.Close()
	}
	// The others still carry bytes.
	for i, c := range tunnels {
		if c == nil {
			continue
		}
		if err := ping(c); err != nil {
			t.Errorf("tunnel %d (not through a): %v", i, err)
		}
	}

	// a comes back on its port; its probe finds it.
	requestsA := metric("rustle_parent_requests_total", "a")
	proxytest.StartSquidWith(t, proxytest.SquidConfig{Addr: sqA.Addr})
	proxytest.WaitFor(t, "parent a up again", func() bool { return metric("rustle_parent_up", "a") == 1 })
	proxytest.WaitFor(t, "requests through a again", func() bool {
		return metric("rustle_parent_requests_total", "a") > requestsA+10
	})
	halt()
	for _, c := range tunnels {
		if c != nil {
			c.Close()
		}
	}
	if n := failed.Load(); n != 0 {
		var bad []string
		for line := range strings.SplitSeq(access.String(), "\n") {
			var r struct {
				Protocol, Reason, Parent string
				Status                   int
				BytesDown                int64 `json:"bytes_down"`
			}
			if json.Unmarshal([]byte(line), &r) == nil && r.Protocol == "http" && (r.Status != 200 || r.Reason != "" || r.BytesDown != 2) {
				bad = append(bad, line)
			}
		}
		t.Errorf("%d of %d GETs failed; first: %q; records %+v", n, n+ok.Load(), errs, bad)
	}
	var recs []routeRecord
	defer func() {
		if t.Failed() {
			t.Logf("%d tunnel records, want %d: %+v", len(recs), len(tunnels)+newTunnels, recs)
		}
	}()
	proxytest.WaitFor(t, "every tunnel's record", func() bool {
		recs = connects.records(t)
		return len(recs) == len(tunnels)+newTunnels
	})
	throughA := 0
	for _, r := range connects.records(t) {
		if r.Parent == "a" {
			throughA++
		}
		if r.Status != 200 {
			t.Errorf("tunnel record %+v, want 200", r)
		}
	}
	if throughA != dead {
		t.Errorf("%d tunnel records through a, want %d (the first ones that ended; no new one)", throughA, dead)
	}
	t.Logf("%d GETs, %d tunnels ended with parent a", ok.Load(), dead)
}

// statusError is a response other than the 200 "ok" a client wanted.
type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string { return strconv.Itoa(e.status) + " " + e.body }

// TestRoutesH2CutAnswer checks an HTTP/2 GET whose first parent answers
// a head and closes before its small body: nothing of it went to the
// client, so it is sent again through the next parent and arrives whole.
func TestRoutesH2CutAnswer(t *testing.T) {
	plain, _, _ := routeOrigins(t)
	paddr, _, _ := startHTTPParent(t)
	cutter := proxytest.NewOrigin(t, proxytest.ThenClose(proxytest.Raw("HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\norigin")))
	tl, roots := proxyCerts(t)
	addrs, access, _ := startRouted(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Listen = append(c.Listen, config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
		c.Parents = []config.Parent{
			{Name: "cutter", URL: "http://" + cutter.Addr, MaxFails: 1000},
			{Name: "up", URL: "http://parent:ppw@" + paddr},
		}
		c.Routes = []config.Route{{Name: "all", Via: config.Strings{"cutter", "up"}, Select: "first-available"}}
	})
	cc := (&authRig{addr: addrs, roots: roots}).dialH2(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", plain+"/cut", nil)
	resp, err := cc.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(body) != "origin GET /cut" {
		t.Errorf("h2 GET: %d %q, %v; want 200 %q", resp.StatusCode, body, err, "origin GET /cut")
	}
	if rec := lastRecord(t, access, 1); rec.Parent != "up" || rec.Status != 200 {
		t.Errorf("record %+v, want 200 through up", rec)
	}
}
