package proxytest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// H2Client speaks HTTP/2 frame by frame on a connection that negotiated
// h2, for tests that choose how a client's requests are cut into writes
// (and so into TLS records). It is used by one goroutine.
type H2Client struct {
	c   net.Conn
	fr  *http2.Framer
	enc *hpack.Encoder
	buf bytes.Buffer
	// answers holds what was read of streams no Answer call has taken.
	answers map[uint32]*h2Answer
}

// NewH2Client sends the client preface and an empty SETTINGS frame on c.
func NewH2Client(c net.Conn) (*H2Client, error) {
	h := &H2Client{c: c, fr: http2.NewFramer(c, c)}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	h.enc = hpack.NewEncoder(&h.buf)
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		return nil, fmt.Errorf("write the client preface: %w", err)
	}
	if err := h.fr.WriteSettings(); err != nil {
		return nil, fmt.Errorf("write SETTINGS: %w", err)
	}
	return h, nil
}

// Get returns the HEADERS frame of a GET of https://authority+path on
// stream id, with END_STREAM, for the caller to write (whole, cut or
// with others).
func (h *H2Client) Get(id uint32, authority, path string) []byte {
	h.buf.Reset()
	for _, f := range [][2]string{{":method", "GET"}, {":scheme", "https"}, {":authority", authority}, {":path", path}} {
		h.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	var out bytes.Buffer
	http2.NewFramer(&out, nil).WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: h.buf.Bytes(), EndStream: true, EndHeaders: true})
	return out.Bytes()
}

// Answer reads frames until stream id has ended, answering SETTINGS
// and keeping other streams' answers for their own call, and returns
// its status and body.
func (h *H2Client) Answer(id uint32) (status string, body []byte, err error) {
	for {
		if a := h.answers[id]; a != nil && a.ended {
			delete(h.answers, id)
			return a.status, a.body, nil
		}
		f, err := h.fr.ReadFrame()
		if err != nil {
			return "", nil, fmt.Errorf("read the answer of stream %d: %w", id, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.fr.WriteSettingsAck()
			}
			continue
		case *http2.GoAwayFrame:
			return "", nil, fmt.Errorf("GOAWAY %v before the end of stream %d", f.ErrCode, id)
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return "", nil, fmt.Errorf("stream %d reset: %v", id, f.ErrCode)
			}
		}
		sid := f.Header().StreamID
		if sid == 0 {
			continue
		}
		if h.answers == nil {
			h.answers = map[uint32]*h2Answer{}
		}
		a := h.answers[sid]
		if a == nil {
			a = &h2Answer{}
			h.answers[sid] = a
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if a.status == "" {
				a.status = f.PseudoValue("status")
			}
		case *http2.DataFrame:
			a.body = append(a.body, f.Data()...)
		}
		if f.Header().Flags.Has(http2.FlagDataEndStream) {
			a.ended = true
		}
	}
}

// h2Answer is what an H2Client read of a stream's answer.
type h2Answer struct {
	status string
	body   []byte
	ended  bool
}

// ReadToEnd reads frames until the connection ends, within wait, and
// returns the GOAWAY it saw (nil: none).
func (h *H2Client) ReadToEnd(wait time.Duration) (*http2.GoAwayFrame, error) {
	h.c.SetReadDeadline(time.Now().Add(wait))
	var g *http2.GoAwayFrame
	for {
		f, err := h.fr.ReadFrame()
		var ne net.Error
		switch {
		case errors.As(err, &ne) && ne.Timeout():
			return g, fmt.Errorf("the connection is still open %v later", wait)
		case err != nil:
			return g, nil
		}
		if f, ok := f.(*http2.GoAwayFrame); ok {
			c := *f
			g = &c
		}
	}
}

// H2Connect opens a CONNECT stream to target on cc, an HTTP/2 client
// connection to the proxy (one that negotiated h2 on an https
// listener), with the header fields given ("Name: value"), and returns the tunnel as a net.Conn (see StreamConn) and
// a function that resets the stream (RST_STREAM CANCEL, as a client
// closing the answer's body early does), leaving the connection open.
// It fails the test unless the proxy answers 200; the stream is closed
// by t.Cleanup.
func H2Connect(t testing.TB, cc *http2.ClientConn, target string, header ...string) (net.Conn, func()) {
	t.Helper()
	pr, pw := io.Pipe()
	req, err := http.NewRequest("CONNECT", "", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.URL, req.Host = &url.URL{Host: target}, target
	for _, h := range header {
		name, value, _ := strings.Cut(h, ":")
		req.Header.Add(name, strings.TrimSpace(value))
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		pw.Close()
		t.Fatalf("proxytest: h2 CONNECT %s: %v", target, err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		pw.Close()
		t.Fatalf("proxytest: h2 CONNECT %s: %s", target, resp.Status)
	}
	c := StreamConn(resp.Body, pw)
	t.Cleanup(func() { c.Close() })
	return c, func() { resp.Body.Close() }
}
