//go:build unix

package transparent_test

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/leaktest"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/transparent"
)

// TestSilentConnectionMemory measures what a transparent connection
// that has sent nothing yet (a redirected client still to speak, or one
// whose server speaks first, within timeouts.client_hello) keeps while
// its first bytes are awaited: the live heap per connection, the clients
// in the same process. The first bytes are peeked at (MSG_PEEK), into a
// few bytes on the serving goroutine's side, and read only once they
// have told what comes: by the HTTP proxy into its own buffer, by a
// tunnel into a pooled one. Reading them into a buffer of their own
// while waiting kept 4 KiB per silent connection: thousands of them from
// a redirected subnet were that many buffers.
func TestSilentConnectionMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 500 connections")
	}
	const conns = 500
	// TPROXY's original destination is the local address: here the
	// listener's own, never dialled, as no connection speaks.
	srv, err := transparent.New(transparent.Config{Proxy: newHTTPProxy(t), TProxy: true, FirstBytes: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	addr := proxytest.StartProxy(t, proxytest.NewPolicy(t, proxytest.PolicyConfig{}),
		func(c *net.TCPConn, s *gate.Session) { srv.ServeConn(c, s) })

	// The serving goroutines waiting for their first bytes, counted by
	// their stacks: a count of all goroutines also counts those of
	// earlier tests still ending, and one of them ending while these
	// connections were served was a connection short.
	waiting := func() int { return len(leaktest.Stacks("rustle/internal/transparent.peekKind")) }
	open := func(n int) {
		t.Helper()
		base := waiting()
		for range n {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
		}
		// Each connection's serving goroutine waits for its first
		// bytes.
		deadline := time.Now().Add(30 * time.Second)
		for waiting() < base+n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if g := waiting() - base; g < n {
			var other []string
			for _, st := range leaktest.Stacks("rustle/internal/transparent.") {
				if !strings.Contains(st, "transparent.peekKind") {
					other = append(other, st)
				}
			}
			t.Fatalf("%d of %d connections wait for their first bytes; the transparent server's other goroutines:\n%s",
				g, n, strings.Join(other, "\n\n"))
		}
	}
	open(20) // warm: the listener's and the pools' first objects
	m0 := proxytest.SettledMem()
	open(conns)
	m1 := proxytest.SettledMem()
	live := (float64(m1.Live) - float64(m0.Live)) / conns
	t.Logf("a transparent connection awaiting its first bytes keeps %.0f bytes of live heap, its client's included (race detector %v)", live, proxytest.Race)
	// Over what is measured (2.7 KiB: the client's and the server's
	// sockets, the session, the test listener's records), under the
	// buffer alone that reading the first bytes kept (8 KiB measured).
	if limit := 4096.0; live > limit {
		t.Errorf("%.0f bytes of live heap per silent transparent connection, want under %.0f", live, limit)
	}
}
