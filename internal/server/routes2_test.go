package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
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
// to Squid, a POST with a body is not.
func TestRoutesRetry(t *testing.T) {
	plain, tlsURL, originCA := routeOrigins(t)
	squid := proxytest.StartSquid(t)
	hangup := proxytest.NewOrigin(t, proxytest.Hangup())
	dead := proxytest.ClosedPort(t)
	squidURL := "http://" + proxytest.SquidUser + ":" + proxytest.SquidPassword + "@" + squid.Addr
	addrs, access, m := startRouted(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Parents = []config.Parent{
			{Name: "dead", URL: "socks5h://" + dead, MaxFails: 1000},
			{Name: "hangup", URL: "http://" + hangup.Addr, MaxFails: 1000},
			{Name: "squid", URL: squidURL},
		}
		c.Routes = []config.Route{
			{Name: "closes", Hosts: []string{"localhost"}, Via: config.Strings{"hangup", "squid"}, Select: "first-available"},
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
	seen := make(chan http.Header, 8)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		io.WriteString(w, "origin "+r.Method+" "+r.URL.Path)
	})
	o1, o2 := httptest.NewServer(h), httptest.NewServer(h)
	t.Cleanup(o1.Close)
	t.Cleanup(o2.Close)
	paddr, pAccess, pm := startHTTPParent(t)
	hangup := proxytest.NewOrigin(t, proxytest.Hangup())
	tl, roots := proxyCerts(t)
	addrs, access, _ := startRouted(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Auth.Users = []config.User{{Name: "alice", Password: "apw"}}
		c.Listen = append(c.Listen, config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
		c.Parents = []config.Parent{
			{Name: "up", URL: "http://parent:ppw@" + paddr},
			{Name: "hangup", URL: "http://" + hangup.Addr, MaxFails: 1000},
		}
		c.Routes = []config.Route{
			{Name: "closes", Hosts: []string{"localhost"}, Via: config.Strings{"hangup", "up"}, Select: "first-available"},
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
