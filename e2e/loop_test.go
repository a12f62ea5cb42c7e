//go:build linux

package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestParentLoopPair runs two rustle processes that are each other's
// http parent (a configuration rustle check cannot see is a loop). A GET
// and a CONNECT through the first are answered 508 at once with a
// one-line reason, the first warns of the loop, and neither process holds
// more than a few descriptors more than before, where the request used to
// go round between them until both ran out (each held about 19,200 of
// 20,000 descriptors after 10 s; here max_connections = 200 ends such a
// loop sooner).
func TestParentLoopPair(t *testing.T) {
	o := newOrigin(t, "127.0.0.1", false)
	aAddr, bAddr := closedPort(t), closedPort(t)
	conf := func(listen, parent string) string {
		return fmt.Sprintf(`workers = 1

[limits]
max_connections = 200

[[listen]]
name = "plain"
address = %q
protocol = "http"

[[parents]]
name = "next"
url = "http://u:parentpw@%s"

[[routes]]
name = "all"
via = "next"
`, listen, parent)
	}
	a := startRustle(t, "-c", writeFile(t, "a.toml", conf(aAddr, bAddr)))
	b := startRustle(t, "-c", writeFile(t, "b.toml", conf(bAddr, aAddr)))
	a.waitStarted(t)
	b.waitStarted(t)
	if r := runRustle(t, "", "check", "-c", writeFile(t, "a.toml", conf(aAddr, bAddr))); r.code != 0 {
		t.Fatalf("rustle check refused the pair's configuration (%d): %s", r.code, r.stderr)
	}
	baseA, baseB := procFDs(t, a.pid()), procFDs(t, b.pid())
	host := strings.TrimPrefix(o.URL, "http://")
	for _, ask := range []struct{ method, req string }{
		{"GET", "GET " + o.URL + "/x HTTP/1.1\r\nHost: " + host + "\r\n\r\n"},
		{"CONNECT", "CONNECT " + host + " HTTP/1.1\r\nHost: " + host + "\r\n\r\n"},
	} {
		t0 := time.Now()
		resp, body := rawExchange(t, aAddr, ask.method, ask.req)
		took := time.Since(t0)
		if resp.StatusCode != http.StatusLoopDetected || !strings.Contains(body, "loop detected") {
			t.Errorf("%s: %s %q, want 508 loop detected", ask.method, resp.Status, body)
		}
		checkOneLine(t, body)
		if strings.Contains(body, "parentpw") {
			t.Errorf("%s: the answer holds a parent's password: %q", ask.method, body)
		}
		if took > 5*time.Second {
			t.Errorf("%s: answered after %v", ask.method, took)
		}
		for _, p := range []struct {
			name string
			pid  int
			base int
		}{{"first", a.pid(), baseA}, {"second", b.pid(), baseB}} {
			// A kept-alive connection to the parent may stay pooled.
			if !waitFDs(t, p.pid, func(n int) bool { return n <= p.base+6 }, 5*time.Second) {
				t.Errorf("%s: the %s rustle holds %d descriptors, %d before", ask.method, p.name, procFDs(t, p.pid), p.base)
			}
		}
	}
	if n := o.conns.Load(); n != 0 {
		t.Errorf("the origin accepted %d connections", n)
	}
	if !strings.Contains(a.log.String(), "loop detected") || !strings.Contains(a.log.String(), "detected_by=via") {
		t.Errorf("the first rustle did not warn of the loop:\n%s", a.log)
	}
}
