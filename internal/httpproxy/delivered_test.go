package httpproxy_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// bulkSize is the body of the large downloads of these tests.
const bulkSize = 64 << 20

// chunkedContent returns the chunk data in the first n bytes of a
// chunked proxytest.Bulk body.
func chunkedContent(n int64) int64 {
	per := int64(proxytest.BulkChunk + proxytest.BulkChunkFraming)
	rest := n % per
	return n/per*proxytest.BulkChunk + min(max(rest-int64(len("4000\r\n")), 0), proxytest.BulkChunk)
}

// TestBytesDownWritten cuts the client connection part way through a
// large response, in the middle of a write, and checks that the record
// and the metric count exactly the body content that reached the client:
// never what was read from the origin but not written.
func TestBytesDownWritten(t *testing.T) {
	t.Parallel()
	const cutAt = 1<<20 + 777 // bytes the client connection takes
	tests := []struct {
		name    string
		framing proxytest.Framing
		minor   int // the client's HTTP/1.minor
	}{
		{"Content-Length", proxytest.ByLength, 1},
		{"chunked, passed on", proxytest.ByChunks, 1},
		{"chunked, decoded for HTTP/1.0", proxytest.ByChunks, 0},
		{"close-delimited", proxytest.ByClose, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			al, out := newAccessLog(t)
			m := metrics.New(metrics.Config{})
			o := proxytest.NewOrigin(t, proxytest.Bulk(bulkSize, tt.framing))
			p := newProxy(t, testCfg{})
			pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{
				Listener: "main", AccessLog: al, Metrics: m.Listener("main", "http"),
			})
			proxy := proxytest.StartProxy(t, pol, func(c *net.TCPConn, s *gate.Session) {
				p.ServeConn(proxytest.Cut(c, cutAt), s)
			})

			c := proxytest.Dial(t, proxy)
			c.Write(request("GET", o.URL("/bulk"), tt.minor, "", "Host: "+o.Addr))
			got := c.ReadAll()
			if len(got) != cutAt {
				t.Fatalf("the client read %d bytes, want the %d the cut lets through", len(got), cutAt)
			}
			head, body, ok := bytes.Cut(got, []byte("\r\n\r\n"))
			if !ok || !bytes.HasPrefix(head, []byte("HTTP/1.1 200 ")) {
				t.Fatalf("answer %.200q", got)
			}
			want := int64(len(body))
			if tt.framing == proxytest.ByChunks && tt.minor == 1 {
				want = chunkedContent(want)
			}

			rec := waitRecords(t, out, 1)[0]
			if rec.BytesDown != want || rec.Status != 200 {
				t.Errorf("record %+v: %d bytes down, want %d, the body content the client got", rec, rec.BytesDown, want)
			}
			lbl := map[string]string{"listener": "main", "protocol": "http", "direction": "down"}
			if got := metricValue(t, m, "rustle_bytes_total", lbl); got != float64(want) {
				t.Errorf("rustle_bytes_total down = %v, want %d", got, want)
			}
		})
	}
}

// TestBytesDownClientGone has a client read a little of a large response
// over a small receive buffer and then close: the record counts no more
// than the kernel can have taken, far below the body's size.
func TestBytesDownClientGone(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		framing proxytest.Framing
	}{
		{"Content-Length", proxytest.ByLength},
		{"chunked", proxytest.ByChunks},
		{"close-delimited", proxytest.ByClose},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			al, out := newAccessLog(t)
			o := proxytest.NewOrigin(t, proxytest.Bulk(bulkSize, tt.framing))
			proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{AccessLog: al})
			read := readSome(t, proxy, get(o, "/bulk"), 1<<20)
			rec := waitRecords(t, out, 1)[0]
			if rec.BytesDown < read-64<<10 || rec.BytesDown > 16<<20 {
				t.Errorf("%d bytes down logged; the client read %d (head included) of %d and left", rec.BytesDown, read, bulkSize)
			}
		})
	}
}

// readSome sends req on a new connection to proxy with a small receive
// buffer, reads at least n bytes of the answer, closes and returns how
// many it read.
func readSome(t *testing.T, proxy, req string, n int64) int64 {
	t.Helper()
	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.(*net.TCPConn).SetReadBuffer(64 << 10) // no autotuning: the kernel holds little unread
	c.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	read, err := io.CopyN(io.Discard, c, n)
	if err != nil {
		t.Fatalf("read %d bytes: %v", read, err)
	}
	return read
}

