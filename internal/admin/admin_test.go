package admin

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rustle-proxy/rustle/internal/leaktest"
	"github.com/rustle-proxy/rustle/internal/metrics"
)

// TestMain fails the run when a serving goroutine outlives the tests.
func TestMain(m *testing.M) {
	os.Exit(leaktest.Main(m, 5*time.Second, "internal/admin."))
}

func get(t *testing.T, c *http.Client, method, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, url, err)
	}
	return resp.StatusCode, string(b)
}

func TestRoutes(t *testing.T) {
	var ready atomic.Bool
	m := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fake_metric 1\n") })
	s := New("127.0.0.1:0", m, ready.Load, nil, Access{})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)

	tests := []struct {
		name       string
		method     string
		path       string
		ready      bool
		wantCode   int
		wantBodyIn string
	}{
		{"healthz", "GET", "/healthz", false, 200, "ok"},
		{"healthz head", "HEAD", "/healthz", false, 200, ""},
		{"readyz not ready", "GET", "/readyz", false, 503, "not ready"},
		{"readyz ready", "GET", "/readyz", true, 200, "ready"},
		{"metrics", "GET", "/metrics", true, 200, "fake_metric 1"},
		{"index", "GET", "/", true, 200, "/metrics"},
		{"unknown path", "GET", "/debug/pprof/", true, 404, ""},
		{"post", "POST", "/healthz", true, 405, ""},
		{"delete metrics", "DELETE", "/metrics", true, 405, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready.Store(tt.ready)
			code, body := get(t, ts.Client(), tt.method, ts.URL+tt.path)
			if code != tt.wantCode || !strings.Contains(body, tt.wantBodyIn) {
				t.Errorf("%s %s = %d %q, want %d containing %q", tt.method, tt.path, code, body, tt.wantCode, tt.wantBodyIn)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	s := New("127.0.0.1:0", nil, nil, nil, Access{})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	if code, _ := get(t, ts.Client(), "GET", ts.URL+"/readyz"); code != 200 {
		t.Errorf("/readyz with a nil ready func = %d, want 200", code)
	}
	if code, _ := get(t, ts.Client(), "GET", ts.URL+"/metrics"); code != 404 {
		t.Errorf("/metrics with a nil handler = %d, want 404", code)
	}
}

// TestScrape serves real metrics on a real listener, scrapes and parses
// them, then shuts the server down.
func TestScrape(t *testing.T) {
	m := metrics.New(metrics.Config{Version: "test"})
	m.Listener("main", "http").Request(200, 5, 7)
	var ready atomic.Bool
	ready.Store(true)
	s := New("127.0.0.1:0", m.Handler(), ready.Load, nil, Access{})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Start(); err == nil {
		t.Errorf("second Start succeeded")
	}
	base := "http://" + s.Addr().String()
	c := &http.Client{Timeout: 10 * time.Second}

	resp, err := c.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	f := fams["rustle_requests_total"]
	var got float64
	for _, s := range f.GetMetric() {
		for _, l := range s.GetLabel() {
			if l.GetName() == "code" && l.GetValue() == "2xx" {
				got = s.GetCounter().GetValue()
			}
		}
	}
	if got != 1 {
		t.Errorf("rustle_requests_total{code=2xx} = %v, want 1", got)
	}
	if _, ok := fams["go_goroutines"]; !ok {
		t.Errorf("go_goroutines missing from a real scrape")
	}

	if code, _ := get(t, c, "GET", base+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d, want 200", code)
	}
	ready.Store(false) // draining
	if code, _ := get(t, c, "GET", base+"/readyz"); code != 503 {
		t.Errorf("/readyz while draining = %d, want 503", code)
	}
	if code, _ := get(t, c, "GET", base+"/healthz"); code != 200 {
		t.Errorf("/healthz while draining = %d, want 200", code)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if _, err := c.Get(base + "/healthz"); err == nil {
		t.Errorf("the server still answers after Shutdown")
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close after Shutdown: %v", err)
	}
}

func TestStartErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	s := New(ln.Addr().String(), nil, nil, nil, Access{})
	err = s.Start()
	if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("Start on a used address = %v, want an error naming it", err)
	}
	if s.Addr() != nil {
		t.Errorf("Addr after a failed Start = %v, want nil", s.Addr())
	}
	// Shutdown and Close of a server that never served return at once.
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown of an unstarted server: %v", err)
	}
	s.Close()
}

// TestShutdownTimeout checks that Shutdown gives up on a request that
// outlasts ctx and still returns.
func TestShutdownTimeout(t *testing.T) {
	block := make(chan struct{})
	entered := make(chan struct{})
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		select {
		case <-block:
		case <-r.Context().Done():
		}
	})
	s := New("127.0.0.1:0", slow, nil, nil, Access{})
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	clientDone := make(chan struct{})
	t.Cleanup(func() { close(block); s.Close(); <-clientDone })
	go func() {
		defer close(clientDone)
		resp, err := http.Get("http://" + s.Addr().String() + "/metrics")
		if err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the request never reached the handler")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); err == nil {
		t.Errorf("Shutdown with a request in progress past ctx returned nil")
	}
}
