package server

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// countingListener accepts TCP connections on loopback and counts them,
// closing each: a parent that only a TCP probe reaches.
func countingListener(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return ln.Addr().String(), &n
}

// TestRoutesReload reloads parents and routes on a running server: a
// tunnel opened through a parent the reload removes keeps working through
// it; a parent kept by name and URL keeps its health (down stays down,
// its failure count too, whether its other settings changed or not) and
// its probe loop (reloads quicker than its probe interval do not starve
// it); the removed parent's series are deleted; new requests take the
// new routes.
func TestRoutesReload(t *testing.T) {
	plain, _, _ := routeOrigins(t)
	originAddr := strings.TrimPrefix(plain, "http://")
	dante := proxytest.StartDante(t)
	dead := proxytest.ClosedPort(t)
	probed, probes := countingListener(t)
	build := func(after bool) *config.Config {
		cfg := config.Default()
		cfg.Workers = 1
		cfg.AllowPrivate = []string{"127.0.0.0/8"}
		cfg.Listen = []config.Listener{{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"}}
		cooldown := config.Duration{Duration: time.Minute}
		if after {
			cooldown.Duration = 2 * time.Minute // the same name and URL, another setting
		}
		cfg.Parents = []config.Parent{
			{Name: "dead", URL: "socks5h://" + dead, MaxFails: 1, Cooldown: cooldown},
			{Name: "dante", URL: "socks5h://" + dante.Addr},
			{Name: "probed", URL: "http://" + probed, ProbeInterval: config.Duration{Duration: 400 * time.Millisecond}},
		}
		cfg.Routes = []config.Route{
			{Name: "failover", Criteria: config.Criteria{Methods: []string{"GET"}}, Via: config.Strings{"dead", "dante"}, Select: "first-available"},
			{Name: "tunnel", Criteria: config.Criteria{Methods: []string{"CONNECT"}}, Via: config.Strings{"gone"}},
			{Name: "probe", Criteria: config.Criteria{Methods: []string{"PUT"}}, Via: config.Strings{"probed"}},
		}
		if after {
			cfg.Routes[1].Via = config.Strings{"direct"}
		} else {
			cfg.Parents = append(cfg.Parents, config.Parent{Name: "gone", URL: "socks5h://" + dante.Addr})
		}
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	m := metrics.New(metrics.Config{})
	access := &logBuffer{}
	s, addrs := startLogged(t, build(false), nil, access, WithMetrics(m))
	proxy := "http://" + addrs["plain"]

	// Put dead down: the failover route's first GET fails on it, and is
	// retried on dante.
	if out, _ := curl(t, "-x", proxy, "-w", " %{http_code}", "--no-fail", plain+"/a"); !strings.HasSuffix(out, " 200") {
		t.Fatalf("first GET = %q, want 200 through dante after dead failed", out)
	}
	if got := proxytest.Metric(t, m, "rustle_parent_up", "parent", "dead"); got != 0 {
		t.Fatalf("rustle_parent_up{dead} = %v before the reload, want 0", got)
	}

	// A tunnel through gone, used before and after the reload.
	tc, err := net.DialTimeout("tcp", addrs["plain"], 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	tc.SetDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReader(tc)
	fmt.Fprintf(tc, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", originAddr, originAddr)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT through gone: %v %v", resp, err)
	}
	tunnelGet := func(path string) {
		t.Helper()
		fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, originAddr)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET %s in the tunnel: %v %v", path, resp, err)
		}
		resp.Body.Close()
	}
	tunnelGet("/before")
	if got := proxytest.Metric(t, m, "rustle_parent_requests_total", "parent", "gone"); got != 1 {
		t.Fatalf("rustle_parent_requests_total{gone} = %v, want 1", got)
	}

	if err := s.Reload(build(true)); err != nil {
		t.Fatal(err)
	}
	tunnelGet("/after") // the tunnel keeps its parent
	if got := proxytest.Metric(t, m, "rustle_parent_up", "parent", "dead"); got != 0 {
		t.Errorf("rustle_parent_up{dead} = %v after the reload, want 0 (kept down)", got)
	}
	for _, name := range []string{"rustle_parent_requests_total", "rustle_parent_up", "rustle_parent_dial_duration_seconds"} {
		if got := proxytest.Metric(t, m, name, "parent", "gone"); got != 0 {
			t.Errorf("%s{gone} = %v after the reload removed gone, want no series", name, got)
		}
	}
	// dead is still down: the GET goes straight to dante.
	if out, err := curl(t, "-x", proxy, plain+"/b"); err != nil || out != "origin GET /b" {
		t.Errorf("GET after the reload = %q, %v; want it through dante", out, err)
	}
	if got := proxytest.Metric(t, m, "rustle_parent_connect_failures_total", "parent", "dead"); got != 1 {
		t.Errorf("rustle_parent_connect_failures_total{dead} = %v, want 1 (not tried again)", got)
	}
	if r := lastRecord(t, access, 2); r.Route != "failover" || r.Parent != "dante" || r.Reason != "" {
		t.Errorf("GET after the reload: record %+v, want route failover, parent dante", r)
	}
	if _, err := curl(t, "-p", "-x", proxy, plain+"/c"); err != nil {
		t.Errorf("CONNECT after the reload: %v", err)
	}
	if r := lastRecord(t, access, 3); r.Route != "tunnel" || r.Parent != "" {
		t.Errorf("CONNECT after the reload: record %+v, want route tunnel direct", r)
	}
	tc.Close()
	if r := lastRecord(t, access, 4); r.Route != "tunnel" || r.Parent != "gone" {
		t.Errorf("the tunnel opened before the reload: record %+v, want route tunnel, parent gone", r)
	}

	// Reloads in a row, quicker than the probe interval: the kept
	// parent's probe loop still probes.
	cfg := build(true)
	start := probes.Load()
	deadline := time.Now().Add(15 * time.Second)
	for probes.Load() < start+4 {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes in 15s of reloads, want 4: the probe loop restarts on each reload", probes.Load()-start)
		}
		if err := s.Reload(cfg); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRoutesParentIdleTimeout checks that a parent's idle_timeout applies
// to the idle pooled connections to it: the keep-alive connection to an
// HTTP parent (rustle) is closed after it, though the pool's own idle
// timeout is much longer.
func TestRoutesParentIdleTimeout(t *testing.T) {
	plain, _, _ := routeOrigins(t)
	pcfg := config.Default()
	pcfg.Workers = 1
	pcfg.AllowPrivate = []string{"127.0.0.0/8"}
	pcfg.Listen = []config.Listener{{Name: "phttp", Address: "127.0.0.1:0", Protocol: "http"}}
	pcfg.SetDefaults()
	if err := pcfg.Validate(); err != nil {
		t.Fatal(err)
	}
	_, paddrs := startLogged(t, pcfg, nil, &logBuffer{})

	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Listen = []config.Listener{{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"}}
	cfg.Upstream.IdleTimeout = config.Duration{Duration: time.Hour}
	cfg.Parents = []config.Parent{{Name: "up", URL: "http://" + paddrs["phttp"], IdleTimeout: config.Duration{Duration: time.Second}}}
	cfg.Routes = []config.Route{{Name: "all", Via: config.Strings{"up"}}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s, addrs := startLogged(t, cfg, nil, &logBuffer{})
	if out, err := curl(t, "-x", "http://"+addrs["plain"], plain+"/x"); err != nil || out != "origin GET /x" {
		t.Fatalf("curl = %q, %v", out, err)
	}
	// The connection goes to the pool once curl's connection ends,
	// which its exit does not wait for.
	proxytest.WaitFor(t, "the connection to the parent to be pooled", func() bool { return s.pool.Len() == 1 })
	proxytest.WaitFor(t, "the parent's idle connection to be closed after its idle_timeout", func() bool { return s.pool.Len() == 0 })
}
