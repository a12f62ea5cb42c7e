package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// H2SinkPath is the origin's HTTP/2 sink: a POST there is counted into
// the sink's byte counter. Without a proxy, "load bulk -h2" streams
// through POST requests to it, the closest a client gets to a CONNECT
// stream with nobody in between.
const H2SinkPath = "/_sink"

// errNoH2 is returned when the server does not choose "h2" with ALPN.
var errNoH2 = errors.New("load: server did not negotiate HTTP/2")

// h2Transport holds the settings of every HTTP/2 client connection
// (x/net/http2's defaults: 16 KiB frames, 4 MiB stream receive window);
// its pool is unused, each connection comes from NewClientConn.
var h2Transport = &http2.Transport{}

// dialH2 opens a TLS connection offering only "h2" to the proxy (or to the
// target without a proxy) and starts an HTTP/2 client connection on it.
func (d dialer) dialH2(ctx context.Context) (*http2.ClientConn, net.Conn, error) {
	c, err := d.dialH2Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	cc, err := h2Transport.NewClientConn(c)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("HTTP/2 connection to %s: %w", d.firstHop(), err)
	}
	return cc, c, nil
}

// dialH2Conn opens a TLS connection to the proxy (or to the target without
// a proxy) and checks that the server chose "h2" with ALPN.
func (d dialer) dialH2Conn(ctx context.Context) (net.Conn, error) {
	if d.tlsConf == nil {
		return nil, errors.New("load: HTTP/2 needs -tls")
	}
	c, err := d.dialConn(ctx)
	if err != nil {
		return nil, err
	}
	if p := c.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		return nil, fmt.Errorf("%w: %s chose %q", errNoH2, d.firstHop(), p)
	}
	return c, nil
}

// h2Stream is a tunnel over one HTTP/2 stream of its own connection: a
// CONNECT stream through a proxy, a POST stream to the origin's sink
// without one. Writes go into the request body, reads come from the
// response body. A deadline that passes ends the stream (it cannot be
// used afterwards); reads and writes cut by it return an error wrapping
// os.ErrDeadlineExceeded.
type h2Stream struct {
	net.Conn // the TLS connection, for its addresses
	cc       *http2.ClientConn
	pr       *io.PipeReader // the request body, read by the transport
	pw       *io.PipeWriter
	body     io.ReadCloser

	expired atomic.Bool
	mu      sync.Mutex
	timer   *time.Timer // guarded by mu
	closed  sync.Once
}

// dialH2Stream opens the connection and its one stream, and waits for the
// answer: 200 for a tunnel.
func (d dialer) dialH2Stream(ctx context.Context) (*h2Stream, error) {
	cc, c, err := d.dialH2(ctx)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	// The request's context governs the stream's whole life, so the wait
	// for the answer is bounded by closing the connection instead.
	req, err := http.NewRequestWithContext(context.Background(), "POST", "https://"+d.target+H2SinkPath, pr)
	if err != nil {
		cc.Close()
		return nil, err
	}
	if d.proxy != "" {
		req.Method, req.URL, req.Host = "CONNECT", &url.URL{Host: d.target}, d.target
		if d.authHeader != "" {
			req.Header.Set("Proxy-Authorization", d.authHeader)
		}
	}
	t := time.AfterFunc(d.timeout, func() { cc.Close() })
	stop := context.AfterFunc(ctx, func() { cc.Close() })
	resp, err := cc.RoundTrip(req)
	t.Stop()
	stop()
	if err != nil {
		pw.Close()
		cc.Close()
		return nil, fmt.Errorf("%s %s over HTTP/2: %w", req.Method, d.target, err)
	}
	if resp.StatusCode != 200 {
		resp.Body.Close()
		pw.Close()
		cc.Close()
		return nil, fmt.Errorf("%w: %s answered %d over HTTP/2", errStatus, req.Method, resp.StatusCode)
	}
	return &h2Stream{Conn: c, cc: cc, pr: pr, pw: pw, body: resp.Body}, nil
}

func (s *h2Stream) Read(p []byte) (int, error) {
	n, err := s.body.Read(p)
	if err != nil && s.expired.Load() {
		err = fmt.Errorf("read HTTP/2 stream: %w", os.ErrDeadlineExceeded)
	}
	return n, err
}

