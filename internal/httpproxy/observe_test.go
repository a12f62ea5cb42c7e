package httpproxy_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// lockedBuffer is an io.Writer safe for the access log's writer goroutine
// and the test reading it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestAccessLogAndMetrics checks the record and the counts of a request,
// a refused request and a tunnel.
func TestAccessLogAndMetrics(t *testing.T) {
	var out lockedBuffer
	al, err := accesslog.New(accesslog.Config{Format: accesslog.FormatJSON, Writer: &out})
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Config{})
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "hello"))
	echo := proxytest.NewEcho(t)
	proxy := proxytest.StartProxy(t, httpproxy.Config{
		Listener: "main", AccessLog: al, Metrics: m.Listener("main", "http"),
	})

	cl := proxytest.Dial(t, proxy)
	resp, _ := cl.RoundTrip("GET " + o.URL("/a") + " HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.Status != 200 {
		t.Fatalf("GET: %d", resp.Status)
	}
	resp, _ = cl.RoundTrip("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.Status != 400 {
		t.Fatalf("origin-form GET: %d, want 400", resp.Status)
	}
	tc := proxytest.Connect(t, proxy, echo.Addr)
	tc.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := tc.Read(buf); err != nil || string(buf) != "ping" {
		t.Fatalf("tunnel echo: %v %q", err, buf)
	}
	tc.Close()
	proxytest.WaitFor(t, "the tunnel's access log line", func() bool {
		return strings.Count(out.String(), "\n") >= 3
	})
	al.Close()

	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 3 {
		t.Fatalf("%d access log lines, want 3:\n%s", len(recs), out.String())
	}
	get, refused, tun := recs[0], recs[1], recs[2]
	if refused["status"] != float64(400) || refused["target"] != "/" {
		t.Errorf("refused request's record = %v", refused)
	}
	if get["protocol"] != "http" || get["method"] != "GET" || get["target"] != o.URL("/a") ||
		get["status"] != float64(200) || get["listener"] != "main" || get["upstream"] != o.Addr {
		t.Errorf("GET record = %v", get)
	}
	if get["bytes_down"].(float64) < 5 {
		t.Errorf("GET record counts %v bytes down, want the response", get["bytes_down"])
	}
	if tun["protocol"] != "connect" || tun["status"] != float64(200) || tun["bytes_up"] != float64(4) || tun["bytes_down"] != float64(4) {
		t.Errorf("CONNECT record = %v", tun)
	}
}
