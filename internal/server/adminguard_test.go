package server

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/admin"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestAdminAddrsRefused checks WithOwnAddrs with an admin listener bound
// to 0.0.0.0: with allow_private = 127.0.0.0/8, a CONNECT and a GET to
// the admin port on any loopback address are refused 403 with the
// reason, from the start and after a reload that adds a listener, while
// a local origin is reached.
func TestAdminAddrsRefused(t *testing.T) {
	adm := admin.New("0.0.0.0:0", nil, nil, nil, admin.Access{HealthAndMetricsOnly: true})
	if err := adm.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { adm.Close() })
	port := strconv.Itoa(adm.Addr().(*net.TCPAddr).Port)
	origin := proxytest.NewOrigin(t, proxytest.Respond(200, "origin"))
	conf := func(extra bool) *config.Config {
		cfg := config.Default()
		cfg.Workers = 1
		cfg.AllowPrivate = []string{"127.0.0.0/8"}
		cfg.Listen = []config.Listener{{Name: "main", Address: "127.0.0.1:0"}}
		if extra {
			cfg.Listen = append(cfg.Listen, config.Listener{Name: "extra", Address: "127.0.0.1:0"})
		}
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	s, addrs := startLogged(t, conf(false), nil, &logBuffer{}, WithOwnAddrs(adm.Addr()))
	check := func(proxy string) {
		t.Helper()
		ask := func(head, method string) *proxytest.Response {
			c := proxytest.Dial(t, proxy)
			defer c.Close()
			c.Write(head)
			return c.ReadResponse(method)
		}
		if r := ask("GET http://"+origin.Addr+"/ HTTP/1.1\r\nHost: "+origin.Addr+"\r\n\r\n", "GET"); r.Status != 200 {
			t.Errorf("through %s, a local origin: %d %q", proxy, r.Status, r.Body)
		}
		for _, host := range []string{"127.0.0.1", "127.0.0.2", "localhost"} {
			target := net.JoinHostPort(host, port)
			for _, req := range []struct{ method, head string }{
				{"CONNECT", "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n"},
				{"GET", "GET http://" + target + "/quota HTTP/1.1\r\nHost: " + target + "\r\n\r\n"},
			} {
				r := ask(req.head, req.method)
				if r.Status != 403 || !strings.Contains(string(r.Body), "is this proxy") {
					t.Errorf("through %s, %s %s: %d %q, want 403 naming it", proxy, req.method, target, r.Status, r.Body)
				}
			}
		}
	}
	check(addrs["main"])
	if err := s.Reload(conf(true)); err != nil {
		t.Fatal(err)
	}
	var extra string
	for _, a := range s.Addrs() {
		if a.Name == "extra" {
			extra = a.Addr.String()
		}
	}
	check(addrs["main"])
	check(extra)
}