func (s *h2Stream) Write(p []byte) (int, error) {
	n, err := s.pw.Write(p)
	if err != nil && s.expired.Load() {
		err = fmt.Errorf("write HTTP/2 stream: %w", os.ErrDeadlineExceeded)
	}
	return n, err
}

// SetDeadline arms (or, with the zero time, disarms) the stream's one
// deadline, for reads and writes alike.
func (s *h2Stream) SetDeadline(t time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if !t.IsZero() {
		s.timer = time.AfterFunc(time.Until(t), s.expire)
	}
	return nil
}

// SetReadDeadline is SetDeadline: the stream has one deadline.
func (s *h2Stream) SetReadDeadline(t time.Time) error { return s.SetDeadline(t) }

// SetWriteDeadline is SetDeadline: the stream has one deadline.
func (s *h2Stream) SetWriteDeadline(t time.Time) error { return s.SetDeadline(t) }

// expire ends the stream when its deadline passes, unblocking a read or
// a write in progress.
func (s *h2Stream) expire() {
	s.expired.Store(true)
	s.pr.CloseWithError(os.ErrDeadlineExceeded)
	s.body.Close()
}

// Close ends the stream and its connection.
func (s *h2Stream) Close() error {
	s.closed.Do(func() {
		s.SetDeadline(time.Time{})
		s.pw.Close()
		s.body.Close()
		s.cc.Close()
	})
	return nil
}

func runH2(args []string) error {
	fs := flag.NewFlagSet("h2", flag.ExitOnError)
	df := addDialFlags(fs)
	target := fs.String("target", "", "origin `host:port` the requests are for")
	path := fs.String("path", "/1k", "request `path`")
	conns := fs.Int("conns", 16, "HTTP/2 connections, each sending one request after the other on one stream at a time")
	newConn := fs.Bool("newconn", false, "one request per connection: close it after the response and open a new one for the next")
	inflight := fs.Int("inflight", 1, "requests in flight on each connection (more than 1: x/net/http2's client, each request on a stream of its own)")
	duration := fs.Duration("duration", 10*time.Second, "measuring window")
	reqTimeout := fs.Duration("req-timeout", 10*time.Second, "a response not complete after this long counts as a timeout")
	rf := addRateFlags(fs)
	fs.Parse(args)
	if *target == "" || *conns < 1 || *inflight < 1 {
		return errors.New("h2: -target, -conns >= 1 and -inflight >= 1 are required")
	}
	if *newConn && *inflight > 1 {
		return errors.New("h2: -newconn sends one request per connection: -inflight must be 1")
	}
	*df.h2 = true
	d, err := df.dialer(*target, *reqTimeout)
	if err != nil {
		return fmt.Errorf("h2: %w", err)
	}
	fields := h2Fields(d, *path)
	if rated, err := rf.check(); rated || err != nil {
		if err != nil {
			return fmt.Errorf("h2: %w", err)
		}
		return runRated(rf.run("h2", *conns, *duration, *reqTimeout, d, func() rateSlot {
			return &h2Slot{d: d, fields: fields, newConn: *newConn}
		}))
	}
	results := make([]counts, *conns**inflight)
	elapsed := runWindow(*duration, 2**reqTimeout, *conns, func(ctx context.Context, end time.Time, i int) {
		if *inflight > 1 {
			h2MultiWorker(ctx, d, *path, end, *reqTimeout, results[i**inflight:(i+1)**inflight])
			return
		}
		h2Worker(ctx, d, fields, *newConn, end, *reqTimeout, &results[i])
	})

	res := httpResult(*conns, results, elapsed)
	res.Handshakes, res.Resumed = d.handshakes.Load(), d.resumed.Load()
	res.Curves, res.Cert = d.seen.result()
	return printMarked(res)
}

// h2Fields returns the header fields of the request every worker sends:
// through a proxy a forwarded request (:scheme http, :authority the
// origin) with Proxy-Authorization, straight to the origin an https
// request.
func h2Fields(d dialer, path string) []hpack.HeaderField {
	scheme := "https"
	if d.proxy != "" {
		scheme = "http"
	}
	f := []hpack.HeaderField{
		{Name: ":method", Value: "GET"},
		{Name: ":scheme", Value: scheme},
		{Name: ":authority", Value: d.target},
		{Name: ":path", Value: path},
	}
	if d.proxy != "" && d.authHeader != "" {
		f = append(f, hpack.HeaderField{Name: "proxy-authorization", Value: d.authHeader})
	}
	return f
}

