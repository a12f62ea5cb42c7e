package h3

import (
	"os"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/leaktest"
)

func TestMain(m *testing.M) {
	if os.Getenv("H3_MEMORY_HELPER") != "" {
		os.Exit(memoryHelper())
	}
	os.Exit(leaktest.Main(m, 10*time.Second,
		"rustle/internal/h3.", "rustle/internal/gate.", "rustle/internal/tunnel."))
}
