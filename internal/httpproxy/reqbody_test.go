package httpproxy_test

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestSlowUploadOutlastsResponseHeader checks that the response-header
// timeout starts when the request body is complete: an upload that
// streams for longer than it, to an origin that reads it all and then
// answers, gets the origin's answer, not a 504.
func TestSlowUploadOutlastsResponseHeader(t *testing.T) {
	t.Parallel()
	const pieces = 10
	piece := strings.Repeat("u", 1000)
	tests := []struct {
		name   string
		header string
		wire   func(i int) string // the i-th piece on the wire; i == pieces: the end
	}{
		{"length", "Content-Length: " + strconv.Itoa(pieces*len(piece)), func(i int) string {
			if i == pieces {
				return ""
			}
			return piece
		}},
		{"chunked", "Transfer-Encoding: chunked", func(i int) string {
			if i == pieces {
				return "0\r\n\r\n"
			}
			return strconv.FormatInt(int64(len(piece)), 16) + "\r\n" + piece + "\r\n"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testCfg{ResponseHeaderTimeout: 300 * time.Millisecond}
			o, proxy, _ := setup(t, cfg, proxytest.Respond(200, "got it"))
			c := proxytest.Dial(t, proxy)
			c.Timeout = 10 * time.Second
			go func() {
				c.Conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(c.Conn, request("POST", o.URL("/"), 1, "", "Host: "+o.Addr, tt.header))
				// The body takes about a second: over three times the
				// response-header timeout.
				tick := time.NewTicker(100 * time.Millisecond)
				defer tick.Stop()
				for i := 0; i <= pieces; i++ {
					<-tick.C
					if _, err := io.WriteString(c.Conn, tt.wire(i)); err != nil {
						return
					}
				}
			}()
			r := c.ReadResponse("POST")
			if r.Status != 200 || string(r.Body) != "got it" {
				t.Fatalf("got %d %q, want 200 from the origin", r.Status, r.Body)
			}
			if reqs := o.Requests(); len(reqs) != 1 || len(reqs[0].Body) != pieces*len(piece) {
				t.Fatalf("origin got %d requests", len(reqs))
			}
		})
	}
}

// TestStalledUpload checks that a request body that stops coming ends
// the exchange within timeouts.write, answered 408 and logged with the
// reason body-timeout, however long the response-header timeout.
func TestStalledUpload(t *testing.T) {
	t.Parallel()
	for _, header := range []string{"Content-Length: 100000", "Transfer-Encoding: chunked"} {
		t.Run(header, func(t *testing.T) {
			t.Parallel()
			cfg := testCfg{WriteTimeout: 300 * time.Millisecond, ResponseHeaderTimeout: time.Minute}
			al, out := newAccessLog(t)
			o, proxy, _ := setupPolicy(t, cfg, proxytest.PolicyConfig{AccessLog: al}, proxytest.Respond(200, "never"))
			c := proxytest.Dial(t, proxy)
			c.Timeout = 10 * time.Second
			body := "abc"
			if strings.HasPrefix(header, "Transfer") {
				body = "3\r\nabc\r\n"
			}
			start := time.Now()
			io.WriteString(c.Conn, request("POST", o.URL("/"), 1, "", "Host: "+o.Addr, header)+body)
			r := c.ReadResponse("POST")
			if r.Status != 408 {
				t.Fatalf("got %d %q, want 408", r.Status, r.Body)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("answered after %v, want about timeouts.write (300ms)", d)
			}
			if rec := waitRecords(t, out, 1)[0]; rec.Status != 408 || rec.Reason != "body-timeout" {
				t.Errorf("logged %+v, want status 408 reason body-timeout", rec)
			}
		})
	}
}

// TestEarlyAnswerStalledBody checks that an origin answering before the
// body is complete is relayed at once, while the body is still awaited.
func TestEarlyAnswerStalledBody(t *testing.T) {
	t.Parallel()
	o, proxy, _ := setup(t, testCfg{}, proxytest.ThenClose(proxytest.Raw(
		"HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")))
	c := proxytest.Dial(t, proxy)
	c.Timeout = 5 * time.Second
	io.WriteString(c.Conn, request("POST", o.URL("/"), 1, "", "Host: "+o.Addr, "Content-Length: 1000000")+"partial")
	if r := c.ReadResponse("POST"); r.Status != 401 {
		t.Fatalf("got %d, want the origin's early 401", r.Status)
	}
}

