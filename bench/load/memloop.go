package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"time"
)

// MemLoopResult is the line "load memloop" prints: how long its loop of
// random reads took on the CPU it ran on.
type MemLoopResult struct {
	// MS is the CPU time the loop took, in milliseconds (where the
	// process's CPU time cannot be read, its wall time): other work on
	// the same CPU does not lengthen it, a slower memory does.
	MS float64 `json:"memory_loop_ms"`
	// WallMS is the loop's wall time in milliseconds, which other work
	// on the same CPU lengthens too.
	WallMS float64 `json:"wall_ms"`
}

// runMemLoop runs "load memloop": it reads -reads words at random over a
// -mb MiB array (filled first, outside the timing) and prints one JSON
// line, MemLoopResult, with the CPU time and the wall time that took.
// The campaign runs it pinned to the proxy's core before each fixed-rate
// run: on the VMs the benchmarks run on, the host slows the guest's
// memory for minutes at a time, and the proxy's CPU per request with it
// (up to 1.8×, the same work, system calls and context switches;
// bench/README.md, "A slow machine"), while a loop on registers alone
// does not move. The loop's time says which runs fell in such a spell.
func runMemLoop(args []string) error { return memLoopTo(os.Stdout, args) }

// memLoopTo is runMemLoop printing to w.
func memLoopTo(w io.Writer, args []string) error {
	fs := flag.NewFlagSet("memloop", flag.ContinueOnError)
	mb := fs.Int("mb", 64, "size of the array read, in MiB (larger than the CPU's caches)")
	reads := fs.Int("reads", 10_000_000, "random reads timed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *mb < 1 || *reads < 1 {
		return fmt.Errorf("memloop: -mb and -reads must be at least 1 (got %d, %d)", *mb, *reads)
	}
	cpu, wall := memLoop(*mb<<20/8, *reads)
	b, err := json.Marshal(MemLoopResult{MS: float64(cpu.Microseconds()) / 1e3, WallMS: float64(wall.Microseconds()) / 1e3})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// memSink keeps memLoop's sum, so that the compiler keeps its reads.
var memSink uint64

// memLoop fills an array of words uint64s (rounded down to a power of
// two, so that a mask, not a division, picks the place), then returns how
// long reads reads at pseudo-random places in it took: the process's CPU
// time (the wall time where that cannot be read; the loop allocates
// nothing, so no other goroutine of the process runs meanwhile) and the
// wall time.
func memLoop(words, reads int) (cpu, wall time.Duration) {
	words = 1 << (bits.Len(uint(words)) - 1)
	a := make([]uint64, words)
	for i := range a {
		a[i] = uint64(i)
	}
	mask := uint64(words - 1)
	x, sum := uint64(1), uint64(0)
	cpu0, ok := processCPU()
	start := time.Now()
	for range reads {
		x = x*6364136223846793005 + 1442695040888963407
		sum += a[(x>>20)&mask]
	}
	wall = time.Since(start)
	cpu1, _ := processCPU()
	memSink = sum
	if !ok {
		return wall, wall
	}
	return cpu1 - cpu0, wall
}
