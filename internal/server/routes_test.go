package server

import (
	"bufio"
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
)

// routeRecord is what the route tests read of an access log record.
type routeRecord struct {
	Protocol string `json:"protocol"`
	Target   string `json:"target"`
	Status   int    `json:"status"`
	Upstream string `json:"upstream"`
	Reason   string `json:"reason"`
	Route    string `json:"route"`
	Parent   string `json:"parent"`
}

func routeRecords(t *testing.T, log *logBuffer) []routeRecord {
	t.Helper()
	var recs []routeRecord
	for line := range strings.SplitSeq(strings.TrimSpace(log.String()), "\n") {
		if line == "" {
			continue
		}
		var r routeRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// routeTail reads a JSON access log as it grows, each record parsed once
// and kept when keep accepts it: a wait that polls it costs what was
// written since its last poll, not the whole log. Parsing the whole log
// at each poll (every 2ms) of a test with tens of thousands of requests
// took the CPU the access log's writer needed on a loaded machine.
type routeTail struct {
	log  *logBuffer
	keep func(routeRecord) bool
	off  int
	recs []routeRecord
}

// records returns the records kept so far, in the log's order.
func (r *routeTail) records(t *testing.T) []routeRecord {
	t.Helper()
	lines, off := r.log.LinesFrom(r.off)
	r.off = off
	for line := range strings.SplitSeq(lines, "\n") {
		if line == "" {
			continue
		}
		var rec routeRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		if r.keep(rec) {
			r.recs = append(r.recs, rec)
		}
	}
	return r.recs
}

// curl runs curl (required under CI) with args and returns its output.
func curl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin := proxytest.RequireTool(t, "curl", "curl")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args = append([]string{"-sS", "--fail", "--max-time", "15", "--noproxy", ""}, args...)
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

// startRustleParent starts a rustle that serves as a parent: an https
// listener with user parent:ppw (ca is its CA's PEM file) and a socks5
// listener with the same user.
func startRustleParent(t *testing.T) (httpsAddr, socksAddr, ca string, access *logBuffer) {
	t.Helper()
	tl, _ := proxyCerts(t)
	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Auth.Users = []config.User{{Name: "parent", Password: "ppw"}}
	cfg.Listen = []config.Listener{
		{Name: "ptls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, ALPN: []string{"http/1.1"}},
		{Name: "psocks", Address: "127.0.0.1:0", Protocol: "socks5"},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	access = &logBuffer{}
	_, addrs := startLogged(t, cfg, nil, access)
	return addrs["ptls"], addrs["psocks"], filepath.Join(filepath.Dir(tl.Cert), tlsconf.CAFile), access
}

// routeOrigins starts a plain and a TLS HTTP origin on loopback and
// returns their URLs and a PEM file of the TLS one's certificate.
func routeOrigins(t *testing.T) (plain, tlsURL, caFile string) {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "origin "+r.Method+" "+r.URL.Path)
	})
	o := httptest.NewServer(h)
	t.Cleanup(o.Close)
	to := httptest.NewTLSServer(h)
	t.Cleanup(to.Close)
	caFile = filepath.Join(t.TempDir(), "origin.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: to.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return o.URL, to.URL, caFile
}

// TestRoutesRealParents runs rustle with -F (AddForward) through each
// kind of parent, started by the test: Squid as an HTTP parent with Basic
// auth, Dante as a socks5 and a socks5h parent, rustle itself as an
// HTTPS parent and as a SOCKS5 parent with username auth. curl drives a
// plain HTTP request and a CONNECT on rustle's plain port, a SOCKS5
// CONNECT (--socks5-hostname) and a SOCKS4a CONNECT; each reaches the
// origin (a plain request through the https parent in absolute form over
// TLS), the access log names the route and the parent, and rustle's
// parent metrics count it.
func TestRoutesRealParents(t *testing.T) {
	plain, tlsURL, originCA := routeOrigins(t)
	squid := proxytest.StartSquid(t)
	dante := proxytest.StartDante(t)
	pHTTPS, pSOCKS, pCA, pAccess := startRustleParent(t)
	tests := []struct {
		name, url string
		ca        string
		tcp       bool // the tunnel ends in a TCP connection to the parent: the upstream logged is the parent's
	}{
		{"squid", "http://" + proxytest.SquidUser + ":" + proxytest.SquidPassword + "@" + squid.Addr, "", true},
		{"dante socks5", "socks5://" + dante.Addr, "", true},
		{"dante socks5h", "socks5h://" + dante.Addr, "", true},
		{"rustle https", "https://parent:ppw@" + pHTTPS, pCA, false},
		{"rustle socks5 with auth", "socks5://parent:ppw@" + pSOCKS, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Workers = 1
			cfg.AllowPrivate = []string{"127.0.0.0/8"}
			cfg.Listen = []config.Listener{
				{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"},
				{Name: "socks", Address: "127.0.0.1:0", Protocol: "socks5"},
			}
			if err := cfg.AddForward(tt.url); err != nil {
				t.Fatal(err)
			}
			cfg.SetDefaults()
			cfg.Parents[0].CAFile = tt.ca
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			m := metrics.New(metrics.Config{})
			access := &logBuffer{}
			_, addrs := startLogged(t, cfg, nil, access, WithMetrics(m))
			pBefore := strings.Count(pAccess.String(), "\n")

			asks := []struct {
				name string
				args []string
				want string
			}{
				{"plain GET", []string{"-x", "http://" + addrs["plain"], plain + "/get"}, "origin GET /get"},
				{"CONNECT", []string{"-x", "http://" + addrs["plain"], "--cacert", originCA, tlsURL + "/connect"}, "origin GET /connect"},
				{"SOCKS5", []string{"--socks5-hostname", addrs["socks"], "--cacert", originCA, tlsURL + "/socks"}, "origin GET /socks"},
				{"SOCKS4a", []string{"--socks4a", addrs["socks"], plain + "/socks4"}, "origin GET /socks4"},
			}
			for _, a := range asks {
				out, err := curl(t, a.args...)
				if err != nil || !strings.HasSuffix(out, a.want) {
					t.Errorf("%s: curl = %q, %v, want %q\nsquid: %s\ndante: %s", a.name, out, err, a.want, squid.Output(), dante.Output())
				}
			}
			var recs []routeRecord
			proxytest.WaitFor(t, "four access log records", func() bool {
				recs = routeRecords(t, access)
				return len(recs) >= 4
			})
			for _, r := range recs {
				if r.Route != config.ForwardName || r.Parent != config.ForwardName || !(r.Status == 200 || r.Protocol == "socks5" && r.Status == 0 || r.Protocol == "socks4" && (r.Status == 0 || r.Status == 90)) {
					t.Errorf("record %+v: want route and parent %q", r, config.ForwardName)
				}
				if tt.tcp {
					if !strings.HasSuffix(tt.url, "@"+r.Upstream) && !strings.HasSuffix(tt.url, "//"+r.Upstream) {
						t.Errorf("record %+v: upstream is not the parent %s", r, tt.url)
					}
				}
			}
			if got := proxytest.Metric(t, m, "rustle_parent_requests_total", "parent", config.ForwardName); got != 4 {
				t.Errorf("rustle_parent_requests_total = %v, want 4", got)
			}
			if got := proxytest.Metric(t, m, "rustle_parent_up", "parent", config.ForwardName); got != 1 {
				t.Errorf("rustle_parent_up = %v, want 1", got)
			}
			if strings.HasPrefix(tt.name, "rustle") {
				// The parent logs what went through it: the tunnels
				// and the plain request.
				want := 4
				proxytest.WaitFor(t, "the parent's records", func() bool {
					return strings.Count(pAccess.String(), "\n")-pBefore >= want
				})
				if got := strings.Count(pAccess.String(), "\n") - pBefore; got != want {
					t.Errorf("the parent logged %d records, want %d", got, want)
				}
			}
		})
	}
}

// startRouted starts rustle with a plain and a socks5 listener, the
// parents and routes modify sets, its access log and metrics.
func startRouted(t *testing.T, modify func(c *config.Config)) (map[string]string, *logBuffer, *metrics.Metrics) {
	t.Helper()
	_, addrs, access, m := startRoutedServer(t, modify)
	return addrs, access, m
}

// startRoutedServer is startRouted that also returns the server.
func startRoutedServer(t *testing.T, modify func(c *config.Config)) (*Server, map[string]string, *logBuffer, *metrics.Metrics) {
	t.Helper()
	cfg := config.Default()
	cfg.Workers = 1
	cfg.Listen = []config.Listener{
		{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"},
		{Name: "socks", Address: "127.0.0.1:0", Protocol: "socks5"},
	}
	modify(cfg)
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Config{})
	access := &logBuffer{}
	s, addrs := startLogged(t, cfg, nil, access, WithMetrics(m))
	return s, addrs, access, m
}

// lastRecord waits for the n-th access log record and returns it.
func lastRecord(t *testing.T, access *logBuffer, n int) routeRecord {
	t.Helper()
	var recs []routeRecord
	proxytest.WaitFor(t, "an access log record", func() bool {
		recs = routeRecords(t, access)
		return len(recs) >= n
	})
	return recs[n-1]
}

// TestRoutesGuard checks what the private-destination guard sees on a
// route through a parent: rustle resolves for a socks5 parent and checks
// what it resolved; for socks5h and http parents an IP literal is still
// refused, but a name goes to the parent, which resolves it where the
// guard cannot see (here localhost, let through).
func TestRoutesGuard(t *testing.T) {
	_, tlsURL, originCA := routeOrigins(t)
	port := tlsURL[strings.LastIndexByte(tlsURL, ':')+1:]
	dante := proxytest.StartDante(t)
	addrs, access, _ := startRouted(t, func(c *config.Config) {
		c.Parents = []config.Parent{
			{Name: "d5", URL: "socks5://" + dante.Addr},
			{Name: "d5h", URL: "socks5h://" + dante.Addr},
		}
		c.Routes = []config.Route{
			{Name: "resolved-here", Criteria: config.Criteria{Protocols: []string{"socks5"}}, Via: config.Strings{"d5"}},
			{Name: "resolved-there", Via: config.Strings{"d5h"}},
		}
	})
	tests := []struct {
		name   string
		args   []string
		ok     bool
		route  string
		reason string
	}{
		{"socks5 parent, name resolved by rustle to loopback", []string{"--socks5-hostname", addrs["socks"], "-k", "https://localhost:" + port + "/"}, false, "resolved-here", "forbidden"},
		{"socks5 parent, loopback literal", []string{"--socks5-hostname", addrs["socks"], "-k", "https://127.0.0.1:" + port + "/"}, false, "resolved-here", "forbidden"},
		{"socks5h parent, loopback literal", []string{"-x", "http://" + addrs["plain"], "--cacert", originCA, tlsURL + "/"}, false, "resolved-there", "forbidden"},
		{"socks5h parent, a name the parent resolves", []string{"-x", "http://" + addrs["plain"], "-k", "https://localhost:" + port + "/"}, true, "resolved-there", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := curl(t, tt.args...)
			if ok := err == nil && out == "origin GET /"; ok != tt.ok {
				t.Errorf("curl = %q, %v; want success %v", out, err, tt.ok)
			}
			r := lastRecord(t, access, i+1)
			if r.Route != tt.route || r.Reason != tt.reason {
				t.Errorf("record %+v: want route %s, reason %q", r, tt.route, tt.reason)
			}
		})
	}
}

// TestRoutesHealth checks passive health through rustle: a dead parent
// first in a first-available group fails its request's connect (which
// is retried on the next parent) and is then down, the next requests go
// to the live one; a route whose only parent is down refuses with no-parent, or goes
// direct with fallback = "direct".
func TestRoutesHealth(t *testing.T) {
	plain, _, _ := routeOrigins(t)
	dante := proxytest.StartDante(t)
	dead := proxytest.ClosedPort(t)
	addrs, access, m := startRouted(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Parents = []config.Parent{
			{Name: "dead", URL: "socks5h://" + dead, MaxFails: 1},
			{Name: "dante", URL: "socks5h://" + dante.Addr},
		}
		c.Routes = []config.Route{
			{Name: "failover", Criteria: config.Criteria{Methods: []string{"GET"}}, Via: config.Strings{"dead", "dante"}, Select: "first-available"},
			{Name: "refuse", Criteria: config.Criteria{Methods: []string{"PUT"}}, Via: config.Strings{"dead"}},
			{Name: "fallback", Criteria: config.Criteria{Methods: []string{"DELETE"}}, Via: config.Strings{"dead"}, Fallback: "direct"},
		}
	})
	proxy := "http://" + addrs["plain"]
	get := func(method string) (string, error) {
		return curl(t, "-x", proxy, "-X", method, "-w", " %{http_code}", "--no-fail", plain+"/h")
	}
	steps := []struct {
		method string
		want   string // curl's output ends with it
		route  string
		parent string
		reason string
	}{
		{"GET", "origin GET /h 200", "failover", "dante", ""},
		{"GET", "origin GET /h 200", "failover", "dante", ""},
		{"GET", "origin GET /h 200", "failover", "dante", ""},
		{"PUT", "no parent proxy of route refuse is up\n 502", "refuse", "", "no-parent"},
		{"DELETE", "origin DELETE /h 200", "fallback", "", ""},
	}
	for i, st := range steps {
		out, err := get(st.method)
		if err != nil || !strings.HasSuffix(out, st.want) {
			t.Errorf("step %d %s: curl = %q, %v; want it to end with %q", i, st.method, out, err, st.want)
		}
		r := lastRecord(t, access, i+1)
		if r.Route != st.route || r.Parent != st.parent || r.Reason != st.reason {
			t.Errorf("step %d: record %+v; want route %s parent %q reason %q", i, r, st.route, st.parent, st.reason)
		}
	}
	if got := proxytest.Metric(t, m, "rustle_parent_up", "parent", "dead"); got != 0 {
		t.Errorf("rustle_parent_up{dead} = %v, want 0", got)
	}
	if got := proxytest.Metric(t, m, "rustle_parent_connect_failures_total", "parent", "dead"); got != 1 {
		t.Errorf("rustle_parent_connect_failures_total{dead} = %v, want 1", got)
	}
	if got := proxytest.Metric(t, m, "rustle_parent_requests_total", "parent", "dante"); got != 3 {
		t.Errorf("rustle_parent_requests_total{dante} = %v, want 3", got)
	}
}

