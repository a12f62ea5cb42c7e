package h3

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestQPACKEncoding checks rustle's field section encoder against
// quic-go's QPACK decoder: statuses in the static table and out of it,
// names in any case (sent in lower case), names and values past their
// prefixes' first byte.
func TestQPACKEncoding(t *testing.T) {
	long := strings.Repeat("v", 300)
	tests := []struct {
		status int
		fields [][2]string
		want   []hpack.HeaderField
	}{
		{200, nil, []hpack.HeaderField{{Name: ":status", Value: "200"}}},
		{407, [][2]string{{"Proxy-Authenticate", `Basic realm="rustle"`}},
			[]hpack.HeaderField{{Name: ":status", Value: "407"}, {Name: "proxy-authenticate", Value: `Basic realm="rustle"`}}},
		{429, [][2]string{{"X-A-Rather-Long-Field-Name", long}, {"e", ""}},
			[]hpack.HeaderField{{Name: ":status", Value: "429"}, {Name: "x-a-rather-long-field-name", Value: long}, {Name: "e", Value: ""}}},
		{503, [][2]string{{"Content-Length", "0"}}, []hpack.HeaderField{{Name: ":status", Value: "503"}, {Name: "content-length", Value: "0"}}},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.status), func(t *testing.T) {
			b := appendStatus(appendSectionPrefix(nil), tt.status)
			for _, f := range tt.fields {
				b = appendField(b, f[0], []byte(f[1]))
			}
			got, err := decodeFields(nil, b, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("decoded %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i].Name != tt.want[i].Name || got[i].Value != tt.want[i].Value {
					t.Errorf("field %d: %q: %q, want %q: %q", i, got[i].Name, got[i].Value, tt.want[i].Name, tt.want[i].Value)
				}
			}
		})
	}
}

// rawClient is an HTTP/3 client written frame by frame, to send what
// quic-go's client never would.
type rawClient struct {
	t  *testing.T
	qc *quic.Conn
}

// rawDial opens a QUIC connection to p and, unless settings is nil, the
// client's control stream with settings as its first frame's payload.
func rawDial(t *testing.T, p *testProxy, settings []byte) *rawClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qc, err := quic.DialAddr(ctx, p.Addr, &tls.Config{RootCAs: p.Roots, NextProtos: []string{NextProto}},
		&quic.Config{EnableDatagrams: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { qc.CloseWithError(0, "") })
	c := &rawClient{t: t, qc: qc}
	if settings != nil {
		c.uni(streamControl, frame(frameSettings, settings))
	}
	return c
}

// uni opens a unidirectional stream of type typ and writes b on it.
func (c *rawClient) uni(typ uint64, b []byte) {
	c.t.Helper()
	str, err := c.qc.OpenUniStream()
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := str.Write(append(quicvarint.Append(nil, typ), b...)); err != nil {
		c.t.Fatal(err)
	}
}

// datagramSettings is a client's SETTINGS payload with HTTP Datagrams on.
var datagramSettings = quicvarint.Append(quicvarint.Append(nil, settingH3Datagram), 1)

// frame returns one frame of type typ with payload p.
func frame(typ uint64, p []byte) []byte { return append(appendFrameHeader(nil, typ, len(p)), p...) }

// headers returns a HEADERS frame of fields (name, value pairs, in the
// order given, names as given).
func headers(fields ...string) []byte {
	b := appendSectionPrefix(nil)
	for i := 0; i+1 < len(fields); i += 2 {
		b = appendPrefixInt(b, 0x20, 3, uint64(len(fields[i])))
		b = append(b, fields[i]...)
		b = appendPrefixInt(b, 0, 7, uint64(len(fields[i+1])))
		b = append(b, fields[i+1]...)
	}
	return frame(frameHeaders, b)
}

