package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// loopRustle is a rustle of the loop tests: its listeners' addresses
// and its access log.
type loopRustle struct {
	plain, socks, tls string
	roots             *x509.CertPool
	access            *logBuffer
}

// startLoopRustle starts a rustle with a plain listener at plain, a SOCKS5
// one at socks (fixed loopback addresses, so that parents can name them
// before it starts) and an https one, whose every request goes through
// the parent at parentURL; max_connections is 200, so that a loop it
// does not catch ends soon. Validate is not asked: rustle check refuses a
// parent at one of rustle's own listeners in any spelling it can see,
// and these parents stand for names that resolve to it, which it cannot.
func startLoopRustle(t *testing.T, plain, socks, parentURL string) *loopRustle {
	t.Helper()
	tl, roots := proxyCerts(t)
	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Limits.MaxConnections = 200
	cfg.Listen = []config.Listener{
		{Name: "plain", Address: plain, Protocol: "http"},
		{Name: "socks", Address: socks, Protocol: "socks5"},
		{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl},
	}
	cfg.Parents = []config.Parent{{Name: "next", URL: parentURL}}
	cfg.Routes = []config.Route{{Name: "all", Via: config.Strings{"next"}}}
	cfg.SetDefaults()
	access := &logBuffer{}
	_, addrs := startLogged(t, cfg, nil, access)
	return &loopRustle{plain: addrs["plain"], socks: addrs["socks"], tls: addrs["tls"], roots: roots, access: access}
}

// TestParentLoops runs a rustle that is its own http parent, one that is
// its own socks5h parent, and two that are each other's http parent (two
// servers in one process, each its own instance; e2e's
// TestParentLoopPair runs two processes). Each request is answered at
// once, 508 where an HTTP hop saw it come back (a GET, a CONNECT, an
// HTTP/2 GET), 502 or a SOCKS5 failure where a SOCKS5 hop did, and it
// crosses each rustle at most twice (its access log has at most two
// records of it: the client's, and the one refused with the reason
// loop), where it used to go round until the connections ran out. The
// parent's credentials appear in no answer.
func TestParentLoops(t *testing.T) {
	origin := proxytest.NewOrigin(t, proxytest.Respond(200, "origin"))
	echo := proxytest.NewEcho(t)
	type ask struct {
		name   string
		via    string // "get", "connect", "h2", "socks"
		status int    // what the client is answered; 0 = a SOCKS5 failure
	}
	tests := []struct {
		name  string
		start func(t *testing.T) []*loopRustle // the first is asked
		asks  []ask
	}{
		{"its own http parent", func(t *testing.T) []*loopRustle {
			plain, socks := proxytest.ClosedPort(t), proxytest.ClosedPort(t)
			return []*loopRustle{startLoopRustle(t, plain, socks, "http://u:parentpw@"+plain)}
		}, []ask{{"GET", "get", 508}, {"CONNECT", "connect", 508}, {"HTTP/2 GET", "h2", 508}, {"SOCKS5 CONNECT", "socks", 0}}},
		{"its own socks5h parent", func(t *testing.T) []*loopRustle {
			plain, socks := proxytest.ClosedPort(t), proxytest.ClosedPort(t)
			return []*loopRustle{startLoopRustle(t, plain, socks, "socks5h://"+socks)}
		}, []ask{{"SOCKS5 CONNECT", "socks", 0}, {"GET", "get", 502}, {"CONNECT", "connect", 502}}},
		{"each other's http parent", func(t *testing.T) []*loopRustle {
			aPlain, aSocks, bPlain, bSocks := proxytest.ClosedPort(t), proxytest.ClosedPort(t), proxytest.ClosedPort(t), proxytest.ClosedPort(t)
			a := startLoopRustle(t, aPlain, aSocks, "http://u:parentpw@"+bPlain)
			b := startLoopRustle(t, bPlain, bSocks, "http://u:parentpw@"+aPlain)
			return []*loopRustle{a, b}
		}, []ask{{"GET", "get", 508}, {"CONNECT", "connect", 508}, {"HTTP/2 GET", "h2", 508}, {"SOCKS5 CONNECT", "socks", 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := tt.start(t)
			r := rs[0]
			for _, a := range tt.asks {
				before := make([]int, len(rs))
				for i, x := range rs {
					before[i] = len(routeRecords(t, x.access))
				}
				t0 := time.Now()
				status, body := loopAsk(t, r, a.via, origin.URL("/x"), echo.Addr)
				took := time.Since(t0)
				if status != a.status {
					t.Errorf("%s: answered %d %q, want %d", a.name, status, body, a.status)
				}
				if strings.Contains(body, "parentpw") || strings.Contains(body, "dTpwYXJlbnRwdw") {
					t.Errorf("%s: the answer holds the parent's credentials: %q", a.name, body)
				}
				if took > 5*time.Second {
					t.Errorf("%s: answered after %v", a.name, took)
				}
				// Every hop has logged once it answered; give the
				// records a moment to be written.
				var recs [][]routeRecord
				proxytest.WaitFor(t, "the records of the loop after "+a.name, func() bool {
					recs = recs[:0]
					total := 0
					for i, x := range rs {
						all := routeRecords(t, x.access)
						recs = append(recs, all[before[i]:])
						total += len(all) - before[i]
					}
					return total >= len(rs)+1 || took > 5*time.Second
				})
				loops := 0
				for i, rr := range recs {
					if len(rr) > 2 {
						t.Errorf("%s: rustle %d logged %d records of one request, want at most 2", a.name, i, len(rr))
					}
					for _, rec := range rr {
						if i == 0 && rec.Reason == "loop" && (rec.Status == 508 || rec.Protocol == "socks5") {
							loops++
						}
					}
				}
				// The first rustle, which the request came back to
				// (through the second, whose element the CONNECT to it
				// carried on), refused it.
				if loops == 0 {
					t.Errorf("%s: the first rustle has no record with the reason loop: %+v", a.name, recs)
				}
			}
			if n := len(origin.Requests()); n != 0 {
				t.Errorf("the origin got %d requests", n)
			}
			if n := echo.Conns(); n != 0 {
				t.Errorf("the CONNECT target got %d connections", n)
			}
		})
	}
}

// loopAsk sends one request to r as via says ("get": a GET on the plain
// port; "connect": a CONNECT there; "h2": a GET over HTTP/2 on the https
// port; "socks": a SOCKS5 CONNECT, with curl) and returns its status (0
// for a SOCKS5 failure) and body.
func loopAsk(t *testing.T, r *loopRustle, via, url, connectTarget string) (int, string) {
	t.Helper()
	switch via {
	case "get", "connect":
		c := proxytest.Dial(t, r.plain)
		defer c.Close()
		c.Timeout = 10 * time.Second
		if via == "get" {
			host := strings.TrimPrefix(url, "http://")
			host = host[:strings.IndexByte(host, '/')]
			resp, _ := c.RoundTrip("GET " + url + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
			return resp.Status, string(resp.Body)
		}
		resp, _ := c.RoundTrip("CONNECT " + connectTarget + " HTTP/1.1\r\nHost: " + connectTarget + "\r\n\r\n")
		return resp.Status, string(resp.Body)
	case "h2":
		tc, err := tls.Dial("tcp", r.tls, &tls.Config{RootCAs: r.roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(tc)
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatalf("HTTP/2 GET: %v", err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	out, err := curl(t, "--socks5-hostname", r.socks, url)
	if err == nil {
		return 200, out
	}
	return 0, out
}
