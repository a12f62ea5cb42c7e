package h2

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

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

// TestIdleConnParks checks that an HTTP/2 connection with no stream
// keeps no goroutine once its client has been quiet for a moment (on
// Linux: tunnel.Parker's Notify; elsewhere one waits), after one
// request, after two sent back to back in one write, and after a PING;
// that each was answered, the next request after a park too; and that
// the connection, parked, still ends with GOAWAY after its idle timeout
// and not before.
func TestIdleConnParks(t *testing.T) {
	const idle = 3 * time.Second
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}))
	t.Cleanup(origin.Close)
	host := strings.TrimPrefix(origin.URL, "http://")
	p := startProxy(t, testConfig(Config{IdleTimeout: idle}), nil)
	rc := p.raw(t)
	get := func(ids ...uint32) {
		t.Helper()
		var blocks bytes.Buffer
		fr := http2.NewFramer(&blocks, nil)
		for _, id := range ids {
			rc.buf.Reset()
			for _, kv := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", host}, {":path", fmt.Sprintf("/%d", id)}} {
				rc.enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
			}
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: rc.buf.Bytes(), EndStream: true, EndHeaders: true})
		}
		if _, err := rc.c.Write(blocks.Bytes()); err != nil {
			t.Fatal(err)
		}
		bodies := map[uint32]string{}
		for ended := 0; ended < len(ids); {
			switch f := rc.next().(type) {
			case *http2.MetaHeadersFrame:
				if s := f.PseudoValue("status"); s != "200" {
					t.Fatalf("stream %d: status %s, want 200", f.StreamID, s)
				}
				if f.StreamEnded() {
					ended++
				}
			case *http2.DataFrame:
				bodies[f.StreamID] += string(f.Data())
				if f.StreamEnded() {
					ended++
				}
			default:
				t.Fatalf("got %T %v, want the answers", f, f)
			}
		}
		for _, id := range ids {
			if want := fmt.Sprintf("/%d", id); bodies[id] != want {
				t.Fatalf("stream %d: body %q, want %q", id, bodies[id], want)
			}
		}
	}
	parked := func(after string) {
		t.Helper()
		if runtime.GOOS != "linux" {
			return
		}
		// Well before the idle timeout.
		if err := proxytest.CheckGoroutines(idle/2, "h2.(*conn)"); err != nil {
			t.Fatalf("after %s, a goroutine waits for the idle connection: %v", after, err)
		}
	}
	get(1)
	parked("one request")
	get(3, 5)
	parked("two requests back to back")
	if err := rc.fr.WritePing(false, [8]byte{1}); err != nil {
		t.Fatal(err)
	}
	if e := rc.readToEnd(proxytest.DefaultTimeout, func(e *ending) bool { return e.pingAcks > 0 }); e.pingAcks == 0 {
		t.Fatal("PING not answered")
	}
	parked("a PING")
	get(7)
	start := time.Now()
	parked("a request after a park")
	e := rc.readToEnd(idle+margin, nil)
	if e.goAway == nil || e.goAway.ErrCode != http2.ErrCodeNo {
		t.Fatalf("connection ended (%v) without GOAWAY(NO_ERROR) after its idle timeout: %v", e.err, e.goAway)
	}
	if since := time.Since(start); since < idle*3/4 {
		t.Fatalf("idle connection ended %v after its last request, before its idle timeout (%v)", since, idle)
	}
}
