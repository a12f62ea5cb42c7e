package proxytest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"
)

// Child is a helper process running this test binary again, talking
// with the test a line at a time: it says on its standard output when
// a phase is done ([Child.Expect]) and waits on its standard input for
// the next ([Child.Send]); it ends once its standard input closes. The
// idle memory tests open their clients (and origins) in a Child, so
// that the process they measure holds the proxy's side alone.
type Child struct {
	t      testing.TB
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Scanner
	stderr strings.Builder // written by exec's copying goroutine until Wait returns
	once   sync.Once
}

// StartChild starts the test binary with -test.run=run and env added to
// this process's environment; the child is told what to do by env (the
// binary's TestMain or the test run names checks for it). It is ended
// by [Child.Close], at the latest when the test ends.
func StartChild(t testing.TB, run string, env ...string) *Child {
	t.Helper()
	c := &Child{t: t, cmd: exec.Command(os.Args[0], "-test.run="+run)}
	c.cmd.Env = append(os.Environ(), env...)
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatalf("child: %v", err)
	}
	stdout, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	c.cmd.Stderr = &c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", run, err)
	}
	c.lines = bufio.NewScanner(stdout)
	t.Cleanup(c.Close)
	return c
}

// Expect reads the child's output until a line that is want, and fails
// the test with what the child wrote on its standard error if it ends
// first.
func (c *Child) Expect(want string) {
	c.t.Helper()
	for c.lines.Scan() {
		if c.lines.Text() == want {
			return
		}
	}
	err := c.lines.Err()
	c.Close()
	c.t.Fatalf("child ended before it said %q (%v): %v\n%s", want, err, c.cmd.ProcessState, c.stderr.String())
}

// Send writes line and a newline to the child's standard input.
func (c *Child) Send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		c.t.Fatalf("tell child %q: %v", line, err)
	}
}

// Close closes the child's standard input, which ends it, and waits for
// it to exit, killing it if it has not within [DefaultTimeout]. It may
// be called more than once.
func (c *Child) Close() {
	c.once.Do(func() {
		c.stdin.Close()
		done := make(chan struct{})
		go func() { c.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(DefaultTimeout):
			c.cmd.Process.Kill()
			<-done
		}
	})
}

// WriteProfiles writes this process's profiles of the given names (for
// example "heap", "goroutine") to path.name, or does nothing when path
// is empty: an idle memory test takes its path from an environment
// variable, so that `go tool pprof -diff_base` can show where a
// connection's bytes go.
func WriteProfiles(t testing.TB, path string, names ...string) {
	t.Helper()
	if path == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		f, err := os.Create(path + "." + name)
		if err != nil {
			t.Fatal(err)
		}
		err = pprof.Lookup(name).WriteTo(f, 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatalf("write %s profile: %v", name, err)
		}
	}
}
