package origin

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http2"
)

// h2Conn is an HTTP/2 connection to an origin that chose h2 by ALPN,
// seen by the exchange as an HTTP/1.1 one: the request head and body it
// writes are read back as an HTTP/1.1 request and sent as an HTTP/2
// stream (x/net/http2's ClientConn), and the stream's response is
// rendered as an HTTP/1.1 response for the exchange to read, its
// trailers in a chunked body's trailer section. So every front-end's
// request path (header bounds and rules, the rule's edits, retries, the
// access log and the status mapping) runs unchanged over it.
//
// It carries one request at a time, as an HTTP/1.1 connection does: it
// is kept for the client connection's next request and pooled as one
// (under the name's TLS key). Closing it closes the HTTP/2 connection.
type h2Conn struct {
	net.Conn // the exchange's end of the pipe; Read, deadlines
	tc       *tls.Conn
	cc       *http2.ClientConn
	end      net.Conn // the bridge's end of the pipe
	name     string   // the origin's name, the :authority's host when none is sent
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{} // closed when serve returns
	in       pipeReader    // what serve reads the requests from: end, after the byte it waited for

	mu  sync.Mutex
	err error // why the bridge ended in a response's body; nil = it did not
}

// h2Transport is the configuration of the HTTP/2 connections of a
// Client: no compression asked for (the exchange relays bodies as
// they are), response heads bounded by MaxHeaderBytes.
func (c *Client) h2Transport() *http2.Transport {
	c.h2Once.Do(func() {
		c.h2 = &http2.Transport{DisableCompression: true, MaxHeaderListSize: uint32(c.cfg.MaxHeaderBytes)}
	})
	return c.h2
}

// newH2Conn makes tc, a TLS connection to name that chose h2, an
// h2Conn. On failure it closes tc.
func newH2Conn(t *http2.Transport, tc *tls.Conn, name string) (*h2Conn, error) {
	cc, err := t.NewClientConn(tc)
	if err != nil {
		tc.Close()
		return nil, &TLSError{Name: name, Err: fmt.Errorf("HTTP/2: %w", err)}
	}
	a, b := net.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	h := &h2Conn{Conn: a, tc: tc, cc: cc, end: b, name: name, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go h.serve()
	return h, nil
}

// LocalAddr and RemoteAddr are the TLS connection's: the pool and the
// grant check where the connection goes by them.
func (h *h2Conn) LocalAddr() net.Addr  { return h.tc.LocalAddr() }
func (h *h2Conn) RemoteAddr() net.Addr { return h.tc.RemoteAddr() }

// NetConn returns the TCP connection under the HTTP/2 one.
func (h *h2Conn) NetConn() net.Conn { return h.tc.NetConn() }

// Alive reports whether the HTTP/2 connection can take another request
// (the origin sent no GOAWAY, nothing failed).
func (h *h2Conn) Alive() bool { return h.cc.CanTakeNewRequest() }

// Read reads the rendered response; once the bridge has ended it
// returns why, in place of the pipe's end.
func (h *h2Conn) Read(p []byte) (int, error) {
	n, err := h.Conn.Read(p)
	if err == io.EOF {
		h.mu.Lock()
		if h.err != nil {
			err = h.err
		}
		h.mu.Unlock()
	}
	return n, err
}

// Close ends the request in flight and closes the HTTP/2 connection.
func (h *h2Conn) Close() error {
	h.cancel()
	err := h.Conn.Close()
	h.end.Close()
	<-h.done
	h.cc.Close()
	return err
}

// fail notes why the bridge ends and closes its end of the pipe: the
// exchange reads err (see Read).
func (h *h2Conn) fail(err error) {
	h.mu.Lock()
	h.err = err
	h.mu.Unlock()
	h.end.Close()
}

// The buffers of the bridge's requests (see serve): taken when a
// request comes, given back once it has been answered.
var (
	h2ReadBufs  = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 4<<10) }}
	h2WriteBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 16<<10) }}
	h2BodyBufs  = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
)

// pipeReader reads the pipe's end after the byte the bridge waited for
// (see serve).
type pipeReader struct {
	c     net.Conn
	first [1]byte
	has   bool
}

func (r *pipeReader) Read(p []byte) (int, error) {
	if r.has && len(p) > 0 {
		p[0], r.has = r.first[0], false
		return 1, nil
	}
	return r.c.Read(p)
}

// serve reads the requests the exchange writes, one at a time, and
// writes back their responses, until the pipe closes or a request
// fails. Between requests it waits for the next one's first byte
// holding no buffer: its reader (4 KiB), writer (16 KiB) and body
// buffer (32 KiB) are taken for each request and given back once it is
// answered, so that an idle connection, kept for its client's next
// request or pooled, keeps none of them.
func (h *h2Conn) serve() {
	defer close(h.done)
	h.in.c = h.end
	var br *bufio.Reader
	for {
		if br == nil {
			if _, err := io.ReadFull(h.end, h.in.first[:]); err != nil {
				h.end.Close()
				return
			}
			h.in.has = true
			br = h2ReadBufs.Get().(*bufio.Reader)
			br.Reset(&h.in)
		}
		req, err := http.ReadRequest(br)
		if err != nil {
			h.end.Close()
			return
		}
		bw := h2WriteBufs.Get().(*bufio.Writer)
		bw.Reset(h.end)
		buf := h2BodyBufs.Get().(*[]byte)
		err = h.roundTrip(req, bw, *buf)
		bw.Reset(nil)
		h2WriteBufs.Put(bw)
		h2BodyBufs.Put(buf)
		if err != nil {
			h.fail(err)
			return
		}
		// The exchange reads the response to its end before it writes
		// the next request: what the origin did not read of this body
		// is dropped.
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
		if br.Buffered() == 0 && !h.in.has {
			br.Reset(nil)
			h2ReadBufs.Put(br)
			br = nil
		}
	}
}