// do sends the frames b on a new request stream, ends it, and returns
// the response's status and content, or the error its read ended with.
func (c *rawClient) do(b ...[]byte) (int, string, error) {
	c.t.Helper()
	str, err := c.qc.OpenStreamSync(context.Background())
	if err != nil {
		return 0, "", err
	}
	for _, p := range b {
		if _, err := str.Write(p); err != nil {
			break // the proxy stopped reading (STOP_SENDING): its answer may still come
		}
	}
	str.Close()
	str.SetReadDeadline(time.Now().Add(10 * time.Second))
	fr := frameReader{src: str, buf: make([]byte, 4096)}
	status := 0
	var body []byte
	for {
		typ, length, err := fr.header()
		if err == io.EOF {
			return status, string(body), nil
		}
		if err != nil {
			return status, string(body), err
		}
		p, err := fr.payload(int(length))
		if err != nil {
			return status, string(body), err
		}
		switch typ {
		case frameHeaders:
			fields, err := decodeFields(nil, p, 1<<20)
			if err != nil {
				return 0, "", err
			}
			if status == 0 {
				status, _ = strconv.Atoi(pseudo(fields, ":status"))
			}
		case frameData:
			body = append(body, p...)
		}
	}
}

// closedWith waits for the connection's close and returns its HTTP/3
// error code.
func (c *rawClient) closedWith() uint64 {
	c.t.Helper()
	select {
	case <-c.qc.Context().Done():
	case <-time.After(10 * time.Second):
		c.t.Fatal("the connection is still open")
	}
	var appErr *quic.ApplicationError
	if err := context.Cause(c.qc.Context()); errors.As(err, &appErr) {
		return uint64(appErr.ErrorCode)
	}
	c.t.Fatalf("closed with %v", context.Cause(c.qc.Context()))
	return 0
}

// streamCode returns the stream error code err carries, 0 for none.
func streamCode(err error) uint64 {
	var se *quic.StreamError
	if errors.As(err, &se) {
		return uint64(se.ErrorCode)
	}
	return 0
}

// TestFraming sends requests frame by frame (RFC 9114 §4.1, §7): frames
// of unknown types are skipped, trailers dropped; a malformed request is
// reset with H3_MESSAGE_ERROR and logged; a field section over the limit
// is answered 431; content that does not match its content-length is
// refused; and the frames a request stream must not carry close the
// connection with H3_FRAME_UNEXPECTED.
func TestFraming(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	cfg := testConfig()
	cfg.Origin = testOrigin(origin.Config{MaxHeaderBytes: 4096})
	p := startProxy(t, cfg, proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	get := func(extra ...string) []byte {
		f := append([]string{":method", "GET", ":scheme", "http", ":authority", o.Addr, ":path", "/x"}, extra...)
		return headers(f...)
	}
	post := func(length string) []byte {
		return headers(":method", "POST", ":scheme", "http", ":authority", o.Addr, ":path", "/echo", "content-length", length)
	}
	tests := []struct {
		name   string
		frames [][]byte
		status int
		body   string
		reset  uint64 // the stream's error code; 0 for an answer
		closed uint64 // the connection's error code; 0 when it stays open
	}{
		{name: "plain", frames: [][]byte{get()}, status: 200},
		{name: "unknown frames skipped", frames: [][]byte{frame(0x21, []byte("grease")), get(), frame(0x40, nil)}, status: 200},
		{name: "post with trailers", frames: [][]byte{post("5"), frame(frameData, []byte("hello")), headers("x-t", "1")},
			status: 200, body: "ok"},
		{name: "content shorter than its length", frames: [][]byte{post("10"), frame(frameData, []byte("hello"))}, status: 400},
		{name: "field name in upper case", frames: [][]byte{get("X-Upper", "1")}, reset: errMessage},
		{name: "no :path", frames: [][]byte{headers(":method", "GET", ":scheme", "http", ":authority", o.Addr)}, reset: errMessage},
		{name: "connection-specific field", frames: [][]byte{get("connection", "close")}, reset: errMessage},
		{name: "fields over the limit", frames: [][]byte{get("x-big", strings.Repeat("b", 5000))}, status: 431},
		{name: "the proxy itself", frames: [][]byte{headers(":method", "GET", ":scheme", "http", ":authority", p.Addr, ":path", "/")}, status: 400},
		{name: "DATA before HEADERS", frames: [][]byte{frame(frameData, []byte("x")), get()}, closed: errFrameUnexpected},
		{name: "SETTINGS on a request stream", frames: [][]byte{get(), frame(frameSettings, nil)}, closed: errFrameUnexpected},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := rawDial(t, p, datagramSettings)
			status, body, err := c.do(tt.frames...)
			switch {
			case tt.closed != 0:
				if code := c.closedWith(); code != tt.closed {
					t.Fatalf("connection closed with %#x, want %#x", code, tt.closed)
				}
			case tt.reset != 0:
				if code := streamCode(err); code != tt.reset {
					t.Fatalf("status %d, err %v: want the stream reset with %#x", status, err, tt.reset)
				}
			default:
				if err != nil || status != tt.status {
					t.Fatalf("status %d, err %v, want %d", status, err, tt.status)
				}
				if tt.body != "" && body != tt.body {
					t.Errorf("body %q, want %q", body, tt.body)
				}
			}
		})
	}
}