// h2Worker sends the request of fields on one HTTP/2 connection, one
// request at a time, until end, reconnecting after an error (and after
// every response with newConn), and counts into c as wrk does: a request
// counts once its response is complete before end; a request cut by end
// counts nothing. Bytes are response body bytes (HTTP/2 headers are
// compressed).
func h2Worker(ctx context.Context, d dialer, fields []hpack.HeaderField, newConn bool, end time.Time, reqTimeout time.Duration, c *counts) {
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var cl *h2Client
	defer func() {
		if cl != nil {
			cl.conn.Close()
		}
	}()
	for time.Now().Before(end) && ctx.Err() == nil {
		start := time.Now()
		if cl == nil {
			var err error
			cl, err = d.dialH2Client(ctx)
			if err != nil {
				cl = nil
				if time.Now().Before(end) {
					c.fail(&c.errs.Connect, err)
					sleep(ctx, 10*time.Millisecond)
				}
				continue
			}
		}
		cl.conn.SetDeadline(earliest(start.Add(reqTimeout), end))
		status, n, err := cl.get(fields)
		if err != nil && !time.Now().Before(end) {
			return // cut by the end of the run
		}
		c.record(start, status, n, err)
		if err != nil || newConn || cl.done() {
			cl.conn.Close()
			cl = nil
		}
	}
}

// h2MultiWorker sends GETs of path on one HTTP/2 connection (x/net/http2's
// ClientConn), len(c) at a time, each in a goroutine counting into its own
// c[i], until end, and dials again when a request fails (closing the
// connection for the others too). It counts as h2Worker does.
func h2MultiWorker(ctx context.Context, d dialer, path string, end time.Time, reqTimeout time.Duration, c []counts) {
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	url := d.getURL(path)
	for time.Now().Before(end) && ctx.Err() == nil {
		cc, conn, err := d.dialH2(ctx)
		if err != nil {
			if time.Now().Before(end) {
				c[0].fail(&c[0].errs.Connect, err)
				sleep(ctx, 10*time.Millisecond)
			}
			continue
		}
		var wg sync.WaitGroup
		for i := range c {
			wg.Go(func() {
				if getRequests(ctx, cc, nil, "h2", url, d.authHeader, false, end, reqTimeout, &c[i]) {
					conn.Close() // the others dial again with this one
				}
			})
		}
		wg.Wait()
		conn.Close()
	}
}

// Receive windows "load h2" advertises, as x/net/http2's client does: 4
// MiB per stream, 1 GiB for the connection.
const (
	h2StreamWindow = 4 << 20
	h2ConnWindow   = 1 << 30
)

// errH2Stream is returned when the server ends a request's stream or the
// connection without a complete response.
var errH2Stream = errors.New("load: HTTP/2 stream ended without a complete response")

// h2Client is the HTTP/2 client connection of "load h2": one GET at a
// time, written and read on the caller's goroutine with x/net/http2's
// Framer and HPACK, so that a request costs the load core no goroutine
// and no channel (x/net/http2's ClientConn costs about twice as much per
// request). It answers SETTINGS and PING, returns flow-control credit
// for what it reads, and stops at GOAWAY. It is owned by one worker.
type h2Client struct {
	conn net.Conn
	bw   *bufio.Writer
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder // writes into hbuf
	// nextID is the next stream's ID; goaway is set once the server said
	// it takes no new stream.
	nextID uint32
	goaway bool
	// connUnacked counts DATA bytes received and not yet returned with a
	// connection WINDOW_UPDATE.
	connUnacked uint32
}

