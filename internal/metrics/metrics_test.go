package metrics

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape serves m's handler and parses the text exposition.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	body := scrapeText(t, m)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse exposition: %v\n%s", err, body)
	}
	return fams
}

func scrapeText(t *testing.T, m *Metrics) []byte {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("Content-Type %q, want the text format", ct)
	}
	return rec.Body.Bytes()
}

// value returns the value of the series of family name whose labels
// include want, and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := make(map[string]string)
		for _, lp := range m.GetLabel() {
			have[lp.GetName()] = lp.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

type series struct {
	name   string
	labels map[string]string
	want   float64
}

func checkSeries(t *testing.T, fams map[string]*dto.MetricFamily, want []series) {
	t.Helper()
	for _, s := range want {
		got, ok := value(fams, s.name, s.labels)
		if !ok {
			t.Errorf("%s%v missing", s.name, s.labels)
			continue
		}
		if got != s.want {
			t.Errorf("%s%v = %v, want %v", s.name, s.labels, got, s.want)
		}
	}
}

func lbl(kv ...string) map[string]string {
	m := make(map[string]string)
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func TestListenerSeries(t *testing.T) {
	m := New(Config{Version: "v1.2.3"})
	l := m.Listener("main", "http")
	if l2 := m.Listener("main", "http"); l2 != l {
		t.Errorf("Listener returned a new value for the same name and protocol")
	}
	s := m.Listener("main", "socks5")
	for range 3 {
		l.Accepted()
	}
	l.Closed()
	s.Accepted()
	l.Request(200, 10, 20)
	l.Request(204, 0, 0)
	l.Request(407, 0, 0)
	l.Request(502, 0, 0)
	l.Request(101, 1, 2)
	l.Request(0, 0, 0)   // no response
	l.Request(999, 0, 0) // nonsense
	l.Request(99, 0, 0)
	l.Bytes(1000, 2000)
	l.Bytes(-1, 0) // ignored
	l.TunnelOpened()
	s.TunnelOpened()
	s.TunnelOpened()
	l.AuthFailed()
	l.AuthChallenged()
	l.AuthChallenged()
	s.AuthChallenged()
	s.ACLDenied()
	l.WouldDeny("block-ads")
	l.WouldDeny("block-ads")
	s.WouldDeny("default")
	l.SNIChecked(SNIMatched, false)
	l.SNIChecked(SNIDiffers, true)
	l.SNIChecked(SNIDiffers, false)
	s.SNIChecked(SNINotTLS, true)
	l.SNIChecked(SNIResult(200), true) // nonsense: ignored
	l.Dialed(3*time.Millisecond, true)
	l.Dialed(time.Second, false)
	l.Dialed(time.Second, false)
	l.FirstByte(20 * time.Millisecond)

	fams := scrape(t, m)
	plain := func(kv ...string) map[string]string {
		return lbl(append([]string{"listener", "main", "protocol", "http"}, kv...)...)
	}
	socks := func(kv ...string) map[string]string {
		return lbl(append([]string{"listener", "main", "protocol", "socks5"}, kv...)...)
	}
	checkSeries(t, fams, []series{
		{"rustle_connections_accepted_total", plain(), 3},
		{"rustle_connections_open", plain(), 2},
		{"rustle_connections_accepted_total", socks(), 1},
		{"rustle_connections_open", socks(), 1},
		{"rustle_requests_total", plain("code", "1xx"), 1},
		{"rustle_requests_total", plain("code", "2xx"), 2},
		{"rustle_requests_total", plain("code", "3xx"), 0},
		{"rustle_requests_total", plain("code", "4xx"), 1},
		{"rustle_requests_total", plain("code", "5xx"), 1},
		{"rustle_requests_total", plain("code", "other"), 3},
		{"rustle_bytes_total", plain("direction", "up"), 1011},
		{"rustle_bytes_total", plain("direction", "down"), 2022},
		{"rustle_tunnels_total", plain(), 1},
		{"rustle_tunnels_total", socks(), 2},
		{"rustle_auth_failures_total", plain(), 1},
		{"rustle_auth_failures_total", socks(), 0},
		{"rustle_auth_challenges_total", plain(), 2},
		{"rustle_auth_challenges_total", socks(), 1},
		{"rustle_acl_denials_total", socks(), 1},
		{"rustle_acl_would_deny_total", plain("rule", "block-ads"), 2},
		{"rustle_acl_would_deny_total", socks("rule", "default"), 1},
		{"rustle_sni_checks_total", plain("result", "matched"), 1},
		{"rustle_sni_checks_total", plain("result", "differs"), 2},
		{"rustle_sni_checks_total", plain("result", "no-sni"), 0},
		{"rustle_sni_checks_total", socks("result", "not-tls"), 1},
		{"rustle_sni_refusals_total", plain(), 1},
		{"rustle_sni_refusals_total", socks(), 1},
		{"rustle_upstream_dial_duration_seconds", lbl("result", "ok"), 1},
		{"rustle_upstream_dial_duration_seconds", lbl("result", "error"), 2},
		{"rustle_upstream_first_byte_seconds", lbl("listener", "main"), 1},
		{"rustle_build_info", lbl("version", "v1.2.3"), 1},
	})
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_open_fds", "process_max_fds"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("runtime series %s missing", name)
		}
	}
	for _, name := range []string{"rustle_user_requests_total", "rustle_upstream_pool_hits_total", "rustle_tunnels_open", "rustle_access_log_dropped_total"} {
		if _, ok := fams[name]; ok {
			t.Errorf("%s present though not enabled or set", name)
		}
	}
}

