package server

import (
	"context"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// This file holds the exchange conformance table: every HTTP front-end
// that forwards requests to origins (HTTP/1.1 on the plain port, HTTP/2
// and HTTP/3 on the https port) driven through each row of the one
// origin exchange (internal/origin): the upstream pool, a pooled
// connection the origin had closed, an http parent that takes requests
// in absolute form, its 407, the failover to the next parent, a tunnel
// through a socks5 parent that no other request may reuse, and a
// response head over max_header_bytes. Each row's expectations are
// written once and checked on every front-end: the same status, the same
// access log record, the same number of upstream connections.

// exchangeFrontEnd is one way a client sends a forwarded request.
type exchangeFrontEnd struct {
	name string
	// send sends req through the proxy as user (password "pw"), with
	// req's fields, on a connection of its own, and returns the answer.
	send func(t *testing.T, r *exchangeRig, req *http.Request, user string) exchangeAnswer
}

// exchangeAnswer is the answer a front-end's client got.
type exchangeAnswer struct {
	status int
	header http.Header
	body   string
}

// get sends GET target through the proxy as user (password "pw"), on a
// connection of its own, and returns the status and body.
func (fe exchangeFrontEnd) get(t *testing.T, r *exchangeRig, target, user string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", target, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := fe.send(t, r, req, user)
	return a.status, a.body
}

var exchangeFrontEnds = []exchangeFrontEnd{
	{"http", func(t *testing.T, r *exchangeRig, req *http.Request, user string) exchangeAnswer {
		c := proxytest.Dial(t, r.addrs["plain"])
		defer c.Close()
		var b strings.Builder
		b.WriteString(req.Method + " " + req.URL.String() + " HTTP/1.1\r\nHost: " + req.URL.Host +
			"\r\nProxy-Authorization: " + basicValue(user, "pw") + "\r\n")
		for name, vs := range req.Header {
			for _, v := range vs {
				b.WriteString(name + ": " + v + "\r\n")
			}
		}
		resp, _ := c.RoundTrip(b.String() + "\r\n")
		h := make(http.Header)
		for _, f := range resp.Header {
			h.Add(f.Name, f.Value)
		}
		return exchangeAnswer{resp.Status, h, string(resp.Body)}
	}},
	{"h2", func(t *testing.T, r *exchangeRig, req *http.Request, user string) exchangeAnswer {
		cc := (&authRig{addr: r.addrs, roots: r.roots}).dialH2(t)
		defer cc.Close()
		return exchangeDo(t, cc.RoundTrip, req, user)
	}},
	{"h3", func(t *testing.T, r *exchangeRig, req *http.Request, user string) exchangeAnswer {
		qc, cc := dialH3(t, r.addrs["tls"], r.roots)
		defer qc.CloseWithError(0, "")
		return exchangeDo(t, cc.RoundTrip, req, user)
	}},
}

// exchangeDo sends req with user's credentials through roundTrip (an
// HTTP/2 or HTTP/3 client connection's).
func exchangeDo(t *testing.T, roundTrip func(*http.Request) (*http.Response, error), req *http.Request, user string) exchangeAnswer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req = req.WithContext(ctx)
	req.Header.Set("Proxy-Authorization", basicValue(user, "pw"))
	resp, err := roundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return exchangeAnswer{resp.StatusCode, resp.Header, string(body)}
}

// exchangeRig is a rustle with a plain listener and an https listener with
// HTTP/3 on, users alice and bob (password "pw"), loopback origins
// allowed, its access log and its own log at debug level kept.
type exchangeRig struct {
	addrs  map[string]string
	roots  *x509.CertPool
	access *logBuffer
	log    *logBuffer // the server's own log, at debug level
	s      *Server
}

