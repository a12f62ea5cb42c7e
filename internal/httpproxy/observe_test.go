package httpproxy_test

import (
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// logRecord is an access log record as the JSON format writes it.
type logRecord struct {
	Listener  string
	User      string
	Protocol  string
	Method    string
	Target    string
	Status    int
	BytesUp   int64 `json:"bytes_up"`
	BytesDown int64 `json:"bytes_down"`
	Upstream  string
	Rule      string
	Reason    string
}

// newAccessLog returns a JSON access log writing to the buffer it also
// returns, closed by t.Cleanup.
func newAccessLog(t *testing.T) (*accesslog.Logger, *proxytest.LogBuffer) {
	t.Helper()
	out := &proxytest.LogBuffer{}
	return proxytest.JSONAccessLog(t, out), out
}

// waitRecords waits for n access log lines in out and returns them
// parsed.
func waitRecords(t *testing.T, out *proxytest.LogBuffer, n int) []logRecord {
	t.Helper()
	recs := proxytest.JSONRecords[logRecord](t, out, n)
	if len(recs) != n {
		t.Fatalf("%d access log lines, want %d:\n%s", len(recs), n, out.String())
	}
	return recs
}

// metricValue returns proxytest.Metric of the series of family name whose
// labels include want.
func metricValue(t *testing.T, m *metrics.Metrics, name string, want map[string]string) float64 {
	t.Helper()
	var labels []string
	for k, v := range want {
		labels = append(labels, k, v)
	}
	return proxytest.Metric(t, m, name, labels...)
}

// TestAccessLogAndMetrics checks the record and the counts of requests
// (on a dialed, a kept and a pooled upstream), a refused request and a
// tunnel.
func TestAccessLogAndMetrics(t *testing.T) {
	al, out := newAccessLog(t)
	m := metrics.New(metrics.Config{})
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "hello"))
	echo := proxytest.NewEcho(t)
	pool := proxytest.NewPool(t, dialer.PoolConfig{})
	proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{
		Listener: "main", AccessLog: al, Metrics: m.Listener("main", "http"), Pool: pool,
	})

	cl := proxytest.Dial(t, proxy)
	for _, path := range []string{"/a", "/b"} { // dialed, then kept
		if resp, _ := cl.RoundTrip("GET " + o.URL(path) + " HTTP/1.1\r\nHost: x\r\n\r\n"); resp.Status != 200 {
			t.Fatalf("GET %s: %d", path, resp.Status)
		}
	}
	if resp, _ := cl.RoundTrip("GET / HTTP/1.1\r\nHost: x\r\n\r\n"); resp.Status != 400 {
		t.Fatalf("origin-form GET: %d, want 400", resp.Status)
	}
	proxytest.WaitFor(t, "the upstream back in the pool", func() bool { return pool.Len() == 1 })
	if resp, _ := proxytest.Dial(t, proxy).RoundTrip(get(o, "/c")); resp.Status != 200 { // pooled
		t.Fatalf("GET /c: %d", resp.Status)
	}
	tc := proxytest.Connect(t, proxy, echo.Addr)
	tc.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := tc.Read(buf); err != nil || string(buf) != "ping" {
		t.Fatalf("tunnel echo: %v %q", err, buf)
	}
	tc.Close()
	recs := waitRecords(t, out, 5)
	// /c and the tunnel came on connections of their own: their records
	// may be written in either order (/c's after its answer went out).
	if recs[3].Method == "CONNECT" {
		recs[3], recs[4] = recs[4], recs[3]
	}
	if o.Conns() != 1 {
		t.Errorf("origin accepted %d connections, want 1 (kept, then pooled)", o.Conns())
	}

	for i, path := range []string{"/a", "/b", "", "/c"} {
		if path == "" {
			continue
		}
		// Bytes are payload: the 5 bytes of the body, not the head. The
		// upstream is named whether dialed, kept or pooled.
		want := logRecord{Listener: "main", Protocol: "http", Method: "GET", Target: o.URL(path),
			Status: 200, BytesDown: 5, Upstream: o.Addr}
		if recs[i] != want {
			t.Errorf("GET %s record = %+v, want %+v", path, recs[i], want)
		}
	}
	if r := recs[2]; r.Status != 400 || r.Target != "/" || r.Method != "GET" || r.Upstream != "" {
		t.Errorf("refused request's record = %+v", r)
	}
	want := logRecord{Listener: "main", Protocol: "connect", Method: "CONNECT", Target: echo.Addr,
		Status: 200, BytesUp: 4, BytesDown: 4, Upstream: echo.Addr}
	if recs[4] != want {
		t.Errorf("CONNECT record = %+v, want %+v", recs[4], want)
	}
	lbl := func(kv ...string) map[string]string {
		l := map[string]string{"listener": "main", "protocol": "http"}
		for i := 0; i+1 < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		return l
	}
	for _, s := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"rustle_requests_total", lbl("code", "2xx"), 4},
		{"rustle_requests_total", lbl("code", "4xx"), 1},
		{"rustle_bytes_total", lbl("direction", "up"), 4},
		{"rustle_bytes_total", lbl("direction", "down"), 3*5 + 4},
		{"rustle_tunnels_total", lbl(), 1},
		{"rustle_upstream_dial_duration_seconds", map[string]string{"result": "ok"}, 2},
		{"rustle_upstream_first_byte_seconds", map[string]string{"listener": "main"}, 3},
	} {
		if got := metricValue(t, m, s.name, s.labels); got != s.want {
			t.Errorf("%s%v = %v, want %v", s.name, s.labels, got, s.want)
		}
	}
}