// TestRoutesHTTPParentForward checks plain HTTP through an HTTP parent
// (rustle's plain listener, which refuses origin-form): the request
// arrives in absolute form with the parent's credentials, the client's
// never reach the origin, and the keep-alive connection to the parent is
// reused for another origin and another client connection.
func TestRoutesHTTPParentForward(t *testing.T) {
	seen, o1, o2 := headerOrigins(t, 4)

	paddr, pAccess, pm := startHTTPParent(t)

	addrs, access, _ := startRouted(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Auth.Users = []config.User{{Name: "alice", Password: "apw"}}
		c.Parents = []config.Parent{{Name: "up", URL: "http://parent:ppw@" + paddr}}
		c.Routes = []config.Route{{Name: "all", Via: config.Strings{"up"}}}
	})
	for i, u := range []string{o1.URL + "/one", o2.URL + "/two"} {
		out, err := curl(t, "-x", "http://alice:apw@"+addrs["plain"], u)
		if want := "origin GET /" + []string{"one", "two"}[i]; err != nil || out != want {
			t.Fatalf("curl %s = %q, %v; want %q", u, out, err, want)
		}
		if hdr := <-seen; hdr.Get("Proxy-Authorization") != "" {
			t.Errorf("the origin got Proxy-Authorization %q", hdr.Get("Proxy-Authorization"))
		}
	}
	proxytest.WaitFor(t, "the parent's two records", func() bool { return strings.Count(pAccess.String(), "\n") >= 2 })
	for i, r := range parentRecords(t, pAccess) {
		want := []string{o1.URL + "/one", o2.URL + "/two"}[i]
		if r.User != "parent" || r.Protocol != "http" || r.Target != want {
			t.Errorf("parent record %d: %+v, want user parent, protocol http, target %s", i, r, want)
		}
	}
	if got := proxytest.Metric(t, pm, "rustle_connections_accepted_total", "listener", "phttp"); got != 1 {
		t.Errorf("the parent accepted %v connections for two requests, want 1 (kept alive)", got)
	}
	for i := 1; i <= 2; i++ {
		if r := lastRecord(t, access, i); r.Route != "all" || r.Parent != "up" || r.Upstream != paddr {
			t.Errorf("record %d: %+v, want route all, parent up, upstream %s", i, r, paddr)
		}
	}
}

