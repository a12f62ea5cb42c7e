package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/pem"
	"flag"
	"io"
	"maps"
	"net"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestSchedule(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := newSchedule(start, 4000, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// 4,000 per second over 10 ms: 40 exchanges, 250 µs apart, whatever
	// the order in which they are claimed.
	var got []time.Duration
	for {
		due, ok := s.claim()
		if !ok {
			break
		}
		got = append(got, due.Sub(start))
	}
	if len(got) != 40 {
		t.Fatalf("%d exchanges, want 40", len(got))
	}
	for i, d := range got {
		if want := time.Duration(i) * 250 * time.Microsecond; d != want {
			t.Fatalf("exchange %d due at +%s, want +%s", i, d, want)
		}
	}
	if _, ok := s.claim(); ok {
		t.Error("a claim after the last exchange succeeded")
	}
	for _, tt := range []struct {
		name   string
		rate   float64
		window time.Duration
	}{
		{"no rate", 0, time.Second},
		{"no window", 100, 0},
		{"less than one exchange", 0.5, time.Second},
		{"more than the bound", 1e6, 10 * time.Second},
	} {
		if _, err := newSchedule(start, tt.rate, tt.window); err == nil {
			t.Errorf("%s: newSchedule(%g, %s) succeeded", tt.name, tt.rate, tt.window)
		}
	}
}

func TestPercentilesOf(t *testing.T) {
	var ds []time.Duration
	for i := 1000; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Microsecond)
	}
	want := Percentiles{N: 1000, P50: 500, P99: 990, P999: 999, Max: 1000}
	if got := percentilesOf(ds); got != want {
		t.Errorf("percentilesOf(1..1000 µs) = %+v, want %+v", got, want)
	}
	if got := percentilesOf(nil); got != (Percentiles{}) {
		t.Errorf("percentilesOf(nil) = %+v, want zero", got)
	}
	if got := percentilesOf([]time.Duration{7 * time.Microsecond}); got != (Percentiles{N: 1, P50: 7, P99: 7, P999: 7, Max: 7}) {
		t.Errorf("percentilesOf(7 µs) = %+v", got)
	}
}

// stallingOrigin answers GETs with 1 KB on kept-alive connections and
// records when each request arrived. With stall set, every request that
// arrives from after to after+stall (counted from the first request) is
// answered only when the stall ends, as a proxy that stops reading would.
// closeEach closes the connection after every response without saying
// so, as Tinyproxy does.
func stallingOrigin(t *testing.T, after, stall time.Duration, closeEach bool) (string, func() []time.Time) {
	t.Helper()
	var mu sync.Mutex
	var arrivals []time.Time
	body := strings.Repeat("x", 1024)
	addr := serveConns(t, listen(t), func(c net.Conn) {
		tp := textproto.NewReader(bufio.NewReader(c))
		for {
			if _, err := tp.ReadLine(); err != nil {
				return
			}
			if _, err := tp.ReadMIMEHeader(); err != nil {
				return
			}
			now := time.Now()
			mu.Lock()
			arrivals = append(arrivals, now)
			first := arrivals[0]
			mu.Unlock()
			if from := first.Add(after); stall > 0 && !now.Before(from) && now.Before(from.Add(stall)) {
				time.Sleep(time.Until(from.Add(stall)))
			}
			if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n"+body); err != nil || closeEach {
				return
			}
		}
	})
	return addr, func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(arrivals)
	}
}

// httpRate returns a fixed-rate run of HTTP/1.1 GETs of /1k at rate over
// window with conns kept-alive connections to addr (a proxy).
func httpRate(addr string, conns int, rate float64, window time.Duration) rateRun {
	d := newDialer(addr, "bench:secret", "127.0.0.1:9", 5*time.Second)
	req := httpRequest(d, "/1k", false)
	return rateRun{proto: "http", conns: conns, rate: rate, window: window, reqTimeout: 5 * time.Second, d: d,
		newSlot: func() rateSlot { return &httpSlot{d: d, req: req} }}
}

