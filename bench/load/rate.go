package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
	"golang.org/x/net/http2/hpack"
)

// Fixed-rate (open-loop) runs: "-rate R" on http, h2, h3 and ws. The
// exchanges (requests, or WebSocket messages and their echoes) are due at
// fixed times, R per second over the window, whatever the proxy does; N
// connections take them in order, each sending the next exchange due as
// soon as it is free. The latency of an exchange runs from the time it was
// due, not from the time it was sent, so an exchange that waited for a
// connection held up by a slow answer counts the wait (no coordinated
// omission: a proxy that stalls for 100 ms makes every exchange due in
// those 100 ms late, not only the few in flight).

// maxScheduled bounds the exchanges of one fixed-rate run (rate ×
// duration): each keeps two durations for the percentiles.
const maxScheduled = 2_000_000

// RateResult is the JSON line a fixed-rate run prints.
type RateResult struct {
	// Proto is the subcommand: "http", "h2", "h3" or "ws".
	Proto string `json:"proto"`
	// Conns is the number of connections (with -newconn: of exchanges
	// in flight at most, each on a connection of its own).
	Conns int `json:"conns"`
	// Rate is the offered rate, exchanges per second.
	Rate float64 `json:"rate"`
	// DurationUS is the window the exchanges were due over; ElapsedUS
	// runs from its start to the last exchange's end.
	DurationUS int64 `json:"duration_us"`
	ElapsedUS  int64 `json:"elapsed_us"`
	// Scheduled counts the exchanges due in the window, Completed those
	// that completed without error, Unsent those never sent because the
	// drain (the window plus -req-timeout) ended first.
	Scheduled int64 `json:"scheduled"`
	Completed int64 `json:"completed"`
	Unsent    int64 `json:"unsent"`
	// Bytes counts the bytes read as wrk counts them (http: heads and
	// bodies), response body bytes (h2, h3) or echoed payload bytes (ws).
	Bytes  int64            `json:"bytes"`
	Errors report.WrkErrors `json:"errors"`
	// FirstError is the first error of the run, for the record.
	FirstError string `json:"first_error,omitempty"`
	// Retried counts HTTP/1.1 requests sent again on a new connection
	// after a kept-alive one turned out closed (a server that closes
	// after every response without saying so), as browsers and Go's
	// Transport do; the wait and the new connection are in the latency.
	Retried int64 `json:"retried,omitempty"`
	// Opened counts the connections opened before the window (kept-alive
	// connections, WebSocket upgrades).
	Opened     int64            `json:"opened"`
	Handshakes int64            `json:"tls_handshakes"`
	Resumed    int64            `json:"tls_resumed"`
	Curves     map[string]int64 `json:"tls_curves,omitempty"`
	Cert       string           `json:"tls_cert,omitempty"`
	// Latency runs from the time each completed exchange was due to its
	// end (response body or echo read).
	Latency Percentiles `json:"latency_us"`
	// SendLag runs from the time an exchange was due to the time it was
	// sent: the wait for a free connection, and the load side's own
	// delay. Part of Latency, never subtracted from it.
	SendLag Percentiles `json:"send_lag_us"`
	// TimerLag is the load side's own delay alone: for the exchanges
	// whose connection was free before they were due, how late the
	// timer woke it. Large values mean the load core, not the proxy,
	// added latency.
	TimerLag Percentiles `json:"timer_lag_us"`
}

// Percentiles summarises durations in microseconds.
type Percentiles struct {
	N    int64 `json:"n"`
	P50  int64 `json:"p50"`
	P99  int64 `json:"p99"`
	P999 int64 `json:"p999"`
	Max  int64 `json:"max"`
}

// percentilesOf returns the percentiles of ds by nearest rank, sorting ds
// in place; zero without any.
func percentilesOf(ds []time.Duration) Percentiles {
	if len(ds) == 0 {
		return Percentiles{}
	}
	slices.Sort(ds)
	at := func(q float64) int64 {
		i := int(math.Ceil(q*float64(len(ds)))) - 1
		return ds[max(i, 0)].Microseconds()
	}
	return Percentiles{N: int64(len(ds)), P50: at(0.50), P99: at(0.99), P999: at(0.999), Max: ds[len(ds)-1].Microseconds()}
}

