package h2

import (
	"io"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestSlowUploadOutlastsResponseHeader checks that the response-header
// timeout starts when the request body is complete: an upload that
// streams for longer than it, to an origin that reads it all and then
// answers, gets the origin's answer, not a 504; with a known length and
// without one (chunked upstream).
func TestSlowUploadOutlastsResponseHeader(t *testing.T) {
	const pieces = 10
	piece := strings.Repeat("u", 1000)
	for _, tt := range []struct {
		name   string
		length int64 // the request's ContentLength; -1: unknown
	}{
		{"length", pieces * int64(len(piece))},
		{"chunked", -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := proxytest.NewOrigin(t, proxytest.Respond(200, "got it"))
			p := startProxy(t, testConfig(Config{}, origin.Config{ResponseHeaderTimeout: 300 * time.Millisecond}), nil)
			cc := p.client(t)
			pr, pw := io.Pipe()
			t.Cleanup(func() { pr.Close() })
			go func() {
				// The body takes about a second: over three times the
				// response-header timeout.
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for range pieces {
					<-tick.C
					if _, err := io.WriteString(pw, piece); err != nil {
						return
					}
				}
				pw.Close()
			}()
			req := newRequest(t, "POST", o.URL("/"), pr)
			req.ContentLength = tt.length
			resp, body := roundTrip(t, cc, req)
			if resp.StatusCode != 200 || body != "got it" {
				t.Fatalf("got %d %q, want 200 from the origin", resp.StatusCode, body)
			}
			if reqs := o.Requests(); len(reqs) != 1 || len(reqs[0].Body) != pieces*len(piece) {
				t.Fatalf("origin got %d requests", len(reqs))
			}
		})
	}
}

// TestStalledUpload checks that a request body that stops coming ends
// the stream within timeouts.write, however long the response-header
// timeout, its upstream closed and the access log saying why: answered
// 408 when no response had begun, reset (CANCEL) when the origin's
// response was being relayed.
func TestStalledUpload(t *testing.T) {
	const short = 300 * time.Millisecond
	for _, tt := range []struct {
		name    string
		handler proxytest.Handler
		fields  []string // beside the request's pseudo-fields
		status  string   // the answer the client gets
		reset   http2.ErrCode
		logged  float64 // the status in the access log
	}{
		{"before the response", proxytest.Respond(200, "never"),
			[]string{"content-length", "100000"}, "408", http2.ErrCodeNo, 408},
		{"during the response", func(x *proxytest.Exchange) {
			// The origin answers at once and streams its body while the
			// request body is still to come (a bidirectional exchange).
			if _, err := x.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"); err != nil {
				return
			}
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for range 200 {
				select {
				case <-tick.C:
				case <-x.Done():
					return
				}
				if _, err := x.WriteString("1\r\nx\r\n"); err != nil {
					x.CloseConn()
					return
				}
			}
			x.CloseConn()
		}, nil, "200", http2.ErrCodeCancel, 200},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := proxytest.NewOrigin(t, tt.handler)
			p, logs := startLoggedProxy(t, testConfig(Config{WriteTimeout: short}, origin.Config{WriteTimeout: short, ResponseHeaderTimeout: time.Minute}))
			rc := p.raw(t)
			client := rc.c.LocalAddr().String()
			rc.headers(1, false, append([]string{":method", "POST", ":scheme", "http", ":authority", o.Addr, ":path", "/"}, tt.fields...)...)
			rc.fr.WriteData(1, false, []byte("abc"))
			e := rc.readToEnd(short+margin, func(e *ending) bool { _, ok := e.resets[1]; return ok })
			t.Logf("status %s, RST_STREAM(%v) %v after the request", e.statuses[1], e.resets[1], e.after.Round(time.Millisecond))
			if e.statuses[1] != tt.status || e.resets[1] != tt.reset {
				t.Errorf("got status %q and RST_STREAM(%v), want %s and RST_STREAM(%v)", e.statuses[1], e.resets[1], tt.status, tt.reset)
			}
			proxytest.WaitFor(t, "the stalled stream's upstream closed", func() bool { return o.ClosedConns() == 1 })
			rec := logs.waitRecord(t, client)
			if rec["status"] != tt.logged || rec["reason"] != "body-timeout" {
				t.Errorf("logged status %v reason %v, want %v body-timeout (%v)", rec["status"], rec["reason"], tt.logged, rec)
			}
		})
	}
}

// TestEarlyAnswerStalledBody checks that an origin answering before the
// body is complete is relayed at once, while the body is still awaited
// and every timeout is far away.
func TestEarlyAnswerStalledBody(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.ThenClose(proxytest.Raw(
		"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")))
	p := startProxy(t, testConfig(Config{}), nil)
	rc := p.raw(t)
	rc.headers(1, false, ":method", "POST", ":scheme", "http", ":authority", o.Addr, ":path", "/", "content-length", "1000000")
	rc.fr.WriteData(1, false, []byte("partial"))
	e := rc.readToEnd(margin, func(e *ending) bool { return e.statuses[1] != "" })
	if e.statuses[1] != "401" {
		t.Fatalf("got %q, want the origin's early 401", e.statuses[1])
	}
}