// TestFirstByteObserved checks that every forwarded request, whatever its
// shape, feeds the first-byte histogram once.
func TestFirstByteObserved(t *testing.T) {
	t.Parallel()
	m := metrics.New(metrics.Config{})
	o, proxy, _ := setupPolicy(t, testCfg{}, proxytest.PolicyConfig{
		Listener: "fb", Metrics: m.Listener("fb", "http"),
	}, proxytest.Respond(200, "ok"))
	o.Handle("/interim", proxytest.Before("HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n", proxytest.Respond(200, "final")))
	big := string(payload(1 << 20))
	h := "Host: " + o.Addr
	tests := []struct {
		name, method, req string
	}{
		{"GET", "GET", get(o, "/")},
		{"HEAD", "HEAD", request("HEAD", o.URL("/"), 1, "", h)},
		{"HTTP/1.0", "GET", request("GET", o.URL("/"), 0, "", h)},
		{"POST buffered body", "POST", request("POST", o.URL("/"), 1, "small", h)},
		{"POST streamed body", "POST", request("POST", o.URL("/"), 1, big, h)},
		{"chunked POST", "POST", request("POST", o.URL("/"), 1, "", h, "Transfer-Encoding: chunked") + proxytest.Chunk([]string{"ab", "cd"})},
		{"interim answer first", "GET", get(o, "/interim")},
	}
	series := map[string]string{"listener": "fb"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := metricValue(t, m, "rustle_upstream_first_byte_seconds", series)
			c := proxytest.Dial(t, proxy)
			werr := make(chan error, 1)
			go func() {
				c.Conn.SetWriteDeadline(time.Now().Add(proxytest.DefaultTimeout))
				_, err := io.WriteString(c.Conn, tt.req)
				werr <- err
			}()
			r := c.ReadResponse(tt.method)
			for r.Status < 200 { // interim answers
				r = c.ReadResponse(tt.method)
			}
			if err := <-werr; err != nil {
				t.Fatalf("write: %v", err)
			}
			if r.Status != 200 {
				t.Fatalf("answer %q", r.Head)
			}
			if got := metricValue(t, m, "rustle_upstream_first_byte_seconds", series) - before; got != 1 {
				t.Errorf("first-byte observations = %v, want 1", got)
			}
		})
	}
}

// TestTunnelObserved checks a user's CONNECT tunnel, relayed by the
// engine or, for a paced user, by goroutines waiting on the user's
// bucket: its access log record and the byte counts carry the bytes
// that went through each way.
func TestTunnelObserved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		limits *limits.Config
	}{
		{"engine", nil},
		{"engine, user limits", &limits.Config{MaxConnsPerUser: 4}},
		{"paced", &limits.Config{UserBytesPerSecond: 8 << 20, UserBytesBurst: 64 << 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			al, out := newAccessLog(t)
			m := metrics.New(metrics.Config{})
			echo := proxytest.NewEcho(t)
			proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{
				Listener: "main", Users: map[string]string{"u": "p"}, Limits: tt.limits,
				Metrics: m.Listener("main", "http"), AccessLog: al,
			})
			data := payload(300 << 10)
			tc := proxytest.Connect(t, proxy, echo.Addr, basicAuth("u", "p"))
			checkEcho(t, tc, data)
			tc.Close()
			n := int64(len(data))
			want := logRecord{Listener: "main", User: "u", Protocol: "connect", Method: "CONNECT",
				Target: echo.Addr, Status: 200, BytesUp: n, BytesDown: n, Upstream: echo.Addr}
			if got := waitRecords(t, out, 1)[0]; got != want {
				t.Errorf("record = %+v, want %+v", got, want)
			}
			lbl := map[string]string{"listener": "main", "protocol": "http"}
			for _, s := range []struct {
				name, direction string
				want            float64
			}{
				{"rustle_bytes_total", "up", float64(n)},
				{"rustle_bytes_total", "down", float64(n)},
				{"rustle_tunnels_total", "", 1},
			} {
				l := maps.Clone(lbl)
				if s.direction != "" {
					l["direction"] = s.direction
				}
				if got := metricValue(t, m, s.name, l); got != s.want {
					t.Errorf("%s%v = %v, want %v", s.name, l, got, s.want)
				}
			}
		})
	}
}

