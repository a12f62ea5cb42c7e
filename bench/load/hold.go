package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
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

	var open []*tunnelConn
	defer func() {
		for _, t := range open {
			t.Close()
		}
	}()
	var errs errorLog
	start := time.Now()
	for i, step := range steps {
		more := openParallel(ctx, d, step-len(open), *par, &errs, echo)
		open = append(open, more...)
		if err := printJSON(HoldStep{
			Step: step, Open: len(open), Errors: errs.n.Load(), FirstError: errs.firstText(),
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
