package proxytest

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
)

// rustlePackages is what the stack of a goroutine running rustle code
// mentions.
const rustlePackages = "github.com/rustle-proxy/rustle/"

// CheckGoroutines waits up to wait for every goroutine whose stack
// mentions one of substrs, other than the caller's, to end. It returns an
// error quoting the stacks of those still running.
func CheckGoroutines(wait time.Duration, substrs ...string) error {
	deadline := time.Now().Add(wait)
	for {
		left := matchingStacks(substrs)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("proxytest: %d goroutine(s) still running after %v:\n\n%s",
				len(left), wait, strings.Join(left, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// matchingStacks returns the stacks, other than the caller's, that
// mention one of substrs.
func matchingStacks(substrs []string) []string {
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
	stacks := strings.Split(string(buf), "\n\n")[1:]
	var left []string
	for _, s := range stacks {
		for _, sub := range substrs {
			if strings.Contains(s, sub) {
				left = append(left, s)
				break
			}
		}
	}
	return left
}

// VerifyNoLeaks runs the tests and benchmarks of m, then, if they passed,
// checks that no goroutine running rustle code is left after a grace of
// 5s. It returns the exit code for os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(proxytest.VerifyNoLeaks(m)) }
func VerifyNoLeaks(m *testing.M) int {
	code := m.Run()
	if code != 0 {
		return code
	}
	if err := CheckGoroutines(5*time.Second, rustlePackages); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