// TestRequestTrailers checks the trailer section of a chunked request
// body: a malformed or oversized one is answered 400 at once, whether it
// comes with the head or after the body began streaming, and none of it
// reaches the origin; a valid one is dropped, the body forwarded.
func TestRequestTrailers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		trailer string // the trailer section, final CRLF included
		status  int
	}{
		{"smuggled request line", "GET /SMUGGLED HTTP/1.1\r\nHost: x\r\n\r\n", 400},
		{"line without colon", "SMUGGLED\r\n\r\n", 400},
		{"space before colon", "X-SMUGGLED : 1\r\n\r\n", 400},
		{"oversized", "X-SMUGGLED: " + strings.Repeat("p", 70<<10) + "\r\n\r\n", 400},
		{"valid", "X-SMUGGLED: 1\r\nContent-Length: 5\r\n\r\n", 200},
	}
	for _, tt := range tests {
		for _, streaming := range []bool{false, true} {
			t.Run(tt.name+" streaming="+strconv.FormatBool(streaming), func(t *testing.T) {
				t.Parallel()
				seen := make(chan []byte, 1)
				arrived := make(chan struct{})
				o, proxy, _ := setup(t, testCfg{}, func(x *proxytest.Exchange) {
					close(arrived)
					if _, err := x.ReadBody(); err != nil {
						seen <- x.RawSoFar()
						x.CloseConn()
						return
					}
					seen <- x.Req.RawBody
					io.WriteString(x, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				})
				c := proxytest.Dial(t, proxy)
				c.Timeout = 10 * time.Second
				head := request("POST", o.URL("/"), 1, "", "Host: "+o.Addr, "Transfer-Encoding: chunked")
				start := time.Now()
				go func() {
					c.Conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
					if streaming {
						io.WriteString(c.Conn, head+"5\r\nhello\r\n")
						select {
						case <-arrived:
						case <-time.After(10 * time.Second):
						}
						io.WriteString(c.Conn, "0\r\n"+tt.trailer)
						return
					}
					io.WriteString(c.Conn, head+"5\r\nhello\r\n0\r\n"+tt.trailer)
				}()
				r := c.ReadResponse("POST")
				if r.Status != tt.status {
					t.Fatalf("got %d %q, want %d", r.Status, r.Body, tt.status)
				}
				// The default response-header timeout is 60 s: an answer
				// that waited for it would come far later.
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("answered after %v, want at once", d)
				}
				if tt.status == 400 && !streaming && len(tt.trailer) < 4096 {
					if n := o.NumRequests(); n != 0 {
						t.Errorf("origin got %d requests", n)
					}
					return
				}
				var raw []byte
				select {
				case raw = <-seen:
				case <-time.After(10 * time.Second):
					t.Fatal("origin never finished reading")
				}
				if bytes.Contains(raw, []byte("SMUGGLED")) || bytes.Contains(raw, []byte("Content-Length")) {
					t.Errorf("origin got the trailer: %q", raw)
				}
				if tt.status == 200 && string(raw) != "5\r\nhello\r\n0\r\n\r\n" {
					t.Errorf("origin got the body %q", raw)
				}
			})
		}
	}
}

// TestSteadyBodyRearmsDeadline checks that timeouts.write bounds each
// wait for body bytes, not the whole body: a body large enough to be
// spliced (a Content-Length of 128 KiB), arriving steadily in pieces a
// quarter of the timeout apart over twice the timeout, goes through
// whole, upload and download, as a chunked one does.
func TestSteadyBodyRearmsDeadline(t *testing.T) {
	t.Parallel()
	const (
		pieces  = 8
		size    = 16 << 10
		total   = pieces * size
		gap     = 500 * time.Millisecond // a quarter of timeout: a loaded machine may stall a writer for over a second
		timeout = 2 * time.Second
	)
	piece := strings.Repeat("s", size)
	// steady writes the pieces of a body to w, one every gap, each
	// wrapped by wrap.
	steady := func(w io.Writer, wrap func(string) string) error {
		for range pieces {
			time.Sleep(gap)
			if _, err := io.WriteString(w, wrap(piece)); err != nil {
				return err
			}
		}
		return nil
	}
	bare := func(s string) string { return s }
	chunk := func(s string) string { return strconv.FormatInt(int64(len(s)), 16) + "\r\n" + s + "\r\n" }
	cfg := testCfg{WriteTimeout: timeout, ResponseHeaderTimeout: timeout}

	for _, tt := range []struct {
		name   string
		header string
		wrap   func(string) string
		end    string
	}{
		{"upload length", "Content-Length: " + strconv.Itoa(total), bare, ""},
		{"upload chunked", "Transfer-Encoding: chunked", chunk, "0\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o, proxy, _ := setup(t, cfg, proxytest.Respond(200, "got it"))
			c := proxytest.Dial(t, proxy)
			c.Timeout = 20 * time.Second
			go func() {
				c.Conn.SetWriteDeadline(time.Now().Add(20 * time.Second))
				io.WriteString(c.Conn, request("POST", o.URL("/"), 1, "", "Host: "+o.Addr, tt.header))
				if steady(c.Conn, tt.wrap) == nil {
					io.WriteString(c.Conn, tt.end)
				}
			}()
			r := c.ReadResponse("POST")
			if r.Status != 200 || string(r.Body) != "got it" {
				t.Fatalf("got %d %q, want 200 from the origin", r.Status, r.Body)
			}
			if reqs := o.Requests(); len(reqs) != 1 || len(reqs[0].Body) != total {
				t.Fatalf("origin got %d requests, want 1 with the %d-byte body", len(reqs), total)
			}
		})
	}

	t.Run("download length", func(t *testing.T) {
		t.Parallel()
		o, proxy, _ := setup(t, cfg, func(x *proxytest.Exchange) {
			if _, err := x.ReadBody(); err != nil {
				x.CloseConn()
				return
			}
			x.WriteString("HTTP/1.1 200 OK\r\nContent-Length: " + strconv.Itoa(total) + "\r\n\r\n")
			if steady(x, bare) != nil {
				x.CloseConn()
			}
		})
		c := proxytest.Dial(t, proxy)
		c.Timeout = 20 * time.Second
		c.Write(request("GET", o.URL("/"), 1, "", "Host: "+o.Addr))
		r := c.ReadResponse("GET")
		if r.Status != 200 || len(r.Body) != total {
			t.Fatalf("got %d with %d bytes, want 200 with %d", r.Status, len(r.Body), total)
		}
	})
}