// http11Required reports whether the bridge ended because the origin
// reset the request's stream with HTTP_1_1_REQUIRED.
func (h *h2Conn) http11Required() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return errors.Is(h.err, ErrHTTP11Required)
}

// errH2Unusable is a kept or pooled HTTP/2 connection that takes no new
// request (the origin sent GOAWAY, or it failed).
var errH2Unusable = errors.New("origin: the origin's HTTP/2 connection takes no new request")

// roundTrip sends req on the HTTP/2 connection and renders its response
// to bw, its body copied through buf. An error ends the bridge (the
// pipe closes): before the response head, the exchange reads it as an
// HTTP/1.1 connection closed without a response (errUpstreamClosed:
// an idempotent request on a kept or pooled connection is sent again on
// a fresh one, as after an HTTP/1.1 origin closed it, and the answer is
// 502); in the body, as the error it is.
func (h *h2Conn) roundTrip(req *http.Request, bw *bufio.Writer, buf []byte) error {
	if !h.cc.CanTakeNewRequest() {
		return errH2Unusable
	}
	fromH1(req, h.name)
	// The informational answers (100 Continue, 103 Early Hints) go to
	// the exchange as they come, as an HTTP/1.1 origin's would: the
	// transport calls back on its reader while RoundTrip waits.
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, hdr textproto.MIMEHeader) error {
		writeStatusLine(bw, code)
		http.Header(hdr).Write(bw)
		bw.WriteString("\r\n")
		return bw.Flush()
	}}
	req = req.WithContext(httptrace.WithClientTrace(h.ctx, trace))
	resp, err := h.cc.RoundTrip(req)
	if err != nil {
		var se http2.StreamError
		if errors.As(err, &se) && se.Code == http2.ErrCodeHTTP11Required {
			err = ErrHTTP11Required
		}
		return fmt.Errorf("origin: HTTP/2 request to %s: %w", h.name, err)
	}
	defer resp.Body.Close()
	return writeH1Response(bw, resp, req.Method == http.MethodHead, buf)
}

// fromH1 makes req, as http.ReadRequest read it from the exchange's
// HTTP/1.1 head, an HTTP/2 client request: an absolute https URL, and
// none of the connection-specific fields HTTP/2 forbids (RFC 9113
// §8.2.2), and TE: trailers.
func fromH1(req *http.Request, name string) {
	req.RequestURI = ""
	req.URL.Scheme = "https"
	req.URL.Host = req.Host
	if req.URL.Host == "" {
		req.URL.Host = name
	}
	for _, f := range req.Header["Connection"] {
		for n := range strings.SplitSeq(f, ",") {
			req.Header.Del(strings.TrimSpace(n))
		}
	}
	for _, n := range []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Upgrade"} {
		req.Header.Del(n)
	}
	// rustle relays the trailers of every response, and gRPC servers
	// ask for the field: "TE: trailers", which the front-ends drop with
	// the client's other hop-by-hop fields, is said on every request.
	req.Header.Set("Te", "trailers")
	req.Close = false
}

// writeH1Response renders resp, an HTTP/2 response, as an HTTP/1.1 one:
// its body by Content-Length when the origin gave one and declared no
// trailers, else chunked with the trailers the origin sent at its end
// (declared or not); no body to a HEAD (noBody), or for a 1xx, 204 or
// 304. buf carries the body.
func writeH1Response(bw *bufio.Writer, resp *http.Response, noBody bool, buf []byte) error {
	st := resp.StatusCode
	noBody = noBody || st < 200 || st == 204 || st == 304
	chunked := !noBody && (resp.ContentLength < 0 || len(resp.Trailer) > 0)
	writeStatusLine(bw, st)
	resp.Header.Del("Content-Length")
	resp.Header.Del("Transfer-Encoding")
	resp.Header.Del("Trailer")
	resp.Header.Write(bw)
	if len(resp.Trailer) > 0 && chunked {
		names := make([]string, 0, len(resp.Trailer))
		for n := range resp.Trailer {
			names = append(names, n)
		}
		bw.WriteString("Trailer: " + strings.Join(names, ", ") + "\r\n")
	}
	switch {
	case chunked:
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	case !noBody || resp.ContentLength > 0:
		bw.WriteString("Content-Length: " + strconv.FormatInt(max(resp.ContentLength, 0), 10) + "\r\n")
	}
	bw.WriteString("\r\n")
	if err := bw.Flush(); err != nil {
		return err
	}
	if noBody {
		return nil
	}
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if chunked {
				bw.WriteString(strconv.FormatInt(int64(n), 16))
				bw.WriteString("\r\n")
			}
			bw.Write(buf[:n])
			if chunked {
				bw.WriteString("\r\n")
			}
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("origin: HTTP/2 response body: %w", rerr)
		}
	}
	if chunked {
		bw.WriteString("0\r\n")
		for n, vs := range resp.Trailer {
			n = textproto.CanonicalMIMEHeaderKey(n)
			for _, v := range vs {
				bw.WriteString(n + ": " + v + "\r\n")
			}
		}
		bw.WriteString("\r\n")
	}
	return bw.Flush()
}

// writeStatusLine writes an HTTP/1.1 status line for code.
func writeStatusLine(bw *bufio.Writer, code int) {
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(code))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(code))
	bw.WriteString("\r\n")
}