// schedule hands out the times the exchanges of a fixed-rate run are due:
// the i-th (0 ≤ i < n) at start + i/rate, whatever happened to those
// before it. Workers claim them in order, so the next exchange due goes to
// the first connection free to send it.
type schedule struct {
	start time.Time
	rate  float64
	n     int64
	next  atomic.Int64
}

// newSchedule returns the schedule of rate exchanges per second over
// window from start: rate × window exchanges, at least one and at most
// maxScheduled.
func newSchedule(start time.Time, rate float64, window time.Duration) (*schedule, error) {
	if !(rate > 0) || math.IsInf(rate, 0) || window <= 0 {
		return nil, fmt.Errorf("load: a rate above 0 and a window above 0 are required (rate %g, window %s)", rate, window)
	}
	n := rate * window.Seconds()
	if n < 1 || n > maxScheduled {
		return nil, fmt.Errorf("load: %g per second over %s is %.0f exchanges, want 1 to %d", rate, window, n, maxScheduled)
	}
	return &schedule{start: start, rate: rate, n: int64(n)}, nil
}

// due returns the time exchange i is due.
func (s *schedule) due(i int64) time.Time {
	return s.start.Add(time.Duration(float64(i) * float64(time.Second) / s.rate))
}

// claim returns the time the next unclaimed exchange is due, or false
// once every exchange has been claimed.
func (s *schedule) claim() (time.Time, bool) {
	i := s.next.Add(1) - 1
	if i >= s.n {
		return time.Time{}, false
	}
	return s.due(i), true
}

// rateSlot is one connection of a fixed-rate run, owned by one worker.
type rateSlot interface {
	// open connects before the window (a kept-alive connection, a
	// WebSocket upgrade); a slot with a connection per exchange does
	// nothing.
	open(ctx context.Context, deadline time.Time) error
	// exchange sends one request (or message) and reads its response
	// (or echo) by deadline, connecting first when the slot has no
	// connection, and returns the body or payload bytes read. Its errors
	// say what failed (errConnect, errWrite, errRefused, errUpgrade, a
	// deadline).
	exchange(ctx context.Context, deadline time.Time) (int64, error)
	// close closes the slot's connection, if any.
	close()
}

// Error classes of an exchange, besides errWrite (httpload.go) and
// errUpgrade (wsload.go).
var (
	errConnect = errors.New("load: connect")
	errRefused = errors.New("load: status above 399")
	errTimeout = errors.New("load: deadline passed")
)

// rateCounts are one worker's tallies in a fixed-rate run.
type rateCounts struct {
	counts
	// attempts counts the exchanges sent (or whose connection was tried).
	attempts int64
	// sendLags and timerLags are as in RateResult.
	sendLags, timerLags []time.Duration
	last                time.Time // end of the worker's last exchange
}

// record counts err into its class.
func (c *rateCounts) record(err error) {
	switch {
	case errors.Is(err, errRefused), errors.Is(err, errUpgrade):
		c.fail(&c.errs.Status, err)
	case errors.Is(err, errConnect):
		c.fail(&c.errs.Connect, err)
	case errors.Is(err, errTimeout), errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		c.fail(&c.errs.Timeout, err)
	case errors.Is(err, errWrite):
		c.fail(&c.errs.Write, err)
	default:
		c.fail(&c.errs.Read, err)
	}
}

