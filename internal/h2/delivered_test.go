package h2

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// startCutProxy serves HTTP/2 with prior knowledge on a loopback port,
// each client connection cut (proxytest.Cut) after limit bytes of
// output, and returns the address, the access log and the metrics.
func startCutProxy(t *testing.T, limit int64) (string, *proxytest.LogBuffer, *metrics.Metrics) {
	t.Helper()
	out := &proxytest.LogBuffer{}
	al := proxytest.JSONAccessLog(t, out)
	m := metrics.New(metrics.Config{})
	pol := proxytest.NewPolicy(t, proxytest.PolicyConfig{Listener: "tls", AccessLog: al, Metrics: m.Listener("tls", "https")})
	srv, err := New(testConfig(Config{}))
	if err != nil {
		t.Fatal(err)
	}
	addr := proxytest.StartProxy(t, pol, func(c *net.TCPConn, sess *gate.Session) {
		srv.serveConn(proxytest.Cut(c, limit), sess, false)
	})
	return addr, out, m
}

// TestBytesDownWritten cuts the client connection part way through a
// large download, in the middle of a frame, and checks that the record and
// the metric count exactly the DATA payload the client got in whole
// frames: not what was queued for it and never written.
func TestBytesDownWritten(t *testing.T) {
	const size, cutAt = 64 << 20, 1<<20 + 777
	tests := []struct {
		name    string
		framing proxytest.Framing
		tunnel  bool
	}{
		{"Content-Length", proxytest.ByLength, false},
		{"chunked", proxytest.ByChunks, false},
		{"close-delimited", proxytest.ByClose, false},
		{"CONNECT", proxytest.ByLength, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := proxytest.NewOrigin(t, proxytest.Bulk(size, tt.framing))
			addr, out, m := startCutProxy(t, cutAt)
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(proxytest.DefaultTimeout))

			var hb bytes.Buffer
			enc := hpack.NewEncoder(&hb)
			field := func(kv ...string) {
				for i := 0; i < len(kv); i += 2 {
					enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
				}
			}
			if tt.tunnel {
				field(":method", "CONNECT", ":authority", o.Addr)
			} else {
				field(":method", "GET", ":scheme", "http", ":authority", o.Addr, ":path", "/bulk")
			}
			var req bytes.Buffer
			req.WriteString(http2.ClientPreface)
			fr := http2.NewFramer(&req, nil)
			fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
			fr.WriteWindowUpdate(0, 1<<31-1-65535)
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: !tt.tunnel, EndHeaders: true})
			if tt.tunnel {
				// The download, asked for through the tunnel.
				fr.WriteData(1, false, []byte("GET /bulk HTTP/1.1\r\nHost: "+o.Addr+"\r\n\r\n"))
			}
			if _, err := c.Write(req.Bytes()); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(c)
			if len(got) != cutAt {
				t.Fatalf("the client read %d bytes (%v), want the %d the cut lets through", len(got), err, cutAt)
			}

			// The DATA payload of stream 1 in whole frames (for the tunnel,
			// the origin's answer head included: it is tunnel payload).
			var want int64
			rd := http2.NewFramer(nil, bytes.NewReader(got))
			for {
				f, err := rd.ReadFrame()
				if err != nil {
					break
				}
				if d, ok := f.(*http2.DataFrame); ok && d.StreamID == 1 {
					want += int64(len(d.Data()))
				}
			}
			var rec struct {
				Status    int
				BytesDown int64 `json:"bytes_down"`
			}
			proxytest.WaitFor(t, "the stream's record", func() bool { return strings.Contains(out.String(), "\n") })
			if err := json.Unmarshal([]byte(out.String()), &rec); err != nil {
				t.Fatal(err)
			}
			if rec.Status != 200 || rec.BytesDown != want {
				t.Errorf("record: status %d, %d bytes down; want 200 and %d, the DATA payload the client got", rec.Status, rec.BytesDown, want)
			}
			if got := proxytest.Metric(t, m, "rustle_bytes_total", "listener", "tls", "direction", "down"); got != float64(want) {
				t.Errorf("rustle_bytes_total down = %v, want %d", got, want)
			}
		})
	}
}
