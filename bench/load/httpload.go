package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
)

// HTTPResult is what "load http" prints after report.WrkMarker: wrk's
// figures, so that report.ParseWrk reads it like a wrk run, and the TLS
// handshake counts.
type HTTPResult struct {
	report.WrkResult
	Conns      int    `json:"conns"`
	FirstError string `json:"first_error,omitempty"`
	// Handshakes counts TLS handshakes, Resumed those that resumed a
	// session.
	Handshakes int64 `json:"tls_handshakes"`
	Resumed    int64 `json:"tls_resumed"`
	// Curves counts the handshakes by key exchange; Cert is the key of
	// the server's certificate ("ECDSA P-256"). Both empty without TLS.
	Curves map[string]int64 `json:"tls_curves,omitempty"`
	Cert   string           `json:"tls_cert,omitempty"`
}

// counts are one worker's tallies, merged once the run ends.
type counts struct {
	requests, bytes int64
	errs            report.WrkErrors
	firstErr        error
	latencies       []time.Duration
}

func (c *counts) fail(n *int64, err error) {
	*n++
	if c.firstErr == nil {
		c.firstErr = err
	}
}

// complete counts a request whose response is complete: its n bytes,
// its latency since start, and a status above 399 as an error.
func (c *counts) complete(start time.Time, status int, n int64) {
	c.requests++
	c.bytes += n
	c.latencies = append(c.latencies, time.Since(start))
	if status > 399 {
		c.fail(&c.errs.Status, fmt.Errorf("status %d", status))
	}
}

// record counts the outcome of an exchange begun at start and not cut by
// the end of the run: by err a timeout, a failed write or a failed read;
// without one a complete response (see complete).
func (c *counts) record(start time.Time, status int, n int64, err error) {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.fail(&c.errs.Timeout, err)
	case errors.Is(err, errWrite):
		c.fail(&c.errs.Write, err)
	case err != nil:
		c.fail(&c.errs.Read, err)
	default:
		c.complete(start, status, n)
	}
}

// merge adds o into c.
func (c *counts) merge(o *counts) {
	c.requests += o.requests
	c.bytes += o.bytes
	c.errs.Connect += o.errs.Connect
	c.errs.Read += o.errs.Read
	c.errs.Write += o.errs.Write
	c.errs.Status += o.errs.Status
	c.errs.Timeout += o.errs.Timeout
	if c.firstErr == nil {
		c.firstErr = o.firstErr
	}
	c.latencies = append(c.latencies, o.latencies...)
}

// percentiles returns the 50th and 99th percentile and the maximum of the
// latencies in microseconds (zero without any), sorting them in place.
func (c *counts) percentiles() (p50, p99, maxUS int64) {
	l := c.latencies
	if len(l) == 0 {
		return 0, 0, 0
	}
	slices.Sort(l)
	at := func(q float64) int64 {
		i := int(q * float64(len(l)-1))
		return l[i].Microseconds()
	}
	return at(0.50), at(0.99), l[len(l)-1].Microseconds()
}

func runHTTP(args []string) error {
	fs := flag.NewFlagSet("http", flag.ExitOnError)
	df := addDialFlags(fs)
	target := fs.String("target", "", "origin `host:port` the requests are for")
	path := fs.String("path", "/1k", "request `path`")
	conns := fs.Int("conns", 16, "connections, each sending one request after the other")
	newConn := fs.Bool("newconn", false, "one request per connection: send \"Connection: close\" and open a new connection for the next")
	duration := fs.Duration("duration", 10*time.Second, "measuring window")
	reqTimeout := fs.Duration("req-timeout", 10*time.Second, "a response not complete after this long counts as a timeout")
	rf := addRateFlags(fs)
	fs.Parse(args)
	if *target == "" || *conns < 1 {
		return errors.New("http: -target and -conns >= 1 are required")
	}
	d, err := df.dialer(*target, *reqTimeout)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	req := httpRequest(d, *path, *newConn)
	if rated, err := rf.check(); rated || err != nil {
		if err != nil {
			return fmt.Errorf("http: %w", err)
		}
		if d.inner != nil || d.altHost != "" {
			return errors.New("http: -rate is not for -https through a proxy or -alt-host")
		}
		return runRated(rf.run("http", *conns, *duration, *reqTimeout, d, func() rateSlot {
			return &httpSlot{d: d, req: req, newConn: *newConn}
		}))
	}
	results := make([]counts, *conns)
	elapsed := runWindow(*duration, 2**reqTimeout, *conns, func(ctx context.Context, end time.Time, i int) {
		httpWorker(ctx, d, req, *newConn, end, *reqTimeout, &results[i])
	})

	res := httpResult(*conns, results, elapsed)
	res.Handshakes, res.Resumed = d.handshakes.Load(), d.resumed.Load()
	res.Curves, res.Cert = d.seen.result()
	return printMarked(res)
}