// rateWorker runs exchanges on slot as s hands them out, until every one
// is claimed or drainEnd passes (the exchange in hand and those left are
// then unsent). A worker free before its exchange is due waits for it with
// w; one that claims an exchange already due (every connection was busy)
// sends it at once. No exchange outlives drainEnd or lasts longer than
// reqTimeout.
func rateWorker(ctx context.Context, s *schedule, slot rateSlot, w waiter, drainEnd time.Time, reqTimeout time.Duration, c *rateCounts) {
	for ctx.Err() == nil {
		due, ok := s.claim()
		if !ok {
			return
		}
		if time.Now().Before(due) {
			if err := w.waitUntil(due); err != nil {
				c.fail(&c.errs.Read, fmt.Errorf("load: pacing timer: %w", err))
				return
			}
			c.timerLags = append(c.timerLags, time.Since(due))
		}
		sent := time.Now()
		if !sent.Before(drainEnd) {
			return
		}
		c.attempts++
		n, err := slot.exchange(ctx, earliest(sent.Add(reqTimeout), drainEnd))
		done := time.Now()
		c.last = done
		if err != nil {
			c.record(err)
			continue
		}
		c.requests++
		c.bytes += n
		c.latencies = append(c.latencies, done.Sub(due))
		c.sendLags = append(c.sendLags, sent.Sub(due))
	}
}

// rateFlags are the flags of a fixed-rate run, which http, h2, h3 and ws
// share.
type rateFlags struct {
	rate *float64
	sync *bool
}

func addRateFlags(fs *flag.FlagSet) rateFlags {
	return rateFlags{
		rate: fs.Float64("rate", 0, "fixed offered `rate`, exchanges per second over -duration (open loop: latency from each exchange's due time); 0 runs closed loop, one exchange after the other per connection"),
		sync: fs.Bool("sync", false, "with -rate, print \"ready\" once the connections are open and wait for a line on stdin before the window, and print \"done\" after the last exchange and wait for a line (or the end of stdin) before closing them: the caller measures the proxy's CPU in between"),
	}
}

// check reports whether the flags ask for a fixed-rate run, and an error
// for -sync without -rate or a rate below 0.
func (rf rateFlags) check() (bool, error) {
	switch {
	case *rf.rate < 0 || math.IsNaN(*rf.rate) || math.IsInf(*rf.rate, 0):
		return false, fmt.Errorf("-rate %g: want a rate above 0, or 0 for a closed loop", *rf.rate)
	case *rf.sync && *rf.rate == 0:
		return false, errors.New("-sync needs -rate")
	}
	return *rf.rate > 0, nil
}

// run returns the fixed-rate run the flags describe for proto, with conns
// slots from newSlot.
func (rf rateFlags) run(proto string, conns int, window, reqTimeout time.Duration, d dialer, newSlot func() rateSlot) rateRun {
	return rateRun{proto: proto, conns: conns, rate: *rf.rate, window: window, reqTimeout: reqTimeout, sync: *rf.sync, d: d, newSlot: newSlot}
}

// rateRun is one fixed-rate run.
type rateRun struct {
	proto      string
	conns      int
	rate       float64
	window     time.Duration
	reqTimeout time.Duration
	// sync makes the run wait at its start and end (rateFlags.sync)
	// for lines on in, announcing them on out.
	sync    bool
	d       dialer
	newSlot func() rateSlot
	// newWaiter returns a worker's timer (newWaiter in waiter_*.go
	// unless a test sets it).
	newWaiter func() (waiter, error)
}

