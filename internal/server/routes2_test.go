package server

import (
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

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