// TestControlStream checks the client's control stream (RFC 9114 §6.2.1,
// §7.2.4): SETTINGS first, no HTTP/2 setting, no second one; the
// connection closes with the error each calls for.
func TestControlStream(t *testing.T) {
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	tests := []struct {
		name string
		open func(c *rawClient)
		code uint64
	}{
		{"HTTP/2 setting", func(c *rawClient) {
			c.uni(streamControl, frame(frameSettings, quicvarint.Append(quicvarint.Append(nil, 0x02), 1)))
		}, errSettings},
		{"not SETTINGS first", func(c *rawClient) { c.uni(streamControl, frame(frameGoAway, quicvarint.Append(nil, 0))) }, errMissingSettings},
		{"second control stream", func(c *rawClient) {
			c.uni(streamControl, frame(frameSettings, nil))
			c.uni(streamControl, frame(frameSettings, nil))
		}, errStreamCreation},
		{"push stream", func(c *rawClient) { c.uni(streamPush, nil) }, errStreamCreation},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := rawDial(t, p, nil)
			tt.open(c)
			if code := c.closedWith(); code != tt.code {
				t.Fatalf("closed with %#x, want %#x", code, tt.code)
			}
		})
	}
}

// TestUniStreams checks the client's unidirectional streams (RFC 9114
// §6.2): it may open three, and once its control stream and both QPACK
// streams have come, which take that credit and never give it back, no
// goroutine waits for another one; the connection serves on.
func TestUniStreams(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	c := rawDial(t, p, datagramSettings)
	c.uni(streamQPACKEncoder, nil)
	c.uni(streamQPACKDecoder, nil)
	if _, err := c.qc.OpenUniStream(); err == nil {
		t.Error("a fourth unidirectional stream opened: the client has credit for three")
	}
	// Served (so its acceptor has started), the connection then has no
	// goroutine waiting for another unidirectional stream.
	get := headers(":method", "GET", ":scheme", "http", ":authority", o.Addr, ":path", "/")
	if status, body, err := c.do(get); status != 200 || body != "ok" || err != nil {
		t.Fatalf("GET: %d %q %v", status, body, err)
	}
	if err := proxytest.CheckGoroutines(proxytest.DefaultTimeout, "h3.(*conn).acceptUni"); err != nil {
		t.Errorf("the critical streams came, and a goroutine still waits for another: %v", err)
	}
}

// TestCut checks the end of a shutdown's drain: a connection sent GOAWAY
// with a request still in progress closes when the policy's Cut is done.
func TestCut(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Echo())
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	c := rawDial(t, p, datagramSettings)
	busy, err := c.qc.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	busy.Write(headers(":method", "POST", ":scheme", "http", ":authority", o.Addr, ":path", "/", "content-length", "2"))
	busy.Write(frame(frameData, []byte("a")))
	proxytest.WaitFor(t, "the request in progress at the origin", func() bool { return len(o.Requests()) == 1 })
	p.drain()
	ctrl, err := c.qc.AcceptUniStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	fr := frameReader{src: ctrl, buf: make([]byte, 256)}
	if typ, err := fr.varint(); err != nil || typ != streamControl {
		t.Fatalf("control stream type %d, %v", typ, err)
	}
	for goAway := false; !goAway; {
		typ, length, err := fr.header()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fr.payload(int(length)); err != nil {
			t.Fatal(err)
		}
		goAway = typ == frameGoAway
	}
	select {
	case <-c.qc.Context().Done():
		t.Fatal("the connection closed with a request in progress, before the Cut")
	default:
	}
	p.cut()
	if code := c.closedWith(); code != errNoError {
		t.Fatalf("closed with %#x, want H3_NO_ERROR", code)
	}
}

