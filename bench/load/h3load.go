package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// runH3 is "load h3": "load http" over HTTP/3 (quic-go's client), N QUIC
// connections to the proxy's UDP port (or to the origin's HTTP/3 listener
// without a proxy), each sending GETs one after the other (-inflight of
// them at a time, each on a stream of its own), or one request per
// connection with -newconn. Counted and printed like "load http"; bytes
// are response body bytes.
func runH3(args []string) error {
	fs := flag.NewFlagSet("h3", flag.ExitOnError)
	df := addDialFlags(fs)
	target := fs.String("target", "", "origin `host:port` the requests are for")
	path := fs.String("path", "/1k", "request `path`")
	conns := fs.Int("conns", 16, "QUIC connections, each sending one request after the other")
	newConn := fs.Bool("newconn", false, "one request per connection: close it after the response and open a new one for the next")
	inflight := fs.Int("inflight", 1, "requests in flight on each connection, each sending the next when its response is complete")
	duration := fs.Duration("duration", 10*time.Second, "measuring window")
	reqTimeout := fs.Duration("req-timeout", 10*time.Second, "a response not complete after this long counts as a timeout")
	rf := addRateFlags(fs)
	fs.Parse(args)
	if *target == "" || *conns < 1 || *inflight < 1 || !*df.tls {
		return errors.New("h3: -target, -tls, -conns >= 1 and -inflight >= 1 are required")
	}
	if *newConn && *inflight > 1 {
		return errors.New("h3: -newconn sends one request per connection: -inflight must be 1")
	}
	d, err := df.dialer(*target, *reqTimeout)
	if err != nil {
		return fmt.Errorf("h3: %w", err)
	}
	d.tlsConf.NextProtos = []string{http3.NextProtoH3}
	url := d.getURL(*path)
	if rated, err := rf.check(); rated || err != nil {
		if err != nil {
			return fmt.Errorf("h3: %w", err)
		}
		return runRated(rf.run("h3", *conns, *duration, *reqTimeout, d, func() rateSlot {
			return &h3Slot{d: d, url: url, newConn: *newConn}
		}))
	}
	results := make([]counts, *conns**inflight)
	elapsed := runWindow(*duration, 2**reqTimeout, *conns, func(ctx context.Context, end time.Time, i int) {
		h3Worker(ctx, d, url, *newConn, end, *reqTimeout, results[i**inflight:(i+1)**inflight])
	})

	return printMarked(httpResult(*conns, results, elapsed))
}

// h3Worker sends GETs for url on one QUIC connection, len(c) at a time
// (each in a goroutine counting into its own c[i]), until end,
// reconnecting after an error (and after every response with newConn,
// where len(c) is 1), and counts as h2Worker does.
func h3Worker(ctx context.Context, d dialer, url string, newConn bool, end time.Time, reqTimeout time.Duration, c []counts) {
	ctx, cancel := context.WithDeadline(ctx, end)
	defer cancel()
	addr := d.firstHop()
	tr := &http3.Transport{}
	for time.Now().Before(end) && ctx.Err() == nil {
		dctx, dcancel := context.WithTimeout(ctx, d.timeout)
		qc, err := quic.DialAddr(dctx, addr, d.tlsConf, &quic.Config{})
		dcancel()
		if err != nil {
			if time.Now().Before(end) {
				c[0].fail(&c[0].errs.Connect, err)
				sleep(ctx, 10*time.Millisecond)
			}
			continue
		}
		cc := tr.NewClientConn(qc)
		var wg sync.WaitGroup
		for i := range c {
			wg.Go(func() {
				if getRequests(ctx, cc, func() bool { return cc.Context().Err() == nil }, "h3", url, d.authHeader, newConn, end, reqTimeout, &c[i]) {
					qc.CloseWithError(0, "") // the others dial again with this one
				}
			})
		}
		wg.Wait()
		qc.CloseWithError(0, "")
	}
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
	qc, err := quic.DialAddr(ctx, h.d.firstHop(), h.d.tlsConf, &quic.Config{})
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
	status, n, err := getBody(ctx, h.cc, "h3", h.url, h.d.authHeader, h.buf)
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