func startExchangeRig(t *testing.T, modify func(c *config.Config)) *exchangeRig {
	t.Helper()
	tl, roots := proxyCerts(t)
	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Auth.Users = []config.User{{Name: "alice", Password: "pw"}, {Name: "bob", Password: "pw"}}
	cfg.Listen = []config.Listener{
		{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"},
		{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, HTTP3: true},
	}
	if modify != nil {
		modify(cfg)
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	r := &exchangeRig{roots: roots, access: &logBuffer{}, log: &logBuffer{}}
	logger := slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r.s, r.addrs = startLogged(t, cfg, logger, r.access)
	return r
}

// waitPooled waits until the upstream pool holds n idle connections.
func (r *exchangeRig) waitPooled(t *testing.T, n int) {
	t.Helper()
	proxytest.WaitFor(t, "the pool's idle connections", func() bool { return r.s.pool.Len() == n })
}

// countingOrigin is an origin that counts the connections it accepts.
type countingOrigin struct {
	url   string
	addr  string
	conns atomic.Int64
}

// startCountingOrigin starts an origin that answers "origin PATH" (or as
// h says, when not nil) and counts its connections.
func startCountingOrigin(t *testing.T, h http.HandlerFunc) *countingOrigin {
	t.Helper()
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "origin "+r.URL.Path) }
	}
	o := &countingOrigin{}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			o.conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	o.url, o.addr = srv.URL, srv.Listener.Addr().String()
	return o
}

