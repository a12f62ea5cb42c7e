package main

import (
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
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
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
	if d.tlsConf == nil {
		return nil, nil, errors.New("load: HTTP/2 needs -tls")
	}
	c, err := d.dialConn(ctx)
	if err != nil {
		return nil, nil, err
	}
	addr := d.target
	if d.proxy != "" {
		addr = d.proxy
	}
	if p := c.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "h2" {
		c.Close()
		return nil, nil, fmt.Errorf("%w: %s chose %q", errNoH2, addr, p)
	}
	cc, err := h2Transport.NewClientConn(c)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("HTTP/2 connection to %s: %w", addr, err)
	}
	return cc, c, nil
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
	duration := fs.Duration("duration", 10*time.Second, "measuring window")
	reqTimeout := fs.Duration("req-timeout", 10*time.Second, "a response not complete after this long counts as a timeout")
	fs.Parse(args)
	if *target == "" || *conns < 1 {
		return errors.New("h2: -target and -conns >= 1 are required")
	}
	*df.h2 = true
	d, err := df.dialer(*target, *reqTimeout)
	if err != nil {
		return fmt.Errorf("h2: %w", err)
	}
	req, err := h2Request(d, *path)
	if err != nil {
		return fmt.Errorf("h2: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration+2**reqTimeout)
	defer cancel()

	start := time.Now()
	end := start.Add(*duration)
	results := make([]counts, *conns)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { h2Worker(ctx, d, req, *newConn, end, *reqTimeout, &results[i]) })
	}
	wg.Wait()
	elapsed := min(time.Since(start), *duration)

	var total counts
	for i := range results {
		total.merge(&results[i])
	}
	res := HTTPResult{Conns: *conns, Handshakes: d.handshakes.Load(), Resumed: d.resumed.Load()}
	res.Requests, res.Bytes, res.Errors = total.requests, total.bytes, total.errs
	res.DurationUS = elapsed.Microseconds()
	res.LatencyP50US, res.LatencyP99US, res.LatencyMaxUS = total.percentiles()
	if total.firstErr != nil {
		res.FirstError = total.firstErr.Error()
	}
	return printMarked(res)
}

// h2Request builds the request every worker sends: through a proxy a
// forwarded request (:scheme http, :authority the origin) with
// Proxy-Authorization, straight to the origin an https request.
func h2Request(d dialer, path string) (*http.Request, error) {
	u := "https://" + d.target + path
	if d.proxy != "" {
		u = "http://" + d.target + path
	}
	req, err := http.NewRequest("GET", u, nil)
	if err != nil {
		return nil, fmt.Errorf("request %s: %w", u, err)
	}
	if d.proxy != "" && d.authHeader != "" {
		req.Header.Set("Proxy-Authorization", d.authHeader)
	}
	return req, nil
}

// h2Worker sends req on one HTTP/2 connection, one request at a time,
// until end, reconnecting after an error (and after every response with
// newConn), and counts into c as wrk does: a request counts once its
// response is complete before end; a request cut by end counts nothing.
// Bytes are response body bytes (HTTP/2 headers are compressed).
func h2Worker(ctx context.Context, d dialer, req *http.Request, newConn bool, end time.Time, reqTimeout time.Duration, c *counts) {
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var cc *http2.ClientConn
	defer func() {
		if cc != nil {
			cc.Close()
		}
	}()
	buf := make([]byte, 64<<10)
	for time.Now().Before(end) && ctx.Err() == nil {
		start := time.Now()
		if cc == nil {
			var err error
			cc, _, err = d.dialH2(ctx)
			if err != nil {
				cc = nil
				if time.Now().Before(end) {
					c.fail(&c.errs.Connect, err)
					sleep(ctx, 10*time.Millisecond)
				}
				continue
			}
		}
		rctx, rcancel := context.WithDeadline(ctx, earliest(start.Add(reqTimeout), end))
		status, n, err := h2Exchange(rctx, cc, req, buf)
		rcancel()
		switch {
		case err != nil && !time.Now().Before(end):
			return // cut by the end of the run
		case errors.Is(err, context.DeadlineExceeded):
			c.fail(&c.errs.Timeout, err)
		case err != nil:
			c.fail(&c.errs.Read, err)
		default:
			c.requests++
			c.bytes += n
			c.latencies = append(c.latencies, time.Since(start))
			if status > 399 {
				c.fail(&c.errs.Status, fmt.Errorf("status %d", status))
			}
		}
		if err != nil || newConn {
			cc.Close()
			cc = nil
		}
	}
}

// h2Exchange sends req on cc and reads the whole response body into buf,
// returning the status and the body bytes.
func h2Exchange(ctx context.Context, cc *http2.ClientConn, req *http.Request, buf []byte) (int, int64, error) {
	resp, err := cc.RoundTrip(req.WithContext(ctx))
	if err != nil {
		return 0, 0, fmt.Errorf("HTTP/2 request: %w", err)
	}
	defer resp.Body.Close()
	var n int64
	for {
		m, err := resp.Body.Read(buf)
		n += int64(m)
		if err == io.EOF {
			break
		}
		if err != nil {
			return resp.StatusCode, n, fmt.Errorf("read HTTP/2 response body: %w", err)
		}
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return resp.StatusCode, n, fmt.Errorf("load: HTTP/2 response body of %d bytes, content-length %d", n, resp.ContentLength)
	}
	return resp.StatusCode, n, nil
}