// TestGoAway checks a connection's graceful end (RFC 9114 §5.2): rustle
// sends GOAWAY with the first request stream it will not serve, a request
// in progress runs on, and a request on a later stream is rejected with
// H3_REQUEST_REJECTED.
func TestGoAway(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Echo())
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{}))
	c := rawDial(t, p, datagramSettings)
	ctrl, err := c.qc.AcceptUniStream(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	get := headers(":method", "GET", ":scheme", "http", ":authority", o.Addr, ":path", "/")
	if status, _, err := c.do(get); status != 200 || err != nil {
		t.Fatalf("GET: %d %v", status, err)
	}
	// A request in progress: its head, not yet its end.
	busy, err := c.qc.OpenStreamSync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	busy.Write(headers(":method", "POST", ":scheme", "http", ":authority", o.Addr, ":path", "/", "content-length", "2"))
	busy.Write(frame(frameData, []byte("a")))
	proxytest.WaitFor(t, "the request in progress at the origin", func() bool { return len(o.Requests()) == 2 })
	p.drain()
	fr := frameReader{src: ctrl, buf: make([]byte, 256)}
	if typ, err := fr.varint(); err != nil || typ != streamControl {
		t.Fatalf("control stream type %d, %v", typ, err)
	}
	var goAway uint64
	for goAway == 0 {
		typ, length, err := fr.header()
		if err != nil {
			t.Fatal(err)
		}
		payload, err := fr.payload(int(length))
		if err != nil {
			t.Fatal(err)
		}
		if typ == frameGoAway {
			id, _, _ := quicvarint.Parse(payload)
			goAway = id + 1 // 0 would be a valid ID
		}
	}
	if want := uint64(busy.StreamID()) + 4 + 1; goAway != want {
		t.Errorf("GOAWAY names stream %d, want %d", goAway-1, want-1)
	}
	if _, _, err := c.do(get); streamCode(err) != errRequestRejected {
		t.Errorf("a request after GOAWAY: %v, want H3_REQUEST_REJECTED", err)
	}
	busy.Write(frame(frameData, []byte("b")))
	busy.Close()
	fr = frameReader{src: busy, buf: make([]byte, 4096)}
	if typ, _, err := fr.header(); err != nil || typ != frameHeaders {
		t.Fatalf("the request in progress: frame %d, %v", typ, err)
	}
	if code := c.closedWith(); code != errNoError {
		t.Errorf("closed with %#x, want H3_NO_ERROR once the request ended", code)
	}
}

// TestWorkersReused checks that request streams run on reused workers
// (package workpool): forwarded requests one after the other on one
// connection start no goroutine each, where quic-go's http3 server
// started one per stream and grew its stack each time.
func TestWorkersReused(t *testing.T) {
	o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	pool := proxytest.NewPool(t, dialer.PoolConfig{MaxIdlePerHost: 4, MaxIdle: 16, IdleTimeout: time.Minute})
	p := startProxy(t, testConfig(), proxytest.NewPolicy(t, proxytest.PolicyConfig{Pool: pool}))
	c := rawDial(t, p, datagramSettings)
	get := headers(":method", "GET", ":scheme", "http", ":authority", o.Addr, ":path", "/")
	created := func() uint64 {
		s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	for range 5 {
		c.do(get)
	}
	const n = 100
	before := created()
	for i := range n {
		if status, _, err := c.do(get); status != 200 || err != nil {
			t.Fatalf("GET %d: %d %v", i, status, err)
		}
	}
	if got := created() - before; got > n/4 {
		t.Errorf("%d requests started %d goroutines, want them served by reused workers", n, got)
	}
}