// TestLint runs Prometheus's metric linter over rustle's series.
func TestLint(t *testing.T) {
	m := New(Config{PerUser: true})
	m.Listener("main", "http").Request(200, 1, 1)
	m.User("alice").Request(1, 1)
	m.SetPoolStats(func() PoolStats { return PoolStats{} })
	m.SetTunnelsOpen(func() int { return 0 })
	m.SetAccessLogDropped(func() uint64 { return 0 })
	m.SetListStats(func() []ListStat {
		return []ListStat{{Name: "https://lists.example/ads.txt", Loaded: true, Entries: 3, Checked: time.Now()}, {Name: "never.txt"}}
	})
	m.Listener("main", "http").WouldDeny("r")
	problems, err := promlint.New(bytes.NewReader(scrapeText(t, m))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "rustle_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

func TestFuncs(t *testing.T) {
	m := New(Config{})
	var mu sync.Mutex
	stats := PoolStats{Hits: 7, Misses: 3, Idle: 2}
	m.SetPoolStats(func() PoolStats { mu.Lock(); defer mu.Unlock(); return stats })
	m.SetTunnelsOpen(func() int { return 5 })
	m.SetAccessLogDropped(func() uint64 { return 11 })
	checkSeries(t, scrape(t, m), []series{
		{"rustle_upstream_pool_hits_total", nil, 7},
		{"rustle_upstream_pool_misses_total", nil, 3},
		{"rustle_upstream_pool_idle_connections", nil, 2},
		{"rustle_tunnels_open", nil, 5},
		{"rustle_access_log_dropped_total", nil, 11},
	})
	mu.Lock()
	stats.Hits = 8
	mu.Unlock()
	checkSeries(t, scrape(t, m), []series{{"rustle_upstream_pool_hits_total", nil, 8}})
	m.SetPoolStats(nil)
	if _, ok := scrape(t, m)["rustle_upstream_pool_hits_total"]; ok {
		t.Errorf("pool series still present after SetPoolStats(nil)")
	}
}

func TestPerUser(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		m := New(Config{})
		if u := m.User("alice"); u != nil {
			t.Fatalf("User with per-user series off = %v, want nil", u)
		}
		m.User("alice").Request(1, 1) // nil receiver: no-op
		if _, ok := scrape(t, m)["rustle_user_requests_total"]; ok {
			t.Errorf("per-user series present though off")
		}
	})
	t.Run("bounded", func(t *testing.T) {
		m := New(Config{PerUser: true, MaxUsers: 2})
		buf := []byte("alice")
		a := m.User(string(buf))
		copy(buf, "zzzzz") // the caller's memory changes; the label must not
		if m.User("alice") != a {
			t.Errorf("User(alice) twice returned different values")
		}
		a.Request(100, 200)
		m.User("bob").Request(1, 2)
		m.User("carol").Request(10, 0)
		m.User("dave").Request(20, 0)
		m.User("dave").Bytes(5, 5)
		if m.User("carol") != m.User("dave") {
			t.Errorf("users past the bound have different series")
		}
		fams := scrape(t, m)
		checkSeries(t, fams, []series{
			{"rustle_user_requests_total", lbl("user", "alice"), 1},
			{"rustle_user_requests_total", lbl("user", "bob"), 1},
			{"rustle_user_requests_total", lbl("user", OtherUser), 2},
			{"rustle_user_bytes_total", lbl("user", "alice", "direction", "up"), 100},
			{"rustle_user_bytes_total", lbl("user", "alice", "direction", "down"), 200},
			{"rustle_user_bytes_total", lbl("user", OtherUser, "direction", "up"), 35},
		})
		var users []string
		for _, s := range fams["rustle_user_requests_total"].GetMetric() {
			users = append(users, s.GetLabel()[0].GetValue())
		}
		if diff := cmp.Diff([]string{OtherUser, "alice", "bob"}, users); diff != "" {
			t.Errorf("user label values (-want +got):\n%s", diff)
		}
	})
}

// TestNil checks that a nil Metrics and what it returns are safe to use.
func TestNil(t *testing.T) {
	var m *Metrics
	l := m.Listener("main", "http")
	if l != nil {
		t.Fatalf("nil Metrics returned a ListenerMetrics")
	}
	l.Accepted()
	l.Closed()
	l.Request(200, 1, 1)
	l.Bytes(1, 1)
	l.TunnelOpened()
	l.AuthFailed()
	l.AuthChallenged()
	l.ACLDenied()
	l.WouldDeny("r")
	l.Dialed(time.Second, true)
	l.FirstByte(time.Second)
	m.User("a").Request(1, 1)
	m.SetListStats(nil)
	m.SetPoolStats(nil)
	m.SetTunnelsOpen(nil)
	m.SetAccessLogDropped(nil)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusNotFound {
		t.Errorf("nil Metrics' handler answered %d, want 404", rec.Code)
	}
}