// httpResult sums the counts of a run of conns connections over elapsed
// into its result, the TLS figures left for the caller.
func httpResult(conns int, results []counts, elapsed time.Duration) HTTPResult {
	var total counts
	for i := range results {
		total.merge(&results[i])
	}
	res := HTTPResult{Conns: conns}
	res.Requests, res.Bytes, res.Errors = total.requests, total.bytes, total.errs
	res.DurationUS = elapsed.Microseconds()
	res.LatencyP50US, res.LatencyP99US, res.LatencyMaxUS = total.percentiles()
	if total.firstErr != nil {
		res.FirstError = total.firstErr.Error()
	}
	return res
}

// httpRequest formats the request once: absolute form with
// Proxy-Authorization through a proxy, origin form straight to the origin
// or inside a CONNECT tunnel (-https through a proxy).
func httpRequest(d dialer, path string, newConn bool) []byte {
	var b bytes.Buffer
	if d.proxy != "" && d.inner == nil {
		b.WriteString("GET http://" + d.target + path + " HTTP/1.1\r\nHost: " + d.target + "\r\n")
		if d.authHeader != "" {
			b.WriteString("Proxy-Authorization: " + d.authHeader + "\r\n")
		}
	} else {
		b.WriteString("GET " + path + " HTTP/1.1\r\nHost: " + d.target + "\r\n")
	}
	if newConn {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// httpWorker sends req on one connection after the other until end,
// reconnecting when the connection closes (after every response with
// newConn), and counts into c as wrk does: a request counts once its
// response is complete before end; a request cut by end counts nothing.
func httpWorker(ctx context.Context, d dialer, req []byte, newConn bool, end time.Time, reqTimeout time.Duration, c *counts) {
	// Connection attempts end with the window too.
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	var conn net.Conn
	var br *bufio.Reader
	cur := req // the request for the authority conn names
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	for time.Now().Before(end) && ctx.Err() == nil {
		start := time.Now()
		if conn == nil {
			var err error
			var auth string
			conn, auth, err = d.dialHTTP(ctx)
			cur = req
			if auth != d.target {
				cur = bytes.ReplaceAll(req, []byte(d.target), []byte(auth))
			}
			if err != nil {
				if time.Now().Before(end) {
					c.fail(&c.errs.Connect, err)
					sleep(ctx, 10*time.Millisecond)
				}
				continue
			}
			br = bufio.NewReaderSize(conn, 64<<10)
		}
		conn.SetDeadline(earliest(start.Add(reqTimeout), end))
		status, n, closed, err := exchange(conn, br, cur)
		if err != nil && time.Now().After(end) {
			return // cut by the end of the run
		}
		c.record(start, status, n, err)
		if err != nil || closed || newConn {
			conn.Close()
			conn = nil
		}
	}
}

// getRequests sends GETs for url on rt (an HTTP/2 or HTTP/3 client
// connection, proto naming which) one after the other until end or an
// error (or after one with once), counting into c; alive, where not nil,
// says whether rt's connection still takes requests. It reports whether
// a request failed, after which the caller closes the connection.
func getRequests(ctx context.Context, rt http.RoundTripper, alive func() bool, proto, url, authz string, once bool, end time.Time, reqTimeout time.Duration, c *counts) (failed bool) {
	buf := make([]byte, 32<<10)
	for time.Now().Before(end) && ctx.Err() == nil && (alive == nil || alive()) {
		start := time.Now()
		rctx, rcancel := context.WithDeadline(ctx, earliest(start.Add(reqTimeout), end))
		status, n, err := getBody(rctx, rt, proto, url, authz, buf)
		timedOut := errors.Is(rctx.Err(), context.DeadlineExceeded)
		rcancel()
		switch {
		case err != nil && !time.Now().Before(end):
			return false // cut by the end of the run
		case err != nil && timedOut:
			c.fail(&c.errs.Timeout, err)
		case err != nil:
			c.fail(&c.errs.Read, err)
		default:
			c.complete(start, status, n)
		}
		if err != nil || once {
			return err != nil
		}
	}
	return false
}

// getBody sends one GET for url on rt, with Proxy-Authorization authz
// where not empty, and reads the response body to its end through buf.
// proto names the protocol in the error of a body cut short.
func getBody(ctx context.Context, rt http.RoundTripper, proto, url, authz string, buf []byte) (int, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	if authz != "" {
		req.Header["Proxy-Authorization"] = []string{authz}
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
	if err != nil {
		return resp.StatusCode, n, fmt.Errorf("%s: read the body: %w", proto, err)
	}
	return resp.StatusCode, n, nil
}

// errWrite marks a failure to send a request.
var errWrite = errors.New("load: write request")

// exchange sends req and reads one response, discarding the body. It
// returns the status, the bytes read, and whether the server closes the
// connection after it.
func exchange(conn net.Conn, br *bufio.Reader, req []byte) (status int, n int64, closed bool, err error) {
	if _, err := conn.Write(req); err != nil {
		return 0, 0, false, fmt.Errorf("%w: %w", errWrite, err)
	}
	status, n, length, closed, err := readHead(br)
	if err != nil {
		return 0, n, false, err
	}
	if length < 0 {
		if !closed {
			return status, n, false, errors.New("load: response without Content-Length on a kept-alive connection")
		}
		m, err := io.Copy(io.Discard, br)
		return status, n + m, true, err
	}
	m, err := br.Discard(int(length))
	n += int64(m)
	if err != nil {
		return status, n, false, fmt.Errorf("read body: %w", err)
	}
	return status, n, closed, nil
}

// readHead reads a response head: the status, the bytes read, the
// Content-Length (-1 without one) and whether the server closes the
// connection ("Connection: close", or HTTP/1.0 without keep-alive).
func readHead(br *bufio.Reader) (status int, n, length int64, closed bool, err error) {
	length = -1
	line, err := br.ReadSlice('\n')
	n += int64(len(line))
	if err != nil {
		return 0, n, length, false, fmt.Errorf("read status line: %w", err)
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return 0, n, length, false, fmt.Errorf("load: bad status line %q", line)
	}
	closed = line[7] == '0'
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, n, length, false, fmt.Errorf("load: bad status line %q", line)
	}
	for i := 0; ; i++ {
		if i == 100 {
			return status, n, length, closed, errors.New("load: more than 100 response headers")
		}
		h, err := br.ReadSlice('\n')
		n += int64(len(h))
		if err != nil {
			return status, n, length, closed, fmt.Errorf("read headers: %w", err)
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			return status, n, length, closed, nil
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.ParseInt(string(value), 10, 64); err != nil || length < 0 {
				return status, n, -1, closed, fmt.Errorf("load: bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Connection")), bytes.EqualFold(name, []byte("Proxy-Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				closed = true
			} else if bytes.EqualFold(value, []byte("keep-alive")) {
				closed = false
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return status, n, length, closed, errors.New("load: chunked response not supported")
		}
	}
}

// runWindow runs work(ctx, end, i) for each i under workers, each in a
// goroutine of its own, over a measuring window of duration from now
// that ends at end, their ctx ending grace after it. It returns the time
// the window took, at most duration.
func runWindow(duration, grace time.Duration, workers int, work func(ctx context.Context, end time.Time, i int)) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), duration+grace)
	defer cancel()
	start := time.Now()
	end := start.Add(duration)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() { work(ctx, end, i) })
	}
	wg.Wait()
	return min(time.Since(start), duration)
}

// earliest returns the earlier of a and b.
func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// printMarked prints v as one JSON line after report.WrkMarker.
func printMarked(v any) error {
	os.Stdout.WriteString(report.WrkMarker)
	return printJSON(v)
}