// TestRoutesHTTPParentAuthFailed checks that Squid's 407 to a forwarded
// request (wrong parent credentials in the configuration) reaches the
// client as a 502 naming the parent, not as a 407 it would answer with
// its own credentials.
func TestRoutesHTTPParentAuthFailed(t *testing.T) {
	plain, _, _ := routeOrigins(t)
	squid := proxytest.StartSquid(t)
	addrs, access, _ := startRouted(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Parents = []config.Parent{{Name: "squid", URL: "http://" + proxytest.SquidUser + ":wrong@" + squid.Addr}}
		c.Routes = []config.Route{{Name: "all", Via: config.Strings{"squid"}}}
	})
	out, err := curl(t, "-x", "http://"+addrs["plain"], "-w", " %{http_code}", "--no-fail", plain+"/x")
	if want := "parent proxy squid refused rustle's credentials\n 502"; err != nil || !strings.HasSuffix(out, want) {
		t.Errorf("curl = %q, %v; want it to end with %q", out, err, want)
	}
	if r := lastRecord(t, access, 1); r.Reason != "parent-auth-failed" || r.Parent != "squid" {
		t.Errorf("record %+v, want reason parent-auth-failed", r)
	}
}

// TestRoutesH2 checks that HTTP/2 streams go through a route's parent:
// a forwarded request and a CONNECT on an https listener, through Dante.
func TestRoutesH2(t *testing.T) {
	plain, _, _ := routeOrigins(t)
	dante := proxytest.StartDante(t)
	tl, roots := proxyCerts(t)
	addrs, access, _ := startRouted(t, func(c *config.Config) {
		c.AllowPrivate = []string{"127.0.0.0/8"}
		c.Listen = append(c.Listen, config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl})
		c.Parents = []config.Parent{{Name: "dante", URL: "socks5h://" + dante.Addr}}
		c.Routes = []config.Route{{Name: "all", Via: config.Strings{"dante"}}}
	})
	r := &authRig{addr: addrs, roots: roots}
	cc := r.dialH2(t)
	if status, err := h2Get(cc, plain+"/h2", "", ""); err != nil || status != 200 {
		t.Fatalf("h2 GET: %d, %v", status, err)
	}
	host := strings.TrimPrefix(plain, "http://")
	pr, pw := io.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "CONNECT", "http://"+host, pr)
	req.Host = host
	resp, err := cc.RoundTrip(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("h2 CONNECT: %v, %v", resp, err)
	}
	go io.WriteString(pw, "GET /tunnel HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
	got, _ := http.ReadResponse(bufio.NewReader(resp.Body), nil)
	if got == nil {
		t.Fatal("no response through the h2 tunnel")
	}
	body, _ := io.ReadAll(got.Body)
	if string(body) != "origin GET /tunnel" {
		t.Errorf("through the h2 tunnel: %q", body)
	}
	pw.Close()
	resp.Body.Close()
	cc.Close()
	for i := 1; i <= 2; i++ {
		if rec := lastRecord(t, access, i); rec.Route != "all" || rec.Parent != "dante" || rec.Upstream != dante.Addr {
			t.Errorf("record %d: %+v, want route all, parent dante, upstream %s", i, rec, dante.Addr)
		}
	}
}