// run opens the connections, runs the schedule and returns its result.
// It is bounded by the window, the drain of reqTimeout after it and the
// connection timeout before it (and, with sync, by the caller's lines).
func (r rateRun) run(in io.Reader, out io.Writer) (RateResult, error) {
	res := RateResult{Proto: r.proto, Conns: r.conns, Rate: r.rate, DurationUS: r.window.Microseconds()}
	if _, err := newSchedule(time.Now(), r.rate, r.window); err != nil {
		return res, err
	}
	if r.conns < 1 {
		return res, errors.New("load: -conns >= 1 is required")
	}
	newWaiter := r.newWaiter
	if newWaiter == nil {
		newWaiter = newPacer
	}
	slots := make([]rateSlot, r.conns)
	waiters := make([]waiter, r.conns)
	defer func() {
		for i := range slots {
			if slots[i] != nil {
				slots[i].close()
			}
			if waiters[i] != nil {
				waiters[i].close()
			}
		}
	}()
	results := make([]rateCounts, r.conns)
	var opened atomic.Int64
	var wg sync.WaitGroup
	openBy := time.Now().Add(r.d.timeout)
	for i := range slots {
		slots[i] = r.newSlot()
		w, err := newWaiter()
		if err != nil {
			return res, fmt.Errorf("load: pacing timer: %w", err)
		}
		waiters[i] = w
		wg.Go(func() {
			ctx, cancel := context.WithDeadline(context.Background(), openBy)
			defer cancel()
			if err := slots[i].open(ctx, openBy); err != nil {
				results[i].record(err)
				return
			}
			opened.Add(1)
		})
	}
	wg.Wait()
	lines := bufio.NewReader(in)
	if r.sync {
		if err := syncPoint(out, lines, "ready"); err != nil {
			return res, err
		}
	}

	start := time.Now()
	s, err := newSchedule(start, r.rate, r.window)
	if err != nil {
		return res, err
	}
	drainEnd := start.Add(r.window + r.reqTimeout)
	ctx, cancel := context.WithDeadline(context.Background(), drainEnd.Add(time.Second))
	defer cancel()
	for i := range slots {
		wg.Go(func() { rateWorker(ctx, s, slots[i], waiters[i], drainEnd, r.reqTimeout, &results[i]) })
	}
	wg.Wait()
	if r.sync {
		if err := syncPoint(out, lines, "done"); err != nil && !errors.Is(err, io.EOF) {
			return res, err
		}
	}

	var total rateCounts
	last := start
	for i := range results {
		c := &results[i]
		total.merge(&c.counts)
		total.attempts += c.attempts
		total.sendLags = append(total.sendLags, c.sendLags...)
		total.timerLags = append(total.timerLags, c.timerLags...)
		if c.last.After(last) {
			last = c.last
		}
		if h, ok := slots[i].(*httpSlot); ok {
			res.Retried += h.retried
		}
	}
	res.ElapsedUS = last.Sub(start).Microseconds()
	res.Scheduled = s.n
	res.Completed, res.Bytes, res.Errors = total.requests, total.bytes, total.errs
	res.Unsent = s.n - total.attempts
	res.Opened = opened.Load()
	if total.firstErr != nil {
		res.FirstError = total.firstErr.Error()
	}
	res.Handshakes, res.Resumed = r.d.handshakes.Load(), r.d.resumed.Load()
	res.Curves, res.Cert = r.d.seen.result()
	res.Latency = percentilesOf(total.latencies)
	res.SendLag = percentilesOf(total.sendLags)
	res.TimerLag = percentilesOf(total.timerLags)
	return res, nil
}

// syncPoint prints word on its own line to out and waits for a line from
// in.
func syncPoint(out io.Writer, in *bufio.Reader, word string) error {
	if _, err := io.WriteString(out, word+"\n"); err != nil {
		return fmt.Errorf("load: announce %s: %w", word, err)
	}
	if _, err := in.ReadString('\n'); err != nil {
		return fmt.Errorf("load: wait after %s: %w", word, err)
	}
	return nil
}

