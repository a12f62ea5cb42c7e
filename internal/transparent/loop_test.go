//go:build unix

package transparent_test

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/transparent"
)

// TestTunnelLoop sends a plain TCP tunnel whose original destination is
// the transparent listener itself (TPROXY's is the local address), as a
// redirect rule that catches rustle's own traffic makes: its upstream
// connection comes back, and is refused as a loop at once, though the
// tunnel that dialled it is on the splice engine (which holds a
// duplicate of the socket and closed its net.TCPConn) by then. The
// client's tunnel then ends: two records, the tunnel and the loop. A
// loop taken for over once the net.TCPConn was closed went on, hop after
// hop, until a refusal won the race with a hand-over.
func TestTunnelLoop(t *testing.T) {
	al, records := jsonLog(t)
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Listener: "tp", AccessLog: al, Default: acl.Allow})
	srv, err := transparent.New(transparent.Config{Proxy: newHTTPProxy(t), TProxy: true, FirstBytes: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	addr := proxytest.StartProxy(t, p, func(c *net.TCPConn, s *gate.Session) { srv.ServeConn(c, s) })

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "SSH-2.0-OpenSSH_9.2\r\n"); err != nil {
		t.Fatal(err)
	}
	// The loop's refusal closes a connection with unread bytes: the
	// reset comes through.
	if got, err := io.ReadAll(c); (err != nil && !errors.Is(err, syscall.ECONNRESET)) || len(got) != 0 {
		t.Fatalf("read %q, %v; want the tunnel closed, nothing sent", got, err)
	}
	proxytest.WaitFor(t, "the tunnel's record", func() bool {
		for _, r := range records() {
			if r["client"] == c.LocalAddr().String() {
				return true
			}
		}
		return false
	})
	recs := records()
	loops := 0
	for _, r := range recs {
		if r["reason"] == "loop" {
			loops++
		}
	}
	if len(recs) != 2 || loops != 1 {
		t.Errorf("%d records, %d of them loops; want the tunnel and one loop: %v", len(recs), loops, recs)
	}
}
