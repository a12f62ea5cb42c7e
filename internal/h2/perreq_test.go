package h2

import (
	"bytes"
	"net"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// waitWorkersGone waits until the stream workers that earlier tests left
// waiting for a stream (workpool.Pool) have ended, so that a measurement of
// the process's memory does not see their stacks go.
func waitWorkersGone(t testing.TB) {
	t.Helper()
	if err := proxytest.CheckGoroutines(2*workerIdle+5*time.Second, "workpool.(*Pool[...]).work"); err != nil {
		t.Fatal(err)
	}
}

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

// TestWakeReusesWorkers checks that a request that wakes a parked
// connection (its client quiet for longer than quietWait, its reader's
// wait left to tunnel.Parker's NotifyLook) starts no goroutine in rustle:
// the reader resumes on a reused worker (tunnel.Wait.ReuseWorker), whose
// stack has grown already, as its stream does (workers.go). A fresh
// goroutine per wake-up grew its stack two or three times each (see
// package doc's "Cost of a wake-up").
func TestWakeReusesWorkers(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a connection parks with no goroutine on Linux only")
	}
	o := proxytest.NewOrigin(t, proxytest.Respond(200, strings.Repeat("x", 1024)))
	pool := proxytest.NewPool(t, dialer.PoolConfig{})
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: pool}))
	rc := p.raw(t)
	next := uint32(1)
	getParked := func(n int) {
		t.Helper()
		for range n {
			getSequentially(t, rc, &next, o.URL("/1k"), 1)
			// Parked: no goroutine of the connection waits for it.
			if err := proxytest.CheckGoroutines(proxytest.DefaultTimeout, "h2.(*conn)"); err != nil {
				t.Fatal(err)
			}
		}
	}
	getParked(3) // warm: upstream pooled, workers made
	const n = 10
	before := goroutinesCreated(t)
	getParked(n)
	created := goroutinesCreated(t) - before
	t.Logf("%d goroutines started for %d requests, each waking a parked connection", created, n)
	if created > n/2 {
		t.Errorf("%d goroutines started for %d requests waking a parked connection, want at most %d", created, n, n/2)
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

// TestResponseFieldsRepeatValues checks that mapping a response head to
// HTTP/2 fields allocates no string for the values of common fields that
// repeat those of the last response, and that a value that changes, a
// long one and a set-cookie are still passed on as they are.
func TestResponseFieldsRepeatValues(t *testing.T) {
	parse := func(raw string) *http1.Head {
		t.Helper()
		h := new(http1.Head)
		if err := h.ParseResponse([]byte(raw)); err != nil {
			t.Fatal(err)
		}
		return h
	}
	long := strings.Repeat("v", maxCachedValue+1)
	first := parse("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1024\r\nDate: Tue, 01 Dec 2026 21:00:00 GMT\r\n\r\n")
	again := parse("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 1024\r\nDate: Tue, 01 Dec 2026 21:00:00 GMT\r\n\r\n")
	var vc valueCache
	dst := make([]hpack.HeaderField, 0, 16)
	responseFields(dst, 200, first, false, "", &vc)
	if n := testing.AllocsPerRun(100, func() { responseFields(dst[:0], 200, again, false, "", &vc) }); n != 0 {
		t.Errorf("%.1f allocations per response repeating the last one's values, want 0", n)
	}
	tests := []struct {
		name, raw string
		want      []hpack.HeaderField
	}{
		{"changed value", "HTTP/1.1 200 OK\r\nContent-Length: 7\r\nDate: Tue, 01 Dec 2026 21:00:01 GMT\r\n\r\n",
			[]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-length", Value: "7"}, {Name: "date", Value: "Tue, 01 Dec 2026 21:00:01 GMT"}}},
		{"long value", "HTTP/1.1 200 OK\r\nContent-Type: " + long + "\r\n\r\n",
			[]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "content-type", Value: long}}},
		{"set-cookie", "HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n\r\n",
			[]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "set-cookie", Value: "a=1"}, {Name: "set-cookie", Value: "b=2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i := 0; i < 2; i++ { // the second time from the cache
				got := responseFields(nil, 200, parse(tt.raw), false, "", &vc)
				if !slices.Equal(got, tt.want) {
					t.Fatalf("pass %d: got %v, want %v", i, got, tt.want)
				}
			}
		})
	}
}

