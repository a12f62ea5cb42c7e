package proxytest

import (
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/leaktest"
)

// rustlePackages is what the stack of a goroutine running rustle code
// mentions.
const rustlePackages = "github.com/rustle-proxy/rustle/"

// CheckGoroutines waits up to wait for every goroutine whose stack
// mentions one of substrs, other than the caller's, to end. It returns an
// error quoting the stacks of those still running.
func CheckGoroutines(wait time.Duration, substrs ...string) error {
	return leaktest.Check(wait, substrs...)
}

// VerifyNoLeaks runs the tests and benchmarks of m, then, if they passed,
// checks that no goroutine running rustle code is left after a grace of
// 5s. It returns the exit code for os.Exit:
//
//	func TestMain(m *testing.M) { os.Exit(proxytest.VerifyNoLeaks(m)) }
func VerifyNoLeaks(m *testing.M) int {
	return leaktest.Main(m, 5*time.Second, rustlePackages)
}
