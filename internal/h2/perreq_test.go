package h2

import (
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// goroutinesCreated returns how many goroutines the process has started.
func goroutinesCreated(t testing.TB) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Skip("runtime/metrics has no /sched/goroutines-created")
	}
	return s[0].Value.Uint64()
}

// getSequentially sends n GETs for url on rc, one stream at a time from
// stream *next on, and reads each answer to its end.
func getSequentially(t *testing.T, rc *rawClient, next *uint32, url string, n int) {
	t.Helper()
	host := strings.TrimPrefix(url, "http://")
	host, path, _ := strings.Cut(host, "/")
	for i := 0; i < n; i++ {
		id := *next
		*next += 2
		rc.headers(id, true, ":method", "GET", ":scheme", "http", ":authority", host, ":path", "/"+path)
		for {
			f := rc.next()
			if d, ok := f.(*http2.DataFrame); ok && d.Length > 0 {
				rc.fr.WriteWindowUpdate(0, d.Length) // the connection's window
			}
			if f.Header().StreamID != id {
				if g, ok := f.(*http2.GoAwayFrame); ok {
					t.Fatalf("stream %d: GOAWAY %v %q", id, g.ErrCode, g.DebugData())
				}
				t.Fatalf("stream %d: frame %v of another stream", id, f)
			}
			if f.Header().Flags.Has(http2.FlagDataEndStream) {
				break // the same bit ends HEADERS and DATA
			}
			if _, ok := f.(*http2.RSTStreamFrame); ok {
				t.Fatalf("stream %d reset", id)
			}
		}
	}
}

// TestForwardReusesWorkers checks that forwarded requests one after the
// other do not each start goroutines in rustle: a stream's worker is
// reused for the next one (whose stack has grown already), and the
// reader is not woken when a stream's end leaves the connection idle.
func TestForwardReusesWorkers(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, strings.Repeat("x", 1024)))
	pool := proxytest.NewPool(t, dialer.PoolConfig{})
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: pool}))
	rc := p.raw(t)
	next := uint32(1)
	getSequentially(t, rc, &next, o.URL("/1k"), 10) // warm: upstream pooled, worker made
	const n = 200
	before := goroutinesCreated(t)
	getSequentially(t, rc, &next, o.URL("/1k"), n)
	created := goroutinesCreated(t) - before
	t.Logf("%d goroutines started for %d requests", created, n)
	if created > n/10 {
		t.Errorf("%d goroutines started for %d sequential requests, want at most %d", created, n, n/10)
	}
}

// TestIdleTimeoutAfterStream checks that the idle timeout runs from the
// end of the connection's last stream, which no longer wakes the reader:
// the reader comes back at the deadline it parked with and parks on until
// the idle timeout is over, whether the write timeout (its last read's
// deadline) is shorter than the idle timeout or longer.
func TestIdleTimeoutAfterStream(t *testing.T) {
	tests := []struct {
		name        string
		idle, write time.Duration
	}{
		{"write timeout shorter", 400 * time.Millisecond, 100 * time.Millisecond},
		{"write timeout longer", 400 * time.Millisecond, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
			pool := proxytest.NewPool(t, dialer.PoolConfig{})
			p := startProxy(t, testConfig(Config{IdleTimeout: tt.idle, WriteTimeout: tt.write}), proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: pool}))
			rc := p.raw(t)
			rc.sync()
			next := uint32(1)
			getSequentially(t, rc, &next, o.URL("/"), 1)
			ended := time.Now()
			e := rc.readToEnd(tt.idle+margin, func(e *ending) bool { return e.goAway != nil })
			after := time.Since(ended)
			if e.goAway == nil || e.goAway.ErrCode != http2.ErrCodeNo {
				t.Fatalf("want GOAWAY(NO_ERROR) on the idle connection, got %v (%v)", e.goAway, e.err)
			}
			if after < tt.idle-20*time.Millisecond {
				t.Errorf("GOAWAY %v after the stream's end, before the idle timeout of %v", after, tt.idle)
			}
		})
	}
}