// cannedOrigin is an HTTP/1.1 origin that answers each request head with
// "ok", allocating nothing per request. It returns its address.
func cannedOrigin(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	answer := []byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				var buf [4096]byte
				n := 0
				for {
					k, err := c.Read(buf[n:])
					if err != nil {
						return
					}
					n += k
					for {
						i := bytes.Index(buf[:n], []byte("\r\n\r\n"))
						if i < 0 {
							break
						}
						if _, err := c.Write(answer); err != nil {
							return
						}
						n = copy(buf[:], buf[i+4:n])
					}
					if n == len(buf) {
						return // a head too large for this origin
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// TestForwardAllocs checks what a forwarded GET costs in allocations, on
// a real exchange over loopback: a client sending its request fully
// indexed (as one does from the second request on) and reading the
// answer's frames without decoding them, through rustle and a pooled
// upstream to an origin that allocates nothing. Most of what is left is
// rustle's own: the stream, its authorization and log, the pool key;
// decoding the header block with x/net/http2's Framer (ReadMetaHeaders)
// cost about nine more.
func TestForwardAllocs(t *testing.T) {
	url := "http://" + cannedOrigin(t) + "/x"
	pool := proxytest.NewPool(t, dialer.PoolConfig{})
	p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: pool}))
	rc := p.raw(t)
	rc.fr.ReadMetaHeaders = nil // the client's own decoding is not counted
	rc.fr.SetReuseFrames()
	next := uint32(1)
	getSequentially(t, rc, &next, url, 10) // warm: tables indexed, upstream pooled, worker made
	allocs := testing.AllocsPerRun(200, func() { getSequentially(t, rc, &next, url, 1) })
	t.Logf("%.0f allocations per forwarded GET, the client's included", allocs)
	most := 12.0
	if proxytest.Race {
		most = 20 // sync.Pool drops a quarter of what it is given
	}
	if allocs > most {
		t.Errorf("%.0f allocations per forwarded GET, want at most %.0f", allocs, most)
	}
}

// TestSteadyClientKeepsItsWorker checks that a client sending one
// request at a time, each well within quietWait of the last one's end, is
// served on by the connection's worker: its connection is not parked and
// woken for each request (a hand-off), nor is the worker brought back by
// its quiet wait's deadline to find the client not quiet long enough and
// wait again (a look again). With quietWait at 50 ms the connection of
// the client sending every 70 ms was parked for every request; with the
// deadline left where the first request of a run had put it, the worker
// of the client sending every 20 ms was brought back every few requests.
// A gap the machine stretched past what the worker may wait for (an
// overloaded test machine) excuses one event.
func TestSteadyClientKeepsItsWorker(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a connection parks with no goroutine on Linux only")
	}
	var handOffs, lookAgains atomic.Int64
	handOff := func(*conn) { handOffs.Add(1) }
	lookAgain := func(*conn) { lookAgains.Add(1) }
	handOffHook.Store(&handOff)
	lookAgainHook.Store(&lookAgain)
	t.Cleanup(func() {
		handOffHook.Store(nil)
		lookAgainHook.Store(nil)
	})
	tests := []struct {
		name string
		gap  time.Duration // between a response's end and the next request
		n    int
		// late is the gap past which the worker may have been brought
		// back: quietWait for a hand-off, quietWait/2 for a look again
		// (the deadline is moved on once it would come sooner), less
		// the response's and the request's way through the sockets.
		late time.Duration
	}{
		{"every 20 ms", 20 * time.Millisecond, 12, 45 * time.Millisecond},
		{"every 70 ms", 70 * time.Millisecond, 8, 95 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := proxytest.NewOrigin(t, proxytest.Respond(200, strings.Repeat("x", 1024)))
			pool := proxytest.NewPool(t, dialer.PoolConfig{})
			p := startProxy(t, testConfig(Config{}), proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: pool}))
			rc := p.raw(t)
			next := uint32(1)
			start := time.Now()
			getSequentially(t, rc, &next, o.URL("/1k"), 1) // warm: upstream pooled
			handOffs.Store(0)
			lookAgains.Store(0)
			excused := 0
			// The worker's wait starts when it has written a response,
			// after the client sent that request, and ends when it reads
			// the next, before the client has the next answer: from the
			// start of one exchange to the end of the next bounds the
			// worker's gap from above however long a loaded machine held
			// up the answers and requests on their way (tens of
			// milliseconds in a CI run, which a gap counted from an
			// answer's arrival to the next request's sending missed).
			for range tt.n {
				time.Sleep(tt.gap) // the client's pace
				next0 := time.Now()
				getSequentially(t, rc, &next, o.URL("/1k"), 1)
				if time.Since(start) > tt.late {
					excused++
				}
				start = next0
			}
			h, l := handOffs.Load(), lookAgains.Load()
			t.Logf("%d requests %v apart: %d hand-offs, %d looks again (%d gaps stretched past %v)", tt.n, tt.gap, h, l, excused, tt.late)
			if h+l > int64(excused) {
				t.Errorf("%d requests %v apart: the worker handed the connection off %d times and was brought back by its deadline %d times, want none (%d excused)", tt.n, tt.gap, h, l, excused)
			}
		})
	}
}
