package server

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestHeaderRulesConnect checks that a route's request_headers go on the
// CONNECT rustle sends the route's http parent for a client's tunnel: a
// Squid that refuses requests without the field (as a balancer in front
// of it may) opens alice's tunnel, whose route sets it, and refuses
// bob's, whose route does not, which the client gets as a 502 naming the
// parent; a forwarded request of bob's gets Squid's own 403.
func TestHeaderRulesConnect(t *testing.T) {
	const token = "lb-4a9b"
	squid := proxytest.StartSquidWith(t, proxytest.SquidConfig{RequireHeader: "X-Balancer-Token ^" + token + "$"})
	echo := proxytest.NewEcho(t)
	o := startHeaderOrigin(t)
	r := startExchangeRig(t, func(c *config.Config) {
		c.Parents = []config.Parent{{Name: "squid", URL: "http://" + proxytest.SquidUser + ":" + proxytest.SquidPassword + "@" + squid.Addr}}
		c.Routes = []config.Route{
			{Name: "lb", Criteria: config.Criteria{Who: config.Who{Users: []string{"alice"}}}, Via: config.Strings{"squid"},
				RequestHeaders: config.HeaderEdit{Set: map[string]string{"X-Balancer-Token": token}}},
			{Name: "bare", Via: config.Strings{"squid"}},
		}
	})
	connect := func(user string) (*proxytest.Client, int) {
		c := proxytest.Dial(t, r.addrs["plain"])
		resp, _ := c.RoundTrip("CONNECT " + echo.Addr + " HTTP/1.1\r\nHost: " + echo.Addr +
			"\r\nProxy-Authorization: " + basicValue(user, "pw") + "\r\n\r\n")
		return c, resp.Status
	}
	c, code := connect("alice")
	if code != 200 {
		t.Fatalf("alice's CONNECT: %d, want 200\n%s", code, squid.Output())
	}
	c.Conn.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
	io.WriteString(c.Conn, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c.Conn, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("alice's tunnel echoed %q, %v", buf, err)
	}
	c.Close()
	if _, code := connect("bob"); code != 502 {
		t.Errorf("bob's CONNECT: %d, want 502 (Squid refused it)", code)
	}
	if rec := lastRecord(t, r.access, 2); rec.Parent != "squid" || rec.Status != 502 || rec.Reason != "parent-refused" {
		t.Errorf("bob's CONNECT's record %+v, want 502, reason parent-refused, parent squid", rec)
	}
	if code, body := exchangeFrontEnds[0].get(t, r, o.url+"/bob", "bob"); code != 403 {
		t.Errorf("bob's GET: %d %q, want Squid's 403", code, body)
	}
	if strings.Contains(r.log.String(), token) || strings.Contains(r.access.String(), token) {
		t.Errorf("a log shows the rule's value")
	}
}
