package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// runH3 is "load h3": "load http" over HTTP/3 (quic-go's client), N QUIC
// connections to the proxy's UDP port (or to the origin's HTTP/3 listener
// without a proxy), each sending GETs one after the other, or one request
// per connection with -newconn. Counted and printed like "load http";
// bytes are response body bytes.
func runH3(args []string) error {
	fs := flag.NewFlagSet("h3", flag.ExitOnError)
	df := addDialFlags(fs)
	target := fs.String("target", "", "origin `host:port` the requests are for")
	path := fs.String("path", "/1k", "request `path`")
	conns := fs.Int("conns", 16, "QUIC connections, each sending one request after the other")
	newConn := fs.Bool("newconn", false, "one request per connection: close it after the response and open a new one for the next")
	duration := fs.Duration("duration", 10*time.Second, "measuring window")
	reqTimeout := fs.Duration("req-timeout", 10*time.Second, "a response not complete after this long counts as a timeout")
	rf := addRateFlags(fs)
	fs.Parse(args)
	if *target == "" || *conns < 1 || !*df.tls {
		return errors.New("h3: -target, -tls and -conns >= 1 are required")
	}
	d, err := df.dialer(*target, *reqTimeout)
	if err != nil {
		return fmt.Errorf("h3: %w", err)
	}
	d.tlsConf.NextProtos = []string{http3.NextProtoH3}
	url := "https://" + d.target + *path
	if d.proxy != "" {
		url = "http://" + d.target + *path // a forwarded request: :scheme http, :authority the origin
	}
	if rated, err := rf.check(); rated || err != nil {
		if err != nil {
			return fmt.Errorf("h3: %w", err)
		}
		return runRated(rf.run("h3", *conns, *duration, *reqTimeout, d, func() rateSlot {
			return &h3Slot{d: d, url: url, newConn: *newConn}
		}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), *duration+2**reqTimeout)
	defer cancel()

	start := time.Now()
	end := start.Add(*duration)
	results := make([]counts, *conns)
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() { h3Worker(ctx, d, url, *newConn, end, *reqTimeout, &results[i]) })
	}
	wg.Wait()
	elapsed := min(time.Since(start), *duration)

	var total counts
	for i := range results {
		total.merge(&results[i])
	}
	res := HTTPResult{Conns: *conns}
	res.Requests, res.Bytes, res.Errors = total.requests, total.bytes, total.errs
	res.DurationUS = elapsed.Microseconds()
	res.LatencyP50US, res.LatencyP99US, res.LatencyMaxUS = total.percentiles()
	if total.firstErr != nil {
		res.FirstError = total.firstErr.Error()
	}
	return printMarked(res)
}

// h3Worker sends GETs for url on one QUIC connection, one at a time, until
// end, reconnecting after an error (and after every response with
// newConn), and counts into c as h2Worker does.
func h3Worker(ctx context.Context, d dialer, url string, newConn bool, end time.Time, reqTimeout time.Duration, c *counts) {
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	addr := d.target
	if d.proxy != "" {
		addr = d.proxy
	}
	tr := &http3.Transport{}
	var qc *quic.Conn
	var cc *http3.ClientConn
	closeConn := func() {
		if qc != nil {
			qc.CloseWithError(0, "")
			qc, cc = nil, nil
		}
	}
	defer closeConn()
	buf := make([]byte, 32<<10)
	for time.Now().Before(end) && ctx.Err() == nil {
		start := time.Now()
		if qc == nil {
			dctx, dcancel := context.WithTimeout(ctx, d.timeout)
			var err error
			qc, err = quic.DialAddr(dctx, addr, d.tlsConf, &quic.Config{})
			dcancel()
			if err != nil {
				qc = nil
				if time.Now().Before(end) {
					c.fail(&c.errs.Connect, err)
					sleep(ctx, 10*time.Millisecond)
				}
				continue
			}
			cc = tr.NewClientConn(qc)
		}
		rctx, rcancel := context.WithDeadline(ctx, earliest(start.Add(reqTimeout), end))
		status, n, err := h3Get(rctx, cc, url, d.authHeader, buf)
		timedOut := errors.Is(rctx.Err(), context.DeadlineExceeded)
		rcancel()
		switch {
		case err != nil && !time.Now().Before(end):
			return // cut by the end of the run
		case err != nil && timedOut:
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
			closeConn()
		}
	}
}

// h3Get sends one GET on cc and reads the response body to its end.
func h3Get(ctx context.Context, cc *http3.ClientConn, url, authz string, buf []byte) (int, int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, 0, err
	}
	if authz != "" {
		req.Header["Proxy-Authorization"] = []string{authz}
	}
	resp, err := cc.RoundTrip(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.CopyBuffer(io.Discard, resp.Body, buf)
	if err != nil {
		return resp.StatusCode, n, fmt.Errorf("h3: read the body: %w", err)
	}
	return resp.StatusCode, n, nil
}

// h3Slot is a connection of "load h3 -rate": one QUIC connection with one
// request at a time, kept alive or (newConn) one per request.
type h3Slot struct {
	d       dialer
	url     string
	newConn bool
	tr      http3.Transport
	qc      *quic.Conn
	cc      *http3.ClientConn
	buf     []byte
}

func (h *h3Slot) open(ctx context.Context, _ time.Time) error {
	if h.newConn {
		return nil
	}
	return h.dial(ctx)
}

func (h *h3Slot) dial(ctx context.Context) error {
	addr := h.d.target
	if h.d.proxy != "" {
		addr = h.d.proxy
	}
	qc, err := quic.DialAddr(ctx, addr, h.d.tlsConf, &quic.Config{})
	if err != nil {
		return fmt.Errorf("%w: %w", errConnect, err)
	}
	h.qc, h.cc = qc, h.tr.NewClientConn(qc)
	return nil
}

func (h *h3Slot) exchange(ctx context.Context, deadline time.Time) (int64, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	if h.qc == nil {
		if err := h.dial(ctx); err != nil {
			return 0, err
		}
	}
	if h.buf == nil {
		h.buf = make([]byte, 32<<10)
	}
	status, n, err := h3Get(ctx, h.cc, h.url, h.d.authHeader, h.buf)
	if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("%w: %w", errTimeout, err)
	}
	if err != nil || h.newConn {
		h.close()
	}
	switch {
	case err != nil:
		return n, err
	case status > 399:
		return n, fmt.Errorf("%w: %d", errRefused, status)
	}
	return n, nil
}

func (h *h3Slot) close() {
	if h.qc != nil {
		h.qc.CloseWithError(0, "")
		h.qc, h.cc = nil, nil
	}
}