// dialH2Client opens a TLS connection offering only "h2" to the proxy (or
// to the target) and sends the client preface, SETTINGS and the
// connection window.
func (d dialer) dialH2Client(ctx context.Context) (*h2Client, error) {
	c, err := d.dialH2Conn(ctx)
	if err != nil {
		return nil, err
	}
	cl := &h2Client{conn: c, bw: bufio.NewWriterSize(c, 4<<10), nextID: 1}
	cl.fr = http2.NewFramer(cl.bw, bufio.NewReaderSize(c, 64<<10))
	cl.fr.SetReuseFrames()
	cl.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	cl.enc = hpack.NewEncoder(&cl.hbuf)
	c.SetDeadline(time.Now().Add(d.timeout))
	cl.bw.WriteString(http2.ClientPreface)
	cl.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2StreamWindow},
	)
	cl.fr.WriteWindowUpdate(0, h2ConnWindow-65535)
	if err := cl.bw.Flush(); err != nil {
		c.Close()
		return nil, fmt.Errorf("send HTTP/2 preface to %s: %w", d.firstHop(), err)
	}
	c.SetDeadline(time.Time{})
	return cl, nil
}

// done reports whether the connection can carry no further request.
func (cl *h2Client) done() bool { return cl.goaway || cl.nextID > 1<<31-1 }

// get sends one GET with fields on a new stream and reads the response,
// returning its status and the body bytes. A body shorter or longer than
// its content-length is an error.
func (cl *h2Client) get(fields []hpack.HeaderField) (status int, n int64, err error) {
	id := cl.nextID
	cl.nextID += 2
	cl.hbuf.Reset()
	for _, f := range fields {
		cl.enc.WriteField(f)
	}
	cl.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: cl.hbuf.Bytes(), EndStream: true, EndHeaders: true})
	if err := cl.bw.Flush(); err != nil {
		return 0, 0, fmt.Errorf("%w: %w", errWrite, err)
	}
	length := int64(-1)
	var streamUnacked uint32
	for {
		f, err := cl.fr.ReadFrame()
		if err != nil {
			return status, n, fmt.Errorf("read HTTP/2 frame: %w", err)
		}
		ended := false
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			if status == 0 {
				s, err := strconv.Atoi(f.PseudoValue("status"))
				if err != nil {
					return 0, n, fmt.Errorf("load: HTTP/2 response with :status %q", f.PseudoValue("status"))
				}
				if s >= 200 {
					status = s
				}
				for _, hf := range f.RegularFields() {
					if hf.Name == "content-length" {
						length, _ = strconv.ParseInt(hf.Value, 10, 64)
					}
				}
			}
			ended = f.StreamEnded()
		case *http2.DataFrame:
			// Flow control counts the whole payload, padding included.
			cl.connUnacked += f.Length
			if cl.connUnacked >= h2ConnWindow/2 {
				cl.fr.WriteWindowUpdate(0, cl.connUnacked)
				cl.connUnacked = 0
			}
			if f.StreamID == id {
				n += int64(len(f.Data()))
				ended = f.StreamEnded()
				streamUnacked += f.Length
				if !ended && streamUnacked >= h2StreamWindow/2 {
					cl.fr.WriteWindowUpdate(id, streamUnacked)
					streamUnacked = 0
				}
			}
			if cl.bw.Buffered() > 0 {
				if err := cl.bw.Flush(); err != nil {
					return status, n, fmt.Errorf("%w: %w", errWrite, err)
				}
			}
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			if v, ok := f.Value(http2.SettingHeaderTableSize); ok {
				cl.enc.SetMaxDynamicTableSizeLimit(v)
			}
			cl.fr.WriteSettingsAck()
			if err := cl.bw.Flush(); err != nil {
				return status, n, fmt.Errorf("%w: %w", errWrite, err)
			}
		case *http2.PingFrame:
			if f.IsAck() {
				continue
			}
			cl.fr.WritePing(true, f.Data)
			if err := cl.bw.Flush(); err != nil {
				return status, n, fmt.Errorf("%w: %w", errWrite, err)
			}
		case *http2.GoAwayFrame:
			cl.goaway = true
			if f.LastStreamID < id {
				return status, n, fmt.Errorf("%w: GOAWAY %v before stream %d", errH2Stream, f.ErrCode, id)
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				return status, n, fmt.Errorf("%w: RST_STREAM %v", errH2Stream, f.ErrCode)
			}
		}
		if ended {
			if status == 0 {
				return 0, n, fmt.Errorf("%w: no final status", errH2Stream)
			}
			if length >= 0 && n != length {
				return status, n, fmt.Errorf("load: HTTP/2 response body of %d bytes, content-length %d", n, length)
			}
			return status, n, nil
		}
	}
}
