package tunnel

// Test helpers for every platform.

import (
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/leaktest"
)

func TestMain(m *testing.M) {
	// Make Go's netpoller open its own descriptors before any test counts
	// descriptors.
	if ln, err := net.Listen("tcp", "127.0.0.1:0"); err == nil {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			c.Close()
		}
		ln.Close()
	}
	os.Exit(leaktest.Main(m, 5*time.Second,
		"tunnel.(*Engine).loop", "tunnel.(*Engine).relay", "tunnel.Relay(", "tunnel.(*relay)."))
}

// newEngine returns an engine closed at the end of the test.
func newEngine(t testing.TB, cfg Config) *Engine {
	t.Helper()
	e, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// tunnelEnds are the application sides of one relayed tunnel.
type tunnelEnds struct {
	client   *net.TCPConn // what the client application holds
	upstream *net.TCPConn // what the origin server holds
	result   chan Result  // receives the tunnel's Result, buffered
}

// newTunnel connects a client and an upstream through e. The application
// conns are closed at the end of the test.
func newTunnel(t testing.TB, e *Engine, ln *net.TCPListener) *tunnelEnds {
	t.Helper()
	return newTunnelWith(t, e, ln, nil)
}

// newTunnelWith is newTunnel with prepare, if not nil, called on the
// proxy's two sockets before they go to the engine.
func newTunnelWith(t testing.TB, e *Engine, ln *net.TCPListener, prepare func(clientProxy, upstreamProxy *net.TCPConn)) *tunnelEnds {
	t.Helper()
	clientApp, clientProxy := tcpPair(t, ln)
	upstreamProxy, upstreamApp := tcpPair(t, ln)
	if prepare != nil {
		prepare(clientProxy, upstreamProxy)
	}
	te := &tunnelEnds{client: clientApp, upstream: upstreamApp, result: make(chan Result, 1)}
	// A relay bug shows up as an I/O timeout, not as a hung test.
	deadline := time.Now().Add(30 * time.Second)
	clientApp.SetDeadline(deadline)
	upstreamApp.SetDeadline(deadline)
	t.Cleanup(func() {
		clientApp.Close()
		upstreamApp.Close()
	})
	if err := e.Add(clientProxy, upstreamProxy, func(r Result) { te.result <- r }); err != nil {
		t.Fatalf("Add: %v", err)
	}
	return te
}

// wait returns the tunnel's result, failing the test if none comes in time.
func (te *tunnelEnds) wait(t testing.TB) Result {
	t.Helper()
	select {
	case r := <-te.result:
		return r
	case <-time.After(20 * time.Second):
		t.Fatalf("tunnel did not end")
		return Result{}
	}
}

// newListener returns a loopback listener closed at the end of the test.
func newListener(t testing.TB) *net.TCPListener {
	t.Helper()
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// tcpPair returns both ends of one loopback TCP connection. The caller owns
// both.
func tcpPair(t testing.TB, ln *net.TCPListener) (dialed, accepted *net.TCPConn) {
	t.Helper()
	d, err := net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	a, err := ln.AcceptTCP()
	if err != nil {
		d.Close()
		t.Fatalf("accept: %v", err)
	}
	return d, a
}

// sendRandom writes n pseudo-random bytes derived from seed to w and
// returns their SHA-256.
func sendRandom(w io.Writer, seed uint64, n int64) ([32]byte, error) {
	var key [32]byte
	key[0], key[1] = byte(seed), byte(seed>>8)
	key[2], key[3] = byte(seed>>16), byte(seed>>24)
	src := rand.NewChaCha8(key)
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for n > 0 {
		chunk := buf[:min(int64(len(buf)), n)]
		src.Read(chunk)
		h.Write(chunk)
		if _, err := w.Write(chunk); err != nil {
			return [32]byte{}, err
		}
		n -= int64(len(chunk))
	}
	return [32]byte(h.Sum(nil)), nil
}

// recvHash reads r to EOF and returns how many bytes it read and their
// SHA-256.
func recvHash(r io.Reader) (int64, [32]byte, error) {
	h := sha256.New()
	n, err := copyBuf(h, r)
	return n, [32]byte(h.Sum(nil)), err
}

// copyBuf is io.Copy through a user-space buffer, so that the test side
// never splices (Go's splice keeps pipes of its own, which would disturb
// descriptor counts).
func copyBuf(w io.Writer, r io.Reader) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{w}, struct{ io.Reader }{r}, make([]byte, 32<<10))
}

// eventually polls cond every 10ms for up to 10s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// busyTries is how many tunnels a test of an idle timeout kept off by
// traffic tries before it gives up: each stall of the test itself that
// was long enough to end the tunnel rightly costs one.
const busyTries = 5

// keepBusy makes round trips through a tunnel with an idle timeout of
// idle, one every idle/20, for three idle timeouts after from (taken
// before the tunnel was set up): write(i) sends a byte into the tunnel,
// read(i) takes it out at the other end. It returns nil when every round
// trip succeeded. Otherwise it returns the failure, and proves reports
// whether it shows the tunnel ended while busy: the failed round trip's
// write had returned less than idle/2 after the round trip before it
// began (after from, for the first), so the tunnel's idle clock, which
// restarted no earlier than that, still had idle/2 to run when the byte
// was in its socket. A failure after a longer pause of the test (a
// loaded machine that did not run it) proves nothing.
func keepBusy(from time.Time, idle time.Duration, write, read func(i int) error) (proves bool, err error) {
	prev := from
	for i := 0; time.Since(from) < 3*idle; i++ {
		began := time.Now()
		err := write(i)
		wrote := time.Now()
		if err == nil {
			err = read(i)
		}
		if err != nil {
			gap := wrote.Sub(prev)
			return gap < idle/2, fmt.Errorf("round trip %d, written %v after the one before began, %v after the start: %w",
				i, gap.Round(time.Millisecond), time.Since(from).Round(time.Millisecond), err)
		}
		prev = began
		time.Sleep(idle / 20)
	}
	return false, nil
}