// TestNoAllocs checks that the methods the data path calls do not
// allocate.
func TestNoAllocs(t *testing.T) {
	m := New(Config{PerUser: true, MaxUsers: 1})
	l := m.Listener("main", "http")
	u := m.User("alice")
	m.User("bob")
	name := strings.Clone("alice") // not the constant the map was filled with
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"Accepted+Closed", func() { l.Accepted(); l.Closed() }},
		{"Request", func() { l.Request(200, 100, 1000) }},
		{"Bytes", func() { l.Bytes(100, 1000) }},
		{"TunnelOpened", l.TunnelOpened},
		{"AuthFailed", l.AuthFailed},
		{"AuthChallenged", l.AuthChallenged},
		{"ACLDenied", l.ACLDenied},
		{"Dialed", func() { l.Dialed(time.Millisecond, true) }},
		{"FirstByte", func() { l.FirstByte(time.Millisecond) }},
		{"User.Request", func() { u.Request(1, 2) }},
		{"User lookup, known", func() { m.User(name) }},
		{"User lookup, past the bound", func() { m.User("bob") }},
	} {
		if n := testing.AllocsPerRun(100, tc.f); n != 0 {
			t.Errorf("%s: %v allocations per call, want 0", tc.name, n)
		}
	}
}

// TestConcurrent updates from many goroutines while scraping, for the
// race detector, and checks the totals.
func TestConcurrent(t *testing.T) {
	m := New(Config{PerUser: true, MaxUsers: 4})
	const workers, per = 8, 500
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := m.Listener("main", "http")
			u := m.User(fmt.Sprintf("user%d", w))
			for range per {
				l.Accepted()
				l.Request(200, 1, 2)
				u.Request(1, 2)
				l.Closed()
			}
		}()
	}
	for range 5 {
		io.Discard.Write(scrapeText(t, m))
	}
	wg.Wait()
	fams := scrape(t, m)
	main := lbl("listener", "main", "protocol", "http")
	checkSeries(t, fams, []series{
		{"rustle_connections_accepted_total", main, workers * per},
		{"rustle_connections_open", main, 0},
		{"rustle_bytes_total", lbl("listener", "main", "direction", "down"), 2 * workers * per},
	})
	var total float64
	for _, s := range fams["rustle_user_requests_total"].GetMetric() {
		total += s.GetCounter().GetValue()
	}
	if total != workers*per {
		t.Errorf("user requests sum to %v, want %v", total, workers*per)
	}
	if n := len(fams["rustle_user_requests_total"].GetMetric()); n != 5 {
		t.Errorf("%d user series, want 4 users and %s", n, OtherUser)
	}
}

func BenchmarkRequest(b *testing.B) {
	m := New(Config{})
	l := m.Listener("main", "http")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Request(200, 512, 4096)
		}
	})
}

func BenchmarkConnection(b *testing.B) {
	m := New(Config{PerUser: true})
	l := m.Listener("main", "http")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Accepted()
			u := m.User("alice")
			l.Request(200, 512, 4096)
			u.Request(512, 4096)
			l.FirstByte(time.Millisecond)
			l.Closed()
		}
	})
}

// TestListSeries checks the rustle_list_* series: every list's loaded
// gauge and failures, and for a loaded one its entries, bad lines and
// the age of what is in use.
func TestListSeries(t *testing.T) {
	m := New(Config{})
	checked := time.Now().Add(-90 * time.Second)
	m.SetListStats(func() []ListStat {
		return []ListStat{
			{Name: "https://lists.example/ads.txt", Loaded: true, Entries: 1000, BadLines: 2, Checked: checked, Failures: 3},
			{Name: "/etc/rustle/never.txt", Failures: 1},
		}
	})
	fams := scrape(t, m)
	ads, never := lbl("list", "https://lists.example/ads.txt"), lbl("list", "/etc/rustle/never.txt")
	checkSeries(t, fams, []series{
		{"rustle_list_loaded", ads, 1},
		{"rustle_list_entries", ads, 1000},
		{"rustle_list_bad_lines", ads, 2},
		{"rustle_list_refresh_failures_total", ads, 3},
		{"rustle_list_loaded", never, 0},
		{"rustle_list_refresh_failures_total", never, 1},
	})
	if age, ok := value(fams, "rustle_list_age_seconds", ads); !ok || age < 90 || age > 120 {
		t.Errorf("rustle_list_age_seconds = %v, %v; want about 90", age, ok)
	}
	if _, ok := value(fams, "rustle_list_entries", never); ok {
		t.Error("a list never loaded has rustle_list_entries")
	}
}
