package server

import (
	"os"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// The scaffolding of the idle memory tests (TestIdlePlainTunnelMemory,
// TestIdleInterceptedMemory) and of their child processes.

// requireOpenFiles skips t where the open-files limit is under files.
func requireOpenFiles(t *testing.T, files uint64) {
	t.Helper()
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < files {
		t.Skipf("needs %d open files, the limit is %d", files, lim.Cur)
	}
}

// sampleEveryAllocation makes the heap profile record every allocation
// for the rest of t where the environment variable env names where the
// test writes its profiles (see writeHeapProfile).
func sampleEveryAllocation(t *testing.T, env string) {
	if os.Getenv(env) == "" {
		return
	}
	prev := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	t.Cleanup(func() { runtime.MemProfileRate = prev })
}

// writeHeapProfile writes this process's heap profile to the path the
// environment variable env names followed by suffix and ".heap", or
// does nothing where env is not set.
func writeHeapProfile(t *testing.T, env, suffix string) {
	t.Helper()
	if path := os.Getenv(env); path != "" {
		proxytest.WriteProfiles(t, path+suffix, "heap")
	}
}

// envInt returns the number the environment variable name holds, as a
// child process reads what its parent asks of it.
func envInt(t *testing.T, name string) int {
	t.Helper()
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
