package h3

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/leaktest"
)

func TestMain(m *testing.M) {
	if os.Getenv("H3_MEMORY_HELPER") != "" {
		os.Exit(memoryHelper())
	}
	if os.Getenv("H3_MEMORY_PROFILE") != "" {
		// TestIdleMemory's profiles record every allocation, not one
		// in 512 KiB: a flow's few hundred bytes each show.
		runtime.MemProfileRate = 1
	}
	os.Exit(leaktest.Main(m, 10*time.Second,
		"rustle/internal/h3.", "rustle/internal/gate.", "rustle/internal/tunnel."))
}