// checkAllCompleted fails unless every exchange of res completed without
// error.
func checkAllCompleted(t *testing.T, res RateResult) {
	t.Helper()
	if res.Completed != res.Scheduled || res.Errors.Total() != 0 || res.Unsent != 0 {
		t.Fatalf("%d of %d exchanges completed, %d unsent, errors %+v (first: %s)", res.Completed, res.Scheduled, res.Unsent, res.Errors, res.FirstError)
	}
	if res.Latency.N != res.Completed || res.SendLag.N != res.Completed {
		t.Errorf("%d latencies and %d send lags for %d exchanges", res.Latency.N, res.SendLag.N, res.Completed)
	}
}

// TestRatePacing checks that a fixed-rate run spreads its requests over
// the window at the offered rate instead of sending them as fast as the
// server answers (a closed loop would send all 300 in a few
// milliseconds).
func TestRatePacing(t *testing.T) {
	addr, arrivals := stallingOrigin(t, 0, 0, false)
	res, err := httpRate(addr, 4, 500, 600*time.Millisecond).run(strings.NewReader(""), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if res.Scheduled != 300 {
		t.Fatalf("%d exchanges scheduled, want 500/s × 0.6 s = 300", res.Scheduled)
	}
	checkAllCompleted(t, res)
	if res.Bytes < 300*1024 || res.Opened != 4 {
		t.Errorf("%d bytes over %d connections opened, want 300 bodies of 1 KB and their heads over 4", res.Bytes, res.Opened)
	}
	at := arrivals()
	if len(at) != 300 {
		t.Fatalf("the server saw %d requests, want 300", len(at))
	}
	// Due every 2 ms: the first 300 ms of the window carry about half,
	// and the last request arrives close to 598 ms after the first.
	firstHalf := 0
	for _, a := range at {
		if a.Sub(at[0]) < 300*time.Millisecond {
			firstHalf++
		}
	}
	if firstHalf > 200 || firstHalf < 100 {
		t.Errorf("%d of 300 requests in the first half of the window, want about 150", firstHalf)
	}
	if span := at[len(at)-1].Sub(at[0]); span < 500*time.Millisecond {
		t.Errorf("requests spread over %s, want close to 598 ms", span)
	}
	if res.TimerLag.N == 0 {
		t.Error("no exchange waited for its due time")
	}
}

// TestRateCountsStallFromDueTime is the check against coordinated
// omission: the server stops answering for 200 ms, and every request due
// in that time (about 200 at 1,000/s), not only the 4 in flight, counts
// the wait from the time it was due, though the others were sent only
// once a connection came free.
func TestRateCountsStallFromDueTime(t *testing.T) {
	addr, _ := stallingOrigin(t, 200*time.Millisecond, 200*time.Millisecond, false)
	res, err := httpRate(addr, 4, 1000, 600*time.Millisecond).run(strings.NewReader(""), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checkAllCompleted(t, res)
	// Due 200 + x ms into the window, a request completes at about
	// 400 ms: a latency of about 200 − x ms, so a sixth of the 600 are
	// above 100 ms. Measured from the send, only the 4 caught in flight
	// would be.
	if res.Latency.P99 < 100_000 {
		t.Errorf("latency p99 %d µs, want above 100 ms: the requests due during the stall must count their wait", res.Latency.P99)
	}
	if res.SendLag.P99 < 50_000 {
		t.Errorf("send lag p99 %d µs, want above 50 ms: requests due during the stall wait for a connection", res.SendLag.P99)
	}
	if res.Latency.P50 >= 100_000 {
		t.Errorf("latency p50 %d µs: the requests due outside the stall should be quick", res.Latency.P50)
	}
}

// TestRateDrainBound checks that a run against a server that never
// answers ends after the window and one request timeout, counting every
// exchange as completed, failed or unsent.
func TestRateDrainBound(t *testing.T) {
	ln := listen(t)
	addr := serveConns(t, ln, func(c net.Conn) { io.Copy(io.Discard, c) })
	r := httpRate(addr, 2, 100, 300*time.Millisecond)
	r.reqTimeout = 200 * time.Millisecond
	start := time.Now()
	res, err := r.run(strings.NewReader(""), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("the run took %s, want about 0.5 s (window + request timeout)", took)
	}
	if res.Completed != 0 || res.Errors.Timeout == 0 {
		t.Errorf("%d completed, %d timeouts; want none and some", res.Completed, res.Errors.Timeout)
	}
	if res.Unsent == 0 {
		t.Error("no exchange unsent, though both connections were held until the drain ended")
	}
	if got := res.Completed + res.Errors.Total() + res.Unsent; got != res.Scheduled {
		t.Errorf("completed %d + errors %d + unsent %d = %d, want the %d scheduled", res.Completed, res.Errors.Total(), res.Unsent, got, res.Scheduled)
	}
}

// TestRateRetriesSilentClose checks that a request on a kept-alive
// connection the server closed without saying so is sent again on a new
// connection, not counted as an error.
func TestRateRetriesSilentClose(t *testing.T) {
	addr, _ := stallingOrigin(t, 0, 0, true)
	res, err := httpRate(addr, 2, 200, 250*time.Millisecond).run(strings.NewReader(""), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checkAllCompleted(t, res)
	if res.Retried == 0 {
		t.Error("no request retried, though the server closed every connection after one response")
	}
}

// TestRateSync checks the -sync handshake: no request before the line
// after "ready", every request before "done", the result after the
// second line.
func TestRateSync(t *testing.T) {
	addr, arrivals := stallingOrigin(t, 0, 0, false)
	r := httpRate(addr, 2, 200, 100*time.Millisecond)
	r.sync = true
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	type outcome struct {
		res RateResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := r.run(inR, outW)
		outW.Close()
		done <- outcome{res, err}
	}()
	lines := bufio.NewReader(outR)
	expect := func(want string) {
		t.Helper()
		line, err := lines.ReadString('\n')
		if err != nil || line != want+"\n" {
			t.Fatalf("read %q, %v; want %q", line, err, want)
		}
	}
	expect("ready")
	time.Sleep(50 * time.Millisecond)
	if n := len(arrivals()); n != 0 {
		t.Fatalf("%d requests before the go-ahead", n)
	}
	io.WriteString(inW, "go\n")
	expect("done")
	if n := len(arrivals()); n != 20 {
		t.Errorf("%d requests by \"done\", want all 20", n)
	}
	inW.Close() // the end of stdin also lets it finish
	o := <-done
	if o.err != nil {
		t.Fatal(o.err)
	}
	checkAllCompleted(t, o.res)
}

// TestRateWebSocket runs WebSocket messages at a fixed rate on upgraded
// connections, and one connection per message.
func TestRateWebSocket(t *testing.T) {
	for _, newConn := range []bool{false, true} {
		addr, seen := fakeWSProxy(t, wsAccept(wsKey))
		d := newDialer(addr, "bench:secret", "127.0.0.1:9", 5*time.Second)
		w := wsWorker{d: d, upgrade: wsUpgradeRequest(d), frame: wsClientFrame(64), size: 64, timeout: 5 * time.Second}
		r := rateRun{proto: "ws", conns: 3, rate: 400, window: 200 * time.Millisecond, reqTimeout: 5 * time.Second, d: d,
			newSlot: func() rateSlot { return &wsSlot{w: w, newConn: newConn} }}
		res, err := r.run(strings.NewReader(""), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		checkAllCompleted(t, res)
		conns, _ := seen()
		switch {
		case res.Bytes != 80*64:
			t.Errorf("newconn %v: %d bytes echoed, want 80 messages of 64", newConn, res.Bytes)
		case !newConn && (res.Opened != 3 || conns != 3):
			t.Errorf("%d upgraded before the window, %d connections; want 3 and 3", res.Opened, conns)
		case newConn && conns != 80:
			t.Errorf("newconn: %d connections for 80 messages", conns)
		}
	}
}

// TestRateH2 runs HTTP/2 requests at a fixed rate, and counts the
// proxy's refusals as status errors.
func TestRateH2(t *testing.T) {
	for _, tt := range []struct {
		name, auth string
		refused    bool
	}{
		{"accepted", "Basic YmVuY2g6c2VjcmV0", false},
		{"refused", "Basic b3RoZXI6c2VjcmV0", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr, pool, _ := fakeH2Proxy(t, tt.auth, false)
			d := h2Dialer(addr, "bench:secret", "127.0.0.1:9", pool)
			fields := h2Fields(d, "/1k")
			r := rateRun{proto: "h2", conns: 2, rate: 200, window: 200 * time.Millisecond, reqTimeout: 5 * time.Second, d: d,
				newSlot: func() rateSlot { return &h2Slot{d: d, fields: fields} }}
			res, err := r.run(strings.NewReader(""), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if tt.refused {
				if res.Errors.Status != res.Scheduled || res.Completed != 0 {
					t.Errorf("%d status errors, %d completed of %d; want every one refused", res.Errors.Status, res.Completed, res.Scheduled)
				}
				return
			}
			checkAllCompleted(t, res)
			if res.Bytes != 40*1024 {
				t.Errorf("%d bytes, want 40 bodies of 1 KB", res.Bytes)
			}
		})
	}
}

// TestRateH3 runs HTTP/3 requests at a fixed rate through rustle's
// HTTP/3 front-end to an HTTP origin.
func TestRateH3(t *testing.T) {
	h3Addr, h3TLS := startRustleH3(t, 64)
	ln := listen(t)
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(bytes.Repeat([]byte("x"), 1024))
	})}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	d := newDialer(h3Addr, udpUser+":"+udpPass, ln.Addr().String(), 5*time.Second)
	d.tlsConf = h3TLS.Clone()
	d.tlsConf.NextProtos = []string{"h3"}
	url := "http://" + d.target + "/1k"
	r := rateRun{proto: "h3", conns: 2, rate: 200, window: 200 * time.Millisecond, reqTimeout: 5 * time.Second, d: d,
		newSlot: func() rateSlot { return &h3Slot{d: d, url: url} }}
	res, err := r.run(strings.NewReader(""), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	checkAllCompleted(t, res)
	if res.Bytes != 40*1024 || res.Opened != 2 {
		t.Errorf("%d bytes over %d connections, want 40 KB over 2", res.Bytes, res.Opened)
	}
}

// TestCurvesFlag checks that -curves restricts the key exchanges the
// client offers, and that unknown names and -curves without -tls are
// refused.
func TestCurvesFlag(t *testing.T) {
	cert, _ := testCert(t)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveConns(t, ln, func(c net.Conn) { c.(*tls.Conn).Handshake() })
	for _, tt := range []struct {
		args    []string
		want    map[string]int64
		wantErr bool
	}{
		{args: []string{"-tls", "-ca", ca}, want: map[string]int64{"X25519MLKEM768": 1}},
		{args: []string{"-tls", "-ca", ca, "-curves", "X25519"}, want: map[string]int64{"X25519": 1}},
		{args: []string{"-tls", "-ca", ca, "-curves", " CurveP256 , CurveP384"}, want: map[string]int64{"CurveP256": 1}},
		{args: []string{"-tls", "-ca", ca, "-curves", "X448"}, wantErr: true},
		{args: []string{"-curves", "X25519"}, wantErr: true},
	} {
		t.Run(strings.Join(tt.args[1:], " "), func(t *testing.T) {
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			df := addDialFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			d, err := df.dialer(addr, 5*time.Second)
			if (err != nil) != tt.wantErr {
				t.Fatalf("dialer: %v, want an error: %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			c, err := d.dialConn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			c.Close()
			if got, _ := d.seen.result(); !maps.Equal(got, tt.want) {
				t.Errorf("key exchanges %v, want %v", got, tt.want)
			}
		})
	}
}
