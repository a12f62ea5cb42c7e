package h2

import (
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestIdleTunnelWaits checks what ends or resumes a tunnel waiting, idle,
// for both its client and its upstream (on Linux with no goroutine: see
// tunnel.Parker's Notify, which the test checks): client bytes resume
// the connection's reader
// and the echo's answer the tunnel's pump, more than once; then the
// tunnel idle timeout still resets the stream (CANCEL), not before it
// has passed; and the connection, left with no stream, still ends after
// its own idle timeout.
func TestIdleTunnelWaits(t *testing.T) {
	const idle = time.Second
	echo := proxytest.NewEcho(t)
	p := startProxy(t, testConfig(Config{TunnelIdleTimeout: idle, IdleTimeout: idle}), nil)
	rc := p.raw(t)
	rc.headers(1, false, ":method", "CONNECT", ":authority", echo.Addr)
	if h, ok := rc.next().(*http2.MetaHeadersFrame); !ok || h.PseudoValue("status") != "200" {
		t.Fatal("CONNECT not answered 200")
	}
	for i, msg := range []string{"one", "two", "three"} {
		if i > 0 && runtime.GOOS == "linux" {
			// Idle: neither the connection nor the tunnel holds a
			// goroutine (elsewhere each waits on one), well before
			// the idle timeouts would end them.
			if err := proxytest.CheckGoroutines(idle/2, "h2.(*conn)", "h2.(*stream)"); err != nil {
				t.Fatalf("idle tunnel %d: %v", i, err)
			}
		}
		if err := rc.fr.WriteData(1, false, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		f := rc.next()
		d, ok := f.(*http2.DataFrame)
		if !ok || string(d.Data()) != msg {
			t.Fatalf("echo %d: got %T %v, want DATA %q", i, f, f, msg)
		}
	}
	start := time.Now()
	e := rc.readToEnd(idle+margin, func(e *ending) bool { _, ok := e.resets[1]; return ok })
	if code := e.resets[1]; code != http2.ErrCodeCancel {
		t.Fatalf("idle tunnel reset with %v, want CANCEL", code)
	}
	if since := time.Since(start); since < idle*3/4 {
		t.Fatalf("idle tunnel reset %v after its last bytes, before its idle timeout (%v)", since, idle)
	}
	e = rc.readToEnd(idle+margin, nil)
	if e.goAway == nil {
		t.Fatalf("connection ended (%v) without GOAWAY after its idle timeout", e.err)
	}
}
