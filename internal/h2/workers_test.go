package h2

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestCloseEndsIdleWorkers checks that the server's Close ends the stream
// workers left waiting for a stream (which otherwise wait workerIdle,
// joined by nobody) and returns once none waits, and that a stream
// served after it (a connection of a retired generation goes on) is
// still answered.
func TestCloseEndsIdleWorkers(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	p := startProxy(t, testConfig(Config{}), nil)
	cc := p.client(t)
	fetch := func() {
		t.Helper()
		resp, body := roundTrip(t, cc, newRequest(t, "GET", o.URL("/"), nil))
		if resp.StatusCode != 200 || body != "ok" {
			t.Fatalf("GET: %d %q", resp.StatusCode, body)
		}
	}
	fetch()
	proxytest.WaitFor(t, "the stream's worker waiting for the next", func() bool { return p.srv.pool.Waiting() >= 1 })
	p.srv.Close()
	if n := p.srv.pool.Waiting(); n != 0 {
		t.Fatalf("Close returned with %d workers waiting for a stream", n)
	}
	p.srv.Close() // idempotent
	fetch()
}