// TestExchangeConformance drives each row of the origin exchange through
// HTTP/1.1, HTTP/2 and HTTP/3, and checks that each front-end answers the
// same, logs the same record and costs the same upstream connections.
func TestExchangeConformance(t *testing.T) {
	for _, fe := range exchangeFrontEnds {
		t.Run(fe.name, func(t *testing.T) {
			t.Run("pool", func(t *testing.T) {
				// Two requests from two client connections to one
				// origin: the second takes the first's upstream from
				// the pool.
				o := startCountingOrigin(t, nil)
				r := startExchangeRig(t, nil)
				for i := range 2 {
					if code, body := fe.get(t, r, o.url+"/p", "alice"); code != 200 || body != "origin /p" {
						t.Fatalf("GET %d: %d %q", i, code, body)
					}
					r.waitPooled(t, 1)
				}
				if n := o.conns.Load(); n != 1 {
					t.Errorf("the origin accepted %d connections for two requests, want 1 (pooled)", n)
				}
				for i := 1; i <= 2; i++ {
					if rec := lastRecord(t, r.access, i); rec.Upstream != o.addr || rec.Status != 200 {
						t.Errorf("record %d: %+v, want status 200 from upstream %s", i, rec, o.addr)
					}
				}
			})
			t.Run("dead pooled connection", func(t *testing.T) {
				// The origin closes each connection after its answer,
				// without saying so: the pooled connection is dead
				// when the second request meets it, and the request
				// goes again on a fresh one.
				o := proxytest.NewOrigin(t, proxytest.ThenClose(proxytest.Respond(200, "once")))
				r := startExchangeRig(t, nil)
				for i := range 2 {
					if code, body := fe.get(t, r, o.URL("/d"), "alice"); code != 200 || body != "once" {
						t.Fatalf("GET %d: %d %q", i, code, body)
					}
				}
			})
			t.Run("http parent", func(t *testing.T) {
				// The parent takes the request itself, in absolute
				// form, with rustle's credentials for it; the client's
				// never reach it.
				o := startCountingOrigin(t, nil)
				paddr, paccess, _ := startHTTPParent(t)
				r := startExchangeRig(t, func(c *config.Config) {
					c.Parents = []config.Parent{{Name: "up", URL: "http://parent:ppw@" + paddr}}
					c.Routes = []config.Route{{Name: "all", Via: config.Strings{"up"}}}
				})
				if code, body := fe.get(t, r, o.url+"/hp", "alice"); code != 200 || body != "origin /hp" {
					t.Fatalf("GET: %d %q", code, body)
				}
				if rec := lastRecord(t, r.access, 1); rec.Route != "all" || rec.Parent != "up" || rec.Upstream != paddr {
					t.Errorf("record %+v, want route all, parent up, upstream %s", rec, paddr)
				}
				proxytest.WaitFor(t, "the parent's record", func() bool { return len(parentRecords(t, paccess)) == 1 })
				if prec := parentRecords(t, paccess)[0]; prec.User != "parent" || prec.Protocol != "http" || prec.Target != o.url+"/hp" {
					t.Errorf("the parent's record %+v, want user parent, protocol http, target %s/hp", prec, o.url)
				}
			})
			t.Run("http parent 407", func(t *testing.T) {
				// Squid refuses rustle's credentials: the client gets a
				// 502 naming the parent, never a 407 of its own.
				o := startCountingOrigin(t, nil)
				squid := proxytest.StartSquid(t)
				r := startExchangeRig(t, func(c *config.Config) {
					c.Parents = []config.Parent{{Name: "squid", URL: "http://" + proxytest.SquidUser + ":wrong@" + squid.Addr}}
					c.Routes = []config.Route{{Name: "all", Via: config.Strings{"squid"}}}
				})
				code, body := fe.get(t, r, o.url+"/x", "alice")
				if code != 502 || !strings.Contains(body, "parent proxy squid refused rustle's credentials") {
					t.Errorf("GET: %d %q, want 502 naming the parent", code, body)
				}
				if rec := lastRecord(t, r.access, 1); rec.Reason != "parent-auth-failed" || rec.Parent != "squid" || rec.Status != 502 {
					t.Errorf("record %+v, want 502, reason parent-auth-failed, parent squid", rec)
				}
			})
			t.Run("parent failover", func(t *testing.T) {
				// The first parent refuses connections: the request
				// goes through the next.
				o := startCountingOrigin(t, nil)
				paddr, _, _ := startHTTPParent(t)
				r := startExchangeRig(t, func(c *config.Config) {
					c.Parents = []config.Parent{
						{Name: "dead", URL: "http://" + proxytest.ClosedPort(t)},
						{Name: "live", URL: "http://parent:ppw@" + paddr},
					}
					c.Routes = []config.Route{{Name: "all", Via: config.Strings{"dead", "live"}, Select: "first-available"}}
				})
				if code, body := fe.get(t, r, o.url+"/f", "alice"); code != 200 || body != "origin /f" {
					t.Fatalf("GET: %d %q", code, body)
				}
				if rec := lastRecord(t, r.access, 1); rec.Parent != "live" || rec.Upstream != paddr {
					t.Errorf("record %+v, want parent live, upstream %s", rec, paddr)
				}
			})
			t.Run("tunnel through a parent is not pooled", func(t *testing.T) {
				// bob's requests go through Dante, a tunnel to the
				// origin that is his request's alone; alice's go
				// direct, and must not be sent on bob's connection.
				o := startCountingOrigin(t, nil)
				dante := proxytest.StartDante(t)
				r := startExchangeRig(t, func(c *config.Config) {
					c.Parents = []config.Parent{{Name: "dante", URL: "socks5://" + dante.Addr}}
					c.Routes = []config.Route{{Name: "bob", Criteria: config.Criteria{Who: config.Who{Users: []string{"bob"}}}, Via: config.Strings{"dante"}}}
				})
				if code, body := fe.get(t, r, o.url+"/bob", "bob"); code != 200 || body != "origin /bob" {
					t.Fatalf("bob's GET: %d %q", code, body)
				}
				lastRecord(t, r.access, 1) // bob's request is over
				if code, body := fe.get(t, r, o.url+"/alice", "alice"); code != 200 || body != "origin /alice" {
					t.Fatalf("alice's GET: %d %q", code, body)
				}
				if rec := lastRecord(t, r.access, 1); rec.Parent != "dante" || rec.Upstream != dante.Addr {
					t.Errorf("bob's record %+v, want parent dante, upstream %s", rec, dante.Addr)
				}
				if rec := lastRecord(t, r.access, 2); rec.Parent != "" || rec.Upstream != o.addr {
					t.Errorf("alice's record %+v, want no parent, upstream %s (the origin itself)", rec, o.addr)
				}
				if n := o.conns.Load(); n != 2 {
					t.Errorf("the origin accepted %d connections, want 2 (the tunnel's and alice's own)", n)
				}
			})
			t.Run("response head too large", func(t *testing.T) {
				// A head over max_header_bytes (64 KiB) is refused.
				big := strings.Repeat("x", 70<<10)
				o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok", "X-Big: "+big))
				r := startExchangeRig(t, nil)
				code, body := fe.get(t, r, o.URL("/big"), "alice")
				if code != 502 || !strings.Contains(body, "upstream response head too large") {
					t.Errorf("GET: %d %q, want 502 upstream response head too large", code, body)
				}
				if rec := lastRecord(t, r.access, 1); rec.Reason != "upstream-failed" || rec.Status != 502 {
					t.Errorf("record %+v, want 502, reason upstream-failed", rec)
				}
			})
			t.Run("header rules", func(t *testing.T) {
				// The route's rules apply to every request, the
				// [[header_rules]] entry's to bob's after them: the
				// origin gets the route's field from a file, no
				// X-Forwarded-For (the client's nor rustle's), bob's
				// team beside the client's, never the client's
				// Proxy-Authorization; the client gets the response
				// less the field the route removes, with the fields the
				// rules add. The file's value is in neither log, a
				// failed request's included.
				const secret = "route-s3cr3t-7f1d"
				o := startHeaderOrigin(t)
				file := filepath.Join(t.TempDir(), "key")
				if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				r := startExchangeRig(t, func(c *config.Config) {
					c.Forwarded = "x-forwarded-for"
					c.Routes = []config.Route{{Name: "all", Via: config.Strings{"direct"},
						RequestHeaders:  config.HeaderEdit{Set: map[string]string{"X-Route-Key": "{file:" + file + "}"}, Remove: []string{"X-Forwarded-For"}},
						ResponseHeaders: config.HeaderEdit{Set: map[string]string{"X-Route": "all"}, Remove: []string{"X-Remove-Me"}}}}
					c.HeaderRules = []config.HeaderRule{{Name: "bob", Criteria: config.Criteria{Who: config.Who{Users: []string{"bob"}}},
						RequestHeaders:  config.HeaderEdit{Add: map[string]string{"X-Team": "devs"}},
						ResponseHeaders: config.HeaderEdit{Add: map[string]string{"X-Rule": "bob"}}}}
				})
				for _, tc := range []struct {
					user, team, rule string
				}{{"alice", "client", ""}, {"bob", "client|devs", "bob"}} {
					req, _ := http.NewRequest("GET", o.url+"/h", nil)
					req.Header.Set("X-Forwarded-For", "198.51.100.7")
					req.Header.Set("X-Team", "client")
					a := fe.send(t, r, req, tc.user)
					if a.status != 200 || a.body != "origin" {
						t.Fatalf("%s's GET: %d %q", tc.user, a.status, a.body)
					}
					got := o.last()
					if v := got.Get("X-Route-Key"); v != secret {
						t.Errorf("%s: the origin got X-Route-Key %q, want the file's value", tc.user, v)
					}
					if v, ok := got["X-Forwarded-For"]; ok {
						t.Errorf("%s: the origin got X-Forwarded-For %q, want none", tc.user, v)
					}
					if v, ok := got["Proxy-Authorization"]; ok {
						t.Errorf("%s: the origin got Proxy-Authorization %q", tc.user, v)
					}
					if v := strings.Join(got.Values("X-Team"), "|"); v != tc.team {
						t.Errorf("%s: the origin got X-Team %q, want %q", tc.user, v, tc.team)
					}
					if v := a.header.Values("X-Remove-Me"); len(v) > 0 {
						t.Errorf("%s: the client got X-Remove-Me %q, want none", tc.user, v)
					}
					if v := strings.Join(a.header.Values("X-Route"), "|"); v != "all" {
						t.Errorf("%s: the client got X-Route %q, want the route's alone", tc.user, v)
					}
					if v := a.header.Get("X-Kept"); v != "1" {
						t.Errorf("%s: the client got X-Kept %q, want the origin's", tc.user, v)
					}
					if v := a.header.Get("X-Rule"); v != tc.rule {
						t.Errorf("%s: the client got X-Rule %q, want %q", tc.user, v, tc.rule)
					}
				}
				if code, _ := fe.get(t, r, "http://"+proxytest.ClosedPort(t)+"/down", "alice"); code != 502 {
					t.Errorf("GET of a closed port: %d, want 502", code)
				}
				lastRecord(t, r.access, 3)
				if strings.Contains(r.access.String(), secret) || strings.Contains(r.log.String(), secret) {
					t.Errorf("a log shows the rule's value:\naccess log:\n%s\nlog:\n%s", r.access, r.log)
				}
				if !strings.Contains(r.log.String(), "level=DEBUG") {
					t.Errorf("the server logged nothing at debug level; the check of its log proves nothing:\n%s", r.log)
				}
			})
			t.Run("header rules through squid", func(t *testing.T) {
				// Squid refuses a request without the field a rule of
				// the route sets (as a balancer in front of it might):
				// the field reaches Squid, and through it the origin.
				const token = "lb-7c2e"
				o := startHeaderOrigin(t)
				squid := proxytest.StartSquidWith(t, proxytest.SquidConfig{RequireHeader: "X-Balancer-Token ^" + token + "$"})
				r := startExchangeRig(t, func(c *config.Config) {
					c.Parents = []config.Parent{{Name: "squid", URL: "http://" + proxytest.SquidUser + ":" + proxytest.SquidPassword + "@" + squid.Addr}}
					c.Routes = []config.Route{{Name: "lb", Via: config.Strings{"squid"},
						RequestHeaders: config.HeaderEdit{Set: map[string]string{"X-Balancer-Token": token}}}}
				})
				if code, body := fe.get(t, r, o.url+"/sq", "alice"); code != 200 || body != "origin" {
					t.Fatalf("GET: %d %q", code, body)
				}
				if v := o.last().Get("X-Balancer-Token"); v != token {
					t.Errorf("the origin got X-Balancer-Token %q through Squid, want %q", v, token)
				}
				if rec := lastRecord(t, r.access, 1); rec.Parent != "squid" || rec.Status != 200 {
					t.Errorf("record %+v, want 200 through parent squid", rec)
				}
			})
		})
	}
}

// headerOrigin is an origin that keeps the fields of the last request it
// got, and answers "origin" with the fields Server: o, X-Remove-Me: 1,
// X-Route: origin and X-Kept: 1.
type headerOrigin struct {
	url  string
	mu   sync.Mutex
	seen http.Header // guarded by mu
}

// startHeaderOrigin starts a headerOrigin, closed by t.Cleanup.
func startHeaderOrigin(t *testing.T) *headerOrigin {
	t.Helper()
	o := &headerOrigin{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.seen = r.Header.Clone()
		o.mu.Unlock()
		h := w.Header()
		h.Set("Server", "o")
		h.Set("X-Remove-Me", "1")
		h.Set("X-Route", "origin")
		h.Set("X-Kept", "1")
		io.WriteString(w, "origin")
	}))
	t.Cleanup(srv.Close)
	o.url = srv.URL
	return o
}

// last returns the fields of the last request the origin got.
func (o *headerOrigin) last() http.Header {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.seen
}
