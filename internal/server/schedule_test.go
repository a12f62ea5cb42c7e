package server

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// Rates of TestScheduleRates: the default, and the schedules'.
const (
	scheduleDefaultRate = 1 << 20   // limits.user_bytes_per_second
	scheduleRate        = 128 << 10 // a schedule's bytes_per_second
)

// TestScheduleRates downloads through a running server configured from
// TOML with [[limits.schedules]] in Europe/Paris placed around the time
// of the test: alice, inside her window, is paced at the schedule's rate;
// bob, whose window is hours away, at limits.user_bytes_per_second; and
// alice again after a reload moves her window away, at the default. Each
// download is three buckets' worth (the bucket starts full, one second
// of the rate), so that it takes two seconds at the rate it should have
// and many more, or none, at the other.
func TestScheduleRates(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	small := proxytest.NewOrigin(t, proxytest.Bulk(3*scheduleRate, proxytest.ByLength))
	large := proxytest.NewOrigin(t, proxytest.Bulk(3*scheduleDefaultRate, proxytest.ByLength))
	now := time.Now().In(paris)
	span := func(from, to time.Duration) string {
		return now.Add(from).Format("15:04") + "-" + now.Add(to).Format("15:04")
	}
	around, later := span(-2*time.Hour, 2*time.Hour), span(6*time.Hour, 8*time.Hour)
	load := func(aliceHours string) *config.Config {
		t.Helper()
		src := fmt.Sprintf(`allow_private = ["127.0.0.0/8"]
[[auth.users]]
name = "alice"
password = "apw"
[[auth.users]]
name = "bob"
password = "bpw"
[limits]
user_bytes_per_second = %d
[[limits.schedules]]
users = ["alice"]
hours = %q
time_zone = "Europe/Paris"
bytes_per_second = %d
[[limits.schedules]]
users = ["bob"]
hours = %q
time_zone = "Europe/Paris"
bytes_per_second = %d
[[listen]]
name = "plain"
address = "127.0.0.1:0"
`, scheduleDefaultRate, aliceHours, scheduleRate, later, scheduleRate)
		cfg, err := config.Parse([]byte(src), "schedules.toml")
		if err != nil {
			t.Fatal(err)
		}
		cfg.Workers = 1
		if err := cfg.Validate(); err != nil {
			t.Fatalf("config: %v", err)
		}
		return cfg
	}
	s, addrs := startLogged(t, load(around), nil, &logBuffer{})

	// download fetches o's body through the proxy as user and checks
	// that it took about two seconds, as it does at rate.
	download := func(user, pass string, o *proxytest.Origin, rate int) {
		t.Helper()
		pu := &url.URL{Scheme: "http", Host: addrs["plain"], User: url.UserPassword(user, pass)}
		tr := &http.Transport{Proxy: http.ProxyURL(pu)}
		defer tr.CloseIdleConnections()
		c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		start := time.Now()
		resp, err := c.Get(o.URL("/bulk"))
		if err != nil {
			t.Fatalf("%s: GET: %v", user, err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusOK || err != nil || n != int64(3*rate) {
			t.Fatalf("%s: %s, %d bytes, %v", user, resp.Status, n, err)
		}
		t.Logf("%s: %d bytes in %v (%.0f KiB/s past the burst)", user, n, took, float64(n-int64(rate))/took.Seconds()/1024)
		// Two seconds at rate; at the other rate it would be 0.2 s or 20 s.
		if took < 1700*time.Millisecond || took > 8*time.Second {
			t.Errorf("%s: %d bytes took %v, want about 2s: not paced at %d bytes/s", user, n, took, rate)
		}
	}
	download("alice", "apw", small, scheduleRate)      // inside her window
	download("bob", "bpw", large, scheduleDefaultRate) // outside his
	if err := s.Reload(load(later)); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	download("alice", "apw", large, scheduleDefaultRate) // her window moved away
}
