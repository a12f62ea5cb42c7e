package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// BulkResult is the JSON line printed by "load bulk".
type BulkResult struct {
	Conns       int    `json:"conns"`
	Established int    `json:"established"`
	Errors      int64  `json:"errors"`
	FirstError  string `json:"first_error,omitempty"`
	// SinkBytes is the growth of the sink's counter over the window.
	SinkBytes int64 `json:"sink_bytes"`
	// ClientBytes is what the writers handed to the kernel.
	ClientBytes int64   `json:"client_bytes"`
	ElapsedS    float64 `json:"elapsed_s"`
	Gbps        float64 `json:"gbps"`
}

// errorLog counts errors and keeps the first one; safe for concurrent use.
type errorLog struct {
	n     atomic.Int64
	mu    sync.Mutex
	first error // guarded by mu
}

func (e *errorLog) add(err error) {
	if e.n.Add(1) == 1 {
		e.mu.Lock()
		e.first = err
		e.mu.Unlock()
	}
}

func (e *errorLog) firstText() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.first == nil {
		return ""
	}
	return e.first.Error()
}

func runBulk(args []string) error {
	fs := flag.NewFlagSet("bulk", flag.ExitOnError)
	df := addDialFlags(fs)
	target := fs.String("target", "", "sink `host:port`")
	statsURL := fs.String("stats", "", "origin /_stats `URL` holding the sink's byte counter")
	conns := fs.Int("conns", 4, "tunnels")
	duration := fs.Duration("duration", 10*time.Second, "measuring window")
	writeSize := fs.Int("write", 256<<10, "bytes per write")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound on the whole run")
	fs.Parse(args)
	if *target == "" || *statsURL == "" || *conns < 1 {
		return errors.New("bulk: -target, -stats and -conns >= 1 are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	d, err := df.dialer(*target, 10*time.Second)
	if err != nil {
		return fmt.Errorf("bulk: %w", err)
	}

	var errs errorLog
	tunnels := openParallel(ctx, d, *conns, 64, &errs, nil)
	defer func() {
		for _, t := range tunnels {
			t.Close()
		}
	}()
	res := BulkResult{Conns: *conns, Established: len(tunnels)}
	if len(tunnels) == 0 {
		res.Errors, res.FirstError = errs.n.Load(), errs.firstText()
		return printJSON(res)
	}

	client := &http.Client{Timeout: 10 * time.Second}
	before, err := sinkBytes(ctx, client, *statsURL)
	if err != nil {
		return err
	}
	start := time.Now()
	deadline := start.Add(*duration)
	var sent atomic.Int64
	var wg sync.WaitGroup
	buf := make([]byte, *writeSize)
	for i := range buf {
		buf[i] = byte(i)
	}
	for _, t := range tunnels {
		t.SetWriteDeadline(deadline)
		wg.Go(func() {
			for time.Now().Before(deadline) {
				n, err := t.Write(buf)
				sent.Add(int64(n))
				if err != nil {
					if !errors.Is(err, os.ErrDeadlineExceeded) {
						errs.add(fmt.Errorf("write to tunnel: %w", err))
					}
					return
				}
			}
		})
	}
	wg.Wait()
	after, err := sinkBytes(ctx, client, *statsURL)
	if err != nil {
		return err
	}
	elapsed := time.Since(start).Seconds()
	res.Errors, res.FirstError = errs.n.Load(), errs.firstText()
	res.SinkBytes = after - before
	res.ClientBytes = sent.Load()
	res.ElapsedS = elapsed
	res.Gbps = float64(res.SinkBytes) * 8 / elapsed / 1e9
	return printJSON(res)
}

// openParallel opens n tunnels with at most par dials in flight and
// returns those that succeeded; failures go to errs. check, when not nil,
// runs on every new tunnel and a failure closes it.
func openParallel(ctx context.Context, d dialer, n, par int, errs *errorLog, check func(*tunnelConn) error) []*tunnelConn {
	return dialParallel(ctx, n, par, errs, func(ctx context.Context) (*tunnelConn, error) {
		t, err := d.dial(ctx)
		if err == nil && check != nil {
			if err = check(t); err != nil {
				t.Close()
			}
		}
		return t, err
	})
}

// dialParallel opens n of what dial opens with at most par dials in
// flight and returns those that succeeded; failures go to errs.
func dialParallel[T comparable](ctx context.Context, n, par int, errs *errorLog, dial func(context.Context) (T, error)) []T {
	out := make([]T, n)
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	for i := range n {
		if ctx.Err() != nil {
			errs.add(ctx.Err())
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			c, err := dial(ctx)
			if err != nil {
				errs.add(err)
				return
			}
			out[i] = c
		})
	}
	wg.Wait()
	var zero T
	ok := out[:0]
	for _, c := range out {
		if c != zero {
			ok = append(ok, c)
		}
	}
	return ok
}

// sinkBytes reads the sink's byte counter from the origin.
func sinkBytes(ctx context.Context, client *http.Client, url string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return 0, fmt.Errorf("stats request %s: %w", url, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("get %s: %w", url, err)
	}
	defer resp.Body.Close()
	var s struct {
		SinkBytes int64 `json:"sink_bytes"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&s); err != nil {
		return 0, fmt.Errorf("decode %s: %w", url, err)
	}
	return s.SinkBytes, nil
}

// printJSON prints v as one line on stdout.
func printJSON(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Println(string(b))
	return err
}