// TestRoutesSplice checks that a tunnel through a plain parent (Squid,
// Dante) ends in the splice engine: it is counted by the engines while it
// carries bytes.
func TestRoutesSplice(t *testing.T) {
	echo := proxytest.NewEcho(t)
	squid := proxytest.StartSquid(t)
	dante := proxytest.StartDante(t)
	for _, url := range []string{
		"http://" + proxytest.SquidUser + ":" + proxytest.SquidPassword + "@" + squid.Addr,
		"socks5://" + dante.Addr,
	} {
		t.Run(url[:strings.Index(url, ":")], func(t *testing.T) {
			cfg := config.Default()
			cfg.Workers = 1
			cfg.AllowPrivate = []string{"127.0.0.0/8"}
			cfg.Listen = []config.Listener{{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"}}
			if err := cfg.AddForward(url); err != nil {
				t.Fatal(err)
			}
			cfg.SetDefaults()
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			s, addrs := startLogged(t, cfg, nil, &logBuffer{})
			c := proxytest.Connect(t, addrs["plain"], echo.Addr)
			c.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
			if _, err := io.WriteString(c, "ping"); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("echo through the tunnel: %q, %v", buf, err)
			}
			if n := s.Tunnels(); n != 1 {
				t.Errorf("the splice engines hold %d tunnels, want 1", n)
			}
		})
	}
}