// runRated runs r with the process's stdin and stdout and prints its
// result as one JSON line.
func runRated(r rateRun) error {
	res, err := r.run(os.Stdin, os.Stdout)
	if err != nil {
		return err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	_, err = fmt.Printf("%s\n", b)
	return err
}

// httpSlot is a connection of "load http -rate": HTTP/1.1 (plain or TLS)
// with one request in flight, kept alive or (newConn) one per request.
type httpSlot struct {
	d       dialer
	req     []byte
	newConn bool
	conn    net.Conn
	br      *bufio.Reader
	// retried counts requests sent again after a kept-alive connection
	// turned out closed.
	retried int64
}

func (h *httpSlot) open(ctx context.Context, _ time.Time) error {
	if h.newConn {
		return nil
	}
	return h.dial(ctx)
}

func (h *httpSlot) dial(ctx context.Context) error {
	c, err := h.d.dialConn(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", errConnect, err)
	}
	h.conn, h.br = c, bufio.NewReaderSize(c, 64<<10)
	return nil
}

func (h *httpSlot) exchange(ctx context.Context, deadline time.Time) (int64, error) {
	for try := 0; ; try++ {
		reused := h.conn != nil
		if !reused {
			dctx, cancel := context.WithDeadline(ctx, deadline)
			err := h.dial(dctx)
			cancel()
			if err != nil {
				return 0, err
			}
		}
		h.conn.SetDeadline(deadline)
		status, n, closed, err := exchange(h.conn, h.br, h.req)
		if err != nil || closed || h.newConn {
			h.close()
		}
		if err != nil && reused && try == 0 && n == 0 && closedByPeer(err) {
			// A kept-alive connection the server had closed: send the
			// request again on a new one.
			h.retried++
			continue
		}
		switch {
		case err != nil:
			return n, err
		case status > 399:
			return n, fmt.Errorf("%w: %d", errRefused, status)
		}
		return n, nil
	}
}

func (h *httpSlot) close() {
	if h.conn != nil {
		h.conn.Close()
		h.conn, h.br = nil, nil
	}
}

// closedByPeer reports whether err says the peer had closed the
// connection: an end of file, a reset or a broken pipe.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// h2Slot is a connection of "load h2 -rate": one HTTP/2 connection with
// one stream at a time, kept alive or (newConn) one per request.
type h2Slot struct {
	d       dialer
	fields  []hpack.HeaderField
	newConn bool
	cl      *h2Client
}

func (h *h2Slot) open(ctx context.Context, _ time.Time) error {
	if h.newConn {
		return nil
	}
	return h.dial(ctx)
}

func (h *h2Slot) dial(ctx context.Context) error {
	cl, err := h.d.dialH2Client(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", errConnect, err)
	}
	h.cl = cl
	return nil
}

func (h *h2Slot) exchange(ctx context.Context, deadline time.Time) (int64, error) {
	if h.cl == nil {
		dctx, cancel := context.WithDeadline(ctx, deadline)
		err := h.dial(dctx)
		cancel()
		if err != nil {
			return 0, err
		}
	}
	h.cl.conn.SetDeadline(deadline)
	status, n, err := h.cl.get(h.fields)
	if err != nil || h.newConn || h.cl.done() {
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

func (h *h2Slot) close() {
	if h.cl != nil {
		h.cl.conn.Close()
		h.cl = nil
	}
}

// wsSlot is a connection of "load ws -rate": an upgraded WebSocket
// connection with one message in flight, or (newConn) a connection,
// upgrade and close per message.
type wsSlot struct {
	w       wsWorker
	newConn bool
	conn    net.Conn
	br      *bufio.Reader
}

func (s *wsSlot) open(ctx context.Context, deadline time.Time) error {
	if s.newConn {
		return nil
	}
	return s.dial(ctx, deadline)
}

func (s *wsSlot) dial(ctx context.Context, deadline time.Time) error {
	s.w.end = deadline
	conn, br, err := s.w.connect(ctx)
	if err != nil {
		if errors.Is(err, errUpgrade) {
			return err
		}
		return fmt.Errorf("%w: %w", errConnect, err)
	}
	s.conn, s.br = conn, br
	return nil
}

func (s *wsSlot) exchange(ctx context.Context, deadline time.Time) (int64, error) {
	if s.conn == nil {
		dctx, cancel := context.WithDeadline(ctx, deadline)
		err := s.dial(dctx, deadline)
		cancel()
		if err != nil {
			return 0, err
		}
	}
	s.conn.SetDeadline(deadline)
	err := s.w.echo(s.conn, s.br)
	if err != nil || s.newConn {
		s.close()
	}
	if err != nil {
		return 0, err
	}
	return int64(s.w.size), nil
}

func (s *wsSlot) close() {
	if s.conn != nil {
		s.conn.Close()
		s.conn, s.br = nil, nil
	}
}

// waiter is a worker's timer: waitUntil returns once t has passed, as
// close to it as the system allows (pacer_linux.go).
type waiter interface {
	waitUntil(t time.Time) error
	close()
}