// TestAccessLogNotBody sends requests whose bodies, of several sizes and
// both framings, stream through the buffer their heads were read into,
// and a request refused for its framing behind them: each record keeps
// the method and target sent, and no byte of a body reaches the log.
func TestAccessLogNotBody(t *testing.T) {
	t.Parallel()
	const line = "password=hunter2&token=SECRET\n"
	for _, framing := range []string{"length", "chunked"} {
		for _, size := range []int{1 << 10, 20 << 10, 60 << 10, 3 << 20} {
			t.Run(fmt.Sprintf("%s/%d", framing, size), func(t *testing.T) {
				t.Parallel()
				al, out := newAccessLog(t)
				o, proxy, _ := setupPolicy(t, testCfg{}, proxytest.PolicyConfig{AccessLog: al}, proxytest.Respond(200, "ok"))
				body := []byte(strings.Repeat(line, size/len(line)+1)[:size])
				postTarget := o.URL(fmt.Sprintf("/upload?framing=%s&size=%d", framing, size))
				var post []byte
				if framing == "length" {
					post = append([]byte(request("POST", postTarget, 1, "", "Host: "+o.Addr, "Content-Length: "+strconv.Itoa(size))), body...)
				} else {
					body = chunkBytes(body, 3000)
					post = append([]byte(request("POST", postTarget, 1, "", "Host: "+o.Addr, "Transfer-Encoding: chunked")), body...)
				}
				// Two bodied requests, a GET and a request refused for
				// its framing behind them, in one write.
				refusedTarget := o.URL("/refused?size=" + strconv.Itoa(size))
				refused := request("POST", refusedTarget, 1, "", "Host: "+o.Addr, "Content-Length: 30", "Transfer-Encoding: chunked") + line
				wire := append(append(append(post, post...), get(o, "/after")...), refused...)
				c := proxytest.Dial(t, proxy)
				werr := make(chan error, 1)
				go func() {
					c.Conn.SetWriteDeadline(time.Now().Add(proxytest.DefaultTimeout))
					_, err := c.Conn.Write(wire)
					werr <- err
				}()
				for i, m := range []string{"POST", "POST", "GET", "POST"} {
					if r := c.ReadResponse(m); r.Status != []int{200, 200, 200, 400}[i] {
						t.Fatalf("%s: answer %q", m, r.Head)
					}
				}
				if err := <-werr; err != nil {
					t.Fatalf("write: %v", err)
				}
				recs := waitRecords(t, out, 4)
				for i, want := range []logRecord{
					// Bytes up are the body's content, its chunk framing not counted.
					{Protocol: "http", Method: "POST", Target: postTarget, Status: 200, BytesUp: int64(size), BytesDown: 2, Upstream: o.Addr},
					{Protocol: "http", Method: "POST", Target: postTarget, Status: 200, BytesUp: int64(size), BytesDown: 2, Upstream: o.Addr},
					{Protocol: "http", Method: "GET", Target: o.URL("/after"), Status: 200, BytesDown: 2, Upstream: o.Addr},
					{Protocol: "http", Method: "POST", Target: refusedTarget, Status: 400, Reason: "smuggling"},
				} {
					if recs[i] != want {
						t.Errorf("record %d = %+v, want %+v", i, recs[i], want)
					}
				}
				if strings.Contains(out.String(), "hunter2") {
					t.Errorf("request body bytes in the access log:\n%.2000s", out.String())
				}
			})
		}
	}
}