// TestBytesUpWritten has an origin take a part of a large request body
// and answer: the record counts what was written to it, at least what it
// read and less than the body, whether the body streamed with splice
// (Content-Length) or through the buffer (chunked).
func TestBytesUpWritten(t *testing.T) {
	t.Parallel()
	const size, taken = 64 << 20, 1 << 20
	for _, chunked := range []bool{false, true} {
		t.Run(fmt.Sprintf("chunked=%v", chunked), func(t *testing.T) {
			t.Parallel()
			al, out := newAccessLog(t)
			o := proxytest.NewOrigin(t, func(x *proxytest.Exchange) {
				io.CopyN(io.Discard, x.Body(), taken)
				x.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
				x.CloseConn()
			})
			proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{AccessLog: al})
			framing := fmt.Sprintf("Content-Length: %d", size)
			if chunked {
				framing = "Transfer-Encoding: chunked"
			}
			c := proxytest.Dial(t, proxy)
			c.Write(request("POST", o.URL("/upload"), 1, "", "Host: "+o.Addr, framing))
			go func() {
				// The body, until the proxy stops taking it.
				chunk := []byte(strings.Repeat("x", 64<<10))
				if chunked {
					chunk = []byte(fmt.Sprintf("%x\r\n%s\r\n", len(chunk), chunk))
				}
				for sent := 0; sent < size; sent += 64 << 10 {
					if _, err := c.Conn.Write(chunk); err != nil {
						return
					}
				}
			}()
			if r := c.ReadResponse("POST"); r.Status != 200 {
				t.Fatalf("answer %q", r.Head)
			}
			c.Close()
			rec := waitRecords(t, out, 1)[0]
			if rec.BytesUp < taken || rec.BytesUp >= size || rec.BytesDown != 2 {
				t.Errorf("record %+v: %d bytes up, want at least the %d the origin read and less than the %d sent", rec, rec.BytesUp, taken, size)
			}
		})
	}
}

// TestTunnelEarlyBytes checks that bytes a client sends right behind its
// CONNECT, which reach the upstream before the tunnel is relayed, count
// as tunnel bytes up.
func TestTunnelEarlyBytes(t *testing.T) {
	t.Parallel()
	al, out := newAccessLog(t)
	echo := proxytest.NewEcho(t)
	proxy := startProxy(t, testCfg{}, proxytest.PolicyConfig{AccessLog: al})
	tc := proxytest.ConnectPipelined(t, proxy, echo.Addr)
	if _, err := tc.Write([]byte("early")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(tc, buf); err != nil || string(buf) != "early" {
		t.Fatalf("tunnel echo: %q, %v", buf, err)
	}
	tc.Close()
	if rec := waitRecords(t, out, 1)[0]; rec.BytesUp != 5 || rec.BytesDown != 5 {
		t.Errorf("record %+v, want 5 bytes each way", rec)
	}
}

// TestWebSocketEarlyBytes checks that bytes an origin sends right behind
// its 101, which go to the client with the 101 before the tunnel is
// relayed, count as tunnel bytes down.
func TestWebSocketEarlyBytes(t *testing.T) {
	t.Parallel()
	al, out := newAccessLog(t)
	o, proxy, _ := setupPolicy(t, testCfg{}, proxytest.PolicyConfig{AccessLog: al}, proxytest.ThenClose(proxytest.Raw(
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nhello")))
	c := proxytest.Dial(t, proxy)
	c.Write(request("GET", o.URL("/ws"), 1, "", "Host: "+o.Addr, "Upgrade: websocket", "Connection: Upgrade",
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"))
	got := c.ReadAll() // the origin's end of stream is passed on
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 101 ")) || !bytes.HasSuffix(got, []byte("\r\n\r\nhello")) {
		t.Fatalf("answer %q", got)
	}
	c.Close()
	if rec := waitRecords(t, out, 1)[0]; rec.Protocol != "websocket" || rec.BytesUp != 0 || rec.BytesDown != 5 {
		t.Errorf("record %+v, want a websocket tunnel with 5 bytes down", rec)
	}
}
