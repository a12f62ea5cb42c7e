package proxytest

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Mem is the process's memory as the idle memory tests compare it
// before and after opening many tunnels.
type Mem struct {
	// Live is the bytes of live heap objects (HeapAlloc just after a
	// collection): what the process keeps, whatever else shares the
	// heap with it.
	Live uint64
	// Heap is the heap's spans in use (HeapInuse): Live and the free
	// room in the spans that hold it.
	Heap uint64
	// Stacks is the goroutine stacks (StackInuse).
	Stacks uint64
}

// SettledMem returns the process's Mem once garbage collection has
// settled: a few cycles apart, so that what finalizers free counts too
// and the stacks of parked goroutines have shrunk (each cycle halves a
// stack at most).
func SettledMem() Mem {
	var ms runtime.MemStats
	for range 4 {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	runtime.GC() // sweeps every span: HeapAlloc is what is live
	runtime.ReadMemStats(&ms)
	return Mem{Live: ms.HeapAlloc, Heap: ms.HeapInuse, Stacks: ms.StackInuse}
}

// VMRSS returns the process's resident set size in bytes (VmRSS), 0 when
// /proc is not there.
func VMRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
