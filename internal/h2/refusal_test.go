package h2

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// refusalLog is a proxy's JSON access log and its debug log.
type refusalLog struct {
	access, debug proxytest.LogBuffer
}

// startLoggedProxy starts a proxy with cfg whose policy (no users) logs
// to the returned access and debug logs.
func startLoggedProxy(t *testing.T, cfg Config) (*testProxy, *refusalLog) {
	t.Helper()
	l := &refusalLog{}
	al := proxytest.JSONAccessLog(t, &l.access)
	p := startProxy(t, cfg, proxytest.NewPolicy(t, proxytest.PolicyConfig{
		Listener: "tls", AccessLog: al,
		Logger: slog.New(slog.NewTextHandler(&l.debug, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}))
	return p, l
}

// records returns the access log records of the client at client.
func (l *refusalLog) records(t *testing.T, client string) []map[string]any {
	t.Helper()
	var recs []map[string]any
	for line := range strings.Lines(l.access.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		if r["client"] == client {
			recs = append(recs, r)
		}
	}
	return recs
}

// waitRecord waits for the first access log record of client.
func (l *refusalLog) waitRecord(t *testing.T, client string) map[string]any {
	t.Helper()
	proxytest.WaitFor(t, "the access log record of "+client, func() bool { return len(l.records(t, client)) > 0 })
	return l.records(t, client)[0]
}

// TestProtocolErrorsLogged checks that what a client gets wrong in
// HTTP/2 is logged: a malformed request, whose stream is reset, as one
// record with the method when it was valid and no target, up to
// maxRejectedLogged of them on a connection; a connection error as one
// record for the connection, however many bad frames follow; a request
// rustle answers itself with the reason for its status; and each with a
// debug line.
func TestProtocolErrorsLogged(t *testing.T) {
	p, logs := startLoggedProxy(t, testConfig(Config{MaxHeaderListSize: 1024}))
	big := strings.Repeat("b", 500)
	get := []string{":method", "GET", ":scheme", "http", ":authority", "example.test", ":path", "/"}
	tests := []struct {
		name   string
		send   func(rc *rawClient)
		answer func(f http2.Frame) bool // the frame the client gets
		want   map[string]any           // the record's fields
	}{
		{"missing :path", func(rc *rawClient) {
			rc.headers(1, true, ":method", "GET", ":scheme", "http", ":authority", "example.test", "x-secret", "hunter2")
		}, isRST(1, http2.ErrCodeProtocol),
			map[string]any{"protocol": "h2", "method": "GET", "target": "", "status": 0.0, "reason": "protocol"}},
		{"connection-specific field", func(rc *rawClient) {
			rc.headers(1, true, append(get, "connection", "close")...)
		}, isRST(1, http2.ErrCodeProtocol),
			map[string]any{"protocol": "h2", "method": "GET", "target": "", "status": 0.0, "reason": "protocol"}},
		{"upper-case field name", func(rc *rawClient) {
			rc.headers(1, true, append(get, "X-Secret", "hunter2")...)
		}, isRST(1, http2.ErrCodeProtocol),
			map[string]any{"protocol": "h2", "method": "", "target": "", "status": 0.0, "reason": "protocol"}},
		{"invalid method", func(rc *rawClient) {
			rc.headers(1, true, ":method", "G T", ":scheme", "http", ":authority", "example.test", ":path", "/")
		}, isRST(1, http2.ErrCodeProtocol),
			map[string]any{"protocol": "h2", "method": "", "target": "", "status": 0.0, "reason": "protocol"}},
		{"header list too large", func(rc *rawClient) {
			rc.headers(1, true, append(get, "x-a", big, "x-b", big, "x-c", big)...)
		}, isStatus(1, "431"),
			map[string]any{"protocol": "h2", "method": "GET", "target": "", "status": 431.0, "reason": "head-too-large"}},
		{"https scheme", func(rc *rawClient) {
			rc.headers(1, true, ":method", "GET", ":scheme", "https", ":authority", "example.test", ":path", "/")
		}, isStatus(1, "400"),
			map[string]any{"protocol": "h2", "method": "GET", "target": "https://example.test/", "status": 400.0, "reason": "bad-request"}},
		{"userinfo in :authority", func(rc *rawClient) {
			rc.headers(1, true, ":method", "GET", ":scheme", "http", ":authority", "alice:hunter2@example.test", ":path", "/")
		}, isStatus(1, "400"),
			map[string]any{"protocol": "h2", "method": "GET", "target": "", "status": 400.0, "reason": "bad-request"}},
		{"connection error", func(rc *rawClient) {
			for range 10 {
				rc.fr.WriteRSTStream(9, http2.ErrCodeCancel) // an idle stream
			}
		}, isGoAway(http2.ErrCodeProtocol),
			map[string]any{"protocol": "h2", "method": "", "target": "", "status": 0.0, "reason": "protocol"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rc := p.rawOwn(t)
			client := rc.c.LocalAddr().String()
			tt.send(rc)
			if f := rc.next(); !tt.answer(f) {
				t.Fatalf("answered %v", f)
			}
			rec := logs.waitRecord(t, client)
			for k, v := range tt.want {
				if rec[k] != v {
					t.Errorf("record %s = %v, want %v (%v)", k, rec[k], v, rec)
				}
			}
			var debug []string
			for line := range strings.Lines(logs.debug.String()) {
				if strings.Contains(line, "client="+client) {
					debug = append(debug, line)
				}
			}
			if len(debug) != 1 || !strings.Contains(debug[0], `msg="gate: request refused"`) ||
				!strings.Contains(debug[0], "reason="+tt.want["reason"].(string)) {
				t.Errorf("debug lines of the client %q, want one refusal", debug)
			}
			if strings.Contains(logs.access.String()+logs.debug.String(), "hunter2") {
				t.Errorf("a header value in the logs:\n%s\n%s", logs.access.String(), logs.debug.String())
			}
		})
	}

	// A flood of malformed requests on one connection leaves
	// maxRejectedLogged records, and each stream is still reset.
	flood := p.rawOwn(t)
	for i := range maxRejectedLogged + 4 {
		flood.headers(uint32(2*i+1), true, ":method", "GET", ":scheme", "http", ":authority", "example.test")
	}
	for i := range maxRejectedLogged + 4 {
		if f := flood.next(); !isRST(uint32(2*i+1), http2.ErrCodeProtocol)(f) {
			t.Fatalf("malformed request %d answered %v", i+1, f)
		}
	}
	floodClient := flood.c.LocalAddr().String()
	proxytest.WaitFor(t, "the flood's records", func() bool { return len(logs.records(t, floodClient)) >= maxRejectedLogged })
	floodMarker := p.rawOwn(t)
	floodMarker.headers(1, true, ":method", "GET", ":scheme", "https", ":authority", "example.test", ":path", "/")
	logs.waitRecord(t, floodMarker.c.LocalAddr().String())
	if n := len(logs.records(t, floodClient)); n != maxRejectedLogged {
		t.Errorf("%d records for %d malformed requests on one connection, want %d", n, maxRejectedLogged+4, maxRejectedLogged)
	}

	// The connection error's connection is closed; a record written after
	// its end (a later client's) shows that nothing more of it was queued.
	rc := p.rawOwn(t)
	client := rc.c.LocalAddr().String()
	for range 10 {
		rc.fr.WriteRSTStream(9, http2.ErrCodeCancel)
	}
	rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if _, err := rc.fr.ReadFrame(); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatal("the connection stays open after a connection error")
			}
			break
		}
	}
	marker := p.rawOwn(t)
	marker.headers(1, true, ":method", "GET", ":scheme", "https", ":authority", "example.test", ":path", "/")
	logs.waitRecord(t, marker.c.LocalAddr().String())
	if n := len(logs.records(t, client)); n != 1 {
		t.Errorf("%d records for a connection error after 10 bad frames, want 1", n)
	}
}

// isRST matches RST_STREAM of stream id with code.
func isRST(id uint32, code http2.ErrCode) func(http2.Frame) bool {
	return func(f http2.Frame) bool {
		r, ok := f.(*http2.RSTStreamFrame)
		return ok && r.StreamID == id && r.ErrCode == code
	}
}

// isStatus matches a response head on stream id with status.
func isStatus(id uint32, status string) func(http2.Frame) bool {
	return func(f http2.Frame) bool {
		h, ok := f.(*http2.MetaHeadersFrame)
		return ok && h.StreamID == id && h.PseudoValue("status") == status
	}
}

// isGoAway matches GOAWAY with code.
func isGoAway(code http2.ErrCode) func(http2.Frame) bool {
	return func(f http2.Frame) bool {
		g, ok := f.(*http2.GoAwayFrame)
		return ok && g.ErrCode == code
	}
}