// TestRefusalsCounted checks that each refusal is answered, logged and
// counted once, in the series of its cause; and that a malformed target
// is answered 400 before credentials are asked for, which is no failed
// authentication.
func TestRefusalsCounted(t *testing.T) {
	t.Parallel()
	al, out := newAccessLog(t)
	m := metrics.New(metrics.Config{})
	o, proxy, _ := setupPolicy(t, testCfg{}, proxytest.PolicyConfig{
		Listener: "main", Metrics: m.Listener("main", "http"), AccessLog: al,
		Users: map[string]string{"alice": "a", "bob": "b"},
		Rules: []acl.Rule{
			{Name: "no-post", Action: acl.Deny, Methods: []string{"POST"}},
			{Name: "alice-local", Action: acl.Allow, Users: []string{"alice"}, AllowPrivate: []string{"127.0.0.1/32"}},
			{Name: "rest", Action: acl.Allow},
		},
		Guard: true,
	}, proxytest.Respond(200, "ok"))
	h := "Host: " + o.Addr
	tests := []struct {
		name, req                      string
		status                         int
		authFails, challenges, denials float64
	}{
		{"no credentials", get(o, "/"), 407, 0, 1, 0},
		{"wrong password", request("GET", o.URL("/"), 1, "", h, basicAuth("alice", "x")), 407, 1, 0, 0},
		{"CONNECT without credentials", "CONNECT " + o.Addr + " HTTP/1.1\r\n" + h + "\r\n\r\n", 407, 0, 1, 0},
		{"denied by a rule", request("POST", o.URL("/"), 1, "", h, basicAuth("alice", "a")), 403, 0, 0, 1},
		{"refused by the guard", request("GET", o.URL("/"), 1, "", h, basicAuth("bob", "b")), 403, 0, 0, 1},
		{"malformed target without credentials", "GET / HTTP/1.1\r\n" + h + "\r\n\r\n", 400, 0, 0, 0},
		{"allowed", request("GET", o.URL("/"), 1, "", h, basicAuth("alice", "a")), 200, 0, 0, 0},
	}
	lbl := map[string]string{"listener": "main", "protocol": "http"}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			auth0 := metricValue(t, m, "rustle_auth_failures_total", lbl)
			ask0 := metricValue(t, m, "rustle_auth_challenges_total", lbl)
			deny0 := metricValue(t, m, "rustle_acl_denials_total", lbl)
			r, _ := proxytest.Dial(t, proxy).RoundTrip(tt.req)
			if r.Status != tt.status {
				t.Fatalf("answer %q, want %d", r.Head, tt.status)
			}
			if got := metricValue(t, m, "rustle_auth_failures_total", lbl) - auth0; got != tt.authFails {
				t.Errorf("auth failures counted %v, want %v", got, tt.authFails)
			}
			if got := metricValue(t, m, "rustle_auth_challenges_total", lbl) - ask0; got != tt.challenges {
				t.Errorf("auth challenges counted %v, want %v", got, tt.challenges)
			}
			if got := metricValue(t, m, "rustle_acl_denials_total", lbl) - deny0; got != tt.denials {
				t.Errorf("denials counted %v, want %v", got, tt.denials)
			}
			if rec := waitRecords(t, out, i+1)[i]; rec.Status != tt.status {
				t.Errorf("record %+v, want status %d", rec, tt.status)
			}
		})
	}
}

// TestResponseBytesLogged checks the bytes down a request's record
// carries for each response framing: the body's content as written to
// the client, never its head or its chunk framing, and never less than
// nothing.
func TestResponseBytesLogged(t *testing.T) {
	t.Parallel()
	const chunked = "5\r\nhello\r\n0\r\n\r\n"
	tests := []struct {
		name    string
		handler proxytest.Handler
		method  string
		minor   int
		down    int64
	}{
		{"Content-Length", proxytest.Respond(200, "hello"), "GET", 1, 5},
		{"chunked, passed on", proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked), "GET", 1, 5},
		{"chunked, decoded for HTTP/1.0", proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked), "GET", 0, 5},
		{"close-delimited", proxytest.CloseDelimited("until the end"), "GET", 1, int64(len("until the end"))},
		{"HEAD", proxytest.Respond(200, "hello"), "HEAD", 1, 0},
		{"204", proxytest.Respond(204, ""), "GET", 1, 0},
		{"malformed chunk", proxytest.ThenClose(proxytest.Raw("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n")), "GET", 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			al, out := newAccessLog(t)
			o, proxy, _ := setupPolicy(t, testCfg{}, proxytest.PolicyConfig{AccessLog: al}, tt.handler)
			c := proxytest.Dial(t, proxy)
			c.Write(request(tt.method, o.URL("/"), tt.minor, "", "Host: "+o.Addr))
			c.TryReadResponse(tt.method) // the malformed chunk gets none
			if rec := waitRecords(t, out, 1)[0]; rec.BytesDown != tt.down || rec.BytesUp != 0 {
				t.Errorf("record %+v, want %d bytes down", rec, tt.down)
			}
		})
	}
}
