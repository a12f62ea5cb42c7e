package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"
)

// HoldStep is the JSON line printed by "load hold" at each step.
type HoldStep struct {
	// Step is the number of tunnels asked for; Open how many are open.
	Step       int     `json:"step"`
	Open       int     `json:"open"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	ElapsedS   float64 `json:"elapsed_s"`
}

// ping is the message sent through every held tunnel and echoed back by the
// origin's hold port, proving the tunnel reaches it.
var ping = []byte("ping")

func runHold(args []string) error {
	fs := flag.NewFlagSet("hold", flag.ExitOnError)
	df := addDialFlags(fs)
	target := fs.String("target", "", "hold port `host:port`")
	stepsFlag := fs.String("steps", "1000,5000,9000", "comma-separated increasing tunnel counts")
	par := fs.Int("parallel", 64, "tunnels opened at once")
	timeout := fs.Duration("timeout", 10*time.Minute, "bound on the whole run")
	h3 := fs.Bool("h3", false, "with -tls, hold QUIC connections (HTTP/3) instead of tunnels, each after one completed GET of -path from -target (an HTTP origin) through the proxy")
	path := fs.String("path", "/1k", "with -h3 or -https, the `path` of each connection's one request")
	udp := fs.Bool("udp", false, "hold UDP flows to -target (a UDP echo) instead of tunnels, each after one datagram echoed: CONNECT-UDP over HTTP/3 with -tls, SOCKS5 UDP ASSOCIATE with -socks5")
	perConn := fs.Int("flows-per-conn", 50, "with -udp over HTTP/3, the flows on each QUIC connection (rustle's [http3] max_flows is 64 per connection by default)")
	fs.Parse(args)
	if *target == "" {
		return errors.New("hold: -target is required")
	}
	steps, err := parseSteps(*stepsFlag)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	d, err := df.dialer(*target, 10*time.Second)
	if err != nil {
		return fmt.Errorf("hold: %w", err)
	}

	// stdin carries the caller's go-ahead between steps; EOF ends the run.
	lines := make(chan struct{})
	go readLines(os.Stdin, lines)

	// open opens n more of what is held.
	open := func(n int, errs *errorLog) []io.Closer {
		var out []io.Closer
		for _, t := range openParallel(ctx, d, n, *par, errs, echo) {
			out = append(out, t)
		}
		return out
	}
	switch {
	case *h3 && *udp, *df.https && (*h3 || *udp):
		return errors.New("hold: -h3, -udp and -https exclude each other")
	case *h3:
		if d.tlsConf == nil || d.proxy == "" {
			return errors.New("hold: -h3 needs -proxy and -tls")
		}
		d.tlsConf.NextProtos = []string{http3.NextProtoH3}
		url := "http://" + d.target + *path
		open = func(n int, errs *errorLog) []io.Closer {
			return dialParallel(ctx, n, *par, errs, func(ctx context.Context) (io.Closer, error) { return holdH3(ctx, d, url) })
		}
	case *df.https:
		req := httpRequest(d, *path, false)
		open = func(n int, errs *errorLog) []io.Closer {
			return dialParallel(ctx, n, *par, errs, func(ctx context.Context) (io.Closer, error) { return holdHTTPS(ctx, d, req) })
		}
	case *udp:
		fd, err := newFlowDialer(d, *df.socks, *perConn, "/.well-known/masque/udp/{target_host}/{target_port}/")
		if err != nil {
			return fmt.Errorf("hold: %w", err)
		}
		defer fd.close()
		open = func(n int, errs *errorLog) []io.Closer {
			return dialParallel(ctx, n, *par, errs, func(ctx context.Context) (io.Closer, error) {
				f, err := fd.open(ctx)
				if err != nil {
					return nil, err
				}
				if err := flowHoldCheck(f); err != nil {
					f.Close()
					return nil, fmt.Errorf("echo on a held flow: %w", err)
				}
				return f, nil
			})
		}
	}

	var held []io.Closer
	defer func() {
		for _, t := range held {
			t.Close()
		}
	}()
	var errs errorLog
	start := time.Now()
	for i, step := range steps {
		held = append(held, open(step-len(held), &errs)...)
		if err := printJSON(HoldStep{
			Step: step, Open: len(held), Errors: errs.n.Load(), FirstError: errs.firstText(),
			ElapsedS: time.Since(start).Seconds(),
		}); err != nil {
			return err
		}
		last := i == len(steps)-1
		for {
			select {
			case _, ok := <-lines:
				if !ok {
					return nil
				}
			case <-ctx.Done():
				return fmt.Errorf("hold: %w", ctx.Err())
			}
			if !last {
				break
			}
			// After the last step only EOF ends the run.
		}
	}
	return nil
}

// echo sends ping through t and waits for it to come back.
func echo(t *tunnelConn) error {
	t.SetDeadline(time.Now().Add(10 * time.Second))
	defer t.SetDeadline(time.Time{})
	if _, err := t.Write(ping); err != nil {
		return fmt.Errorf("write through tunnel: %w", err)
	}
	got := make([]byte, len(ping))
	if _, err := io.ReadFull(t, got); err != nil {
		return fmt.Errorf("read echo through tunnel: %w", err)
	}
	if string(got) != string(ping) {
		return fmt.Errorf("echo through tunnel: got %q, want %q", got, ping)
	}
	return nil
}

// readLines sends one value on ch per line of r and closes ch at EOF.
func readLines(r io.Reader, ch chan<- struct{}) {
	defer close(ch)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		ch <- struct{}{}
	}
}

// parseSteps parses "1000,5000,9000" into increasing positive counts.
func parseSteps(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("hold: bad step %q in -steps %q", f, s)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("hold: -steps %q is not increasing", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// quicCloser closes a held QUIC connection.
type quicCloser struct{ *quic.Conn }

func (c quicCloser) Close() error { return c.CloseWithError(0, "") }

// holdH3 opens a QUIC connection to the proxy, sends one forwarded GET for
// url on it, reads the response, and returns the connection, kept alive
// by PINGs while it is held.
func holdH3(ctx context.Context, d dialer, url string) (io.Closer, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	qc, err := quic.DialAddr(ctx, d.proxy, d.tlsConf, &quic.Config{KeepAlivePeriod: 15 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("QUIC dial %s: %w", d.proxy, err)
	}
	cc := (&http3.Transport{}).NewClientConn(qc)
	status, _, err := getBody(ctx, cc, "h3", url, d.authHeader, make([]byte, 4<<10))
	if err == nil && status != 200 {
		err = fmt.Errorf("status %d", status)
	}
	if err != nil {
		qc.CloseWithError(0, "")
		return nil, fmt.Errorf("GET %s over HTTP/3: %w", url, err)
	}
	return quicCloser{qc}, nil
}

// holdHTTPS opens a connection with dialHTTP (with -https through a
// proxy: a CONNECT tunnel with the client's TLS to the target inside it),
// sends req on it, reads the whole response and returns the connection,
// idle and kept alive.
func holdHTTPS(ctx context.Context, d dialer, req []byte) (io.Closer, error) {
	c, auth, err := d.dialHTTP(ctx)
	if err != nil {
		return nil, err
	}
	if auth != d.target {
		req = bytes.ReplaceAll(req, []byte(d.target), []byte(auth))
	}
	c.SetDeadline(time.Now().Add(d.timeout))
	status, _, closed, err := exchange(c, bufio.NewReaderSize(c, 4<<10), req)
	switch {
	case err == nil && status != 200:
		err = fmt.Errorf("status %d", status)
	case err == nil && closed:
		err = errors.New("the connection closes after the response")
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("request on a held connection to %s: %w", auth, err)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}
