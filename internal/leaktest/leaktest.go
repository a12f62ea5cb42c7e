// Package leaktest checks, at the end of a package's tests, that the
// goroutines the tests started have ended: each package that owns
// goroutines calls Main from its TestMain with the names its goroutines'
// stacks mention.
package leaktest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Check waits up to wait for every goroutine, other than the caller's,
// whose stack mentions one of substrs to end. It returns an error quoting
// the stacks of those still running.
func Check(wait time.Duration, substrs ...string) error {
	deadline := time.Now().Add(wait)
	for {
		left := Stacks(substrs...)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("leaktest: %d goroutine(s) still running after %v:\n\n%s",
				len(left), wait, strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stacks returns the stacks of the goroutines, other than the caller's,
// that mention one of substrs.
func Stacks(substrs ...string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	// The caller's goroutine comes first.
	var left []string
	for _, s := range strings.Split(string(buf), "\n\n")[1:] {
		for _, sub := range substrs {
			if strings.Contains(s, sub) {
				left = append(left, s)
				break
			}
		}
	}
	return left
}

// CallStates samples, every 200 µs, the goroutines whose stacks are
// inside one of calls (substrings of a stack, "pkg.(*T).Method(") until
// it has n samples or until passes, and returns how many samples saw
// each scheduling state (see State), per call, and the samples in all.
func CallStates(calls []string, n int, until time.Time) (states map[string]map[string]int, samples int) {
	states = map[string]map[string]int{}
	for samples < n && time.Now().Before(until) {
		time.Sleep(200 * time.Microsecond)
		for _, g := range Stacks(calls...) {
			for _, call := range calls {
				if !strings.Contains(g, call) {
					continue
				}
				if states[call] == nil {
					states[call] = map[string]int{}
				}
				states[call][State(g)]++
				samples++
			}
		}
	}
	return states, samples
}

// InSyscall returns an error when states and samples, from CallStates,
// are fewer than least, too few to tell, or saw a goroutine inside one
// of calls "in a system call" the Go scheduler sees (a state in which
// the runtime's monitor may hand its processor to another thread);
// nil when every sample saw it otherwise.
func InSyscall(calls []string, states map[string]map[string]int, samples, least int) error {
	if samples < least {
		return fmt.Errorf("only %d samples during the calls (%v): too few to tell", samples, states)
	}
	var bad []string
	for _, call := range calls {
		if n := states[call]["syscall"]; n > 0 {
			bad = append(bad, fmt.Sprintf("in %d of %d samples in %s the goroutine was in a system call the scheduler sees (states %v)", n, samples, call, states[call]))
		}
	}
	if bad != nil {
		return fmt.Errorf("%s; want none", strings.Join(bad, "; "))
	}
	return nil
}

// Main runs the tests and benchmarks of m and then, if they passed,
// Check(wait, substrs...). It returns the exit code for os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(leaktest.Main(m, 5*time.Second, "rustle/internal/foo.")) }
func Main(m *testing.M, wait time.Duration, substrs ...string) int {
	code := m.Run()
	if code != 0 {
		return code
	}
	if err := Check(wait, substrs...); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// State returns the scheduling state a goroutine's stack (one of those
// Stacks returns) begins with: "running", "runnable", "syscall", "IO
// wait", "chan receive" and so on, without the time it has been so.
func State(stack string) string {
	head, _, _ := strings.Cut(stack, "\n")
	i, j := strings.Index(head, "["), strings.Index(head, "]")
	if i < 0 || j < i {
		return ""
	}
	state, _, _ := strings.Cut(head[i+1:j], ",")
	return state
}
