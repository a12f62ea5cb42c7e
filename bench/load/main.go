// Command load is the benchmark campaign's Go load tool, for the tests wrk
// cannot run: it opens CONNECT tunnels through a proxy (or, with an empty
// -proxy, straight to the target, for the "no proxy" column).
//
// Subcommands:
//
//	load bulk -proxy ADDR -auth USER:PASS -target SINK -stats URL -conns N -duration D
//
// opens N tunnels to the origin's sink, writes as fast as it can through all
// of them for D and prints one JSON line (BulkResult): the throughput is the
// growth of the sink's byte counter, read from the origin's /_stats URL at
// the start and the end of the window.
//
//	load hold -proxy ADDR -auth USER:PASS -target HOLD -steps 1000,5000,9000
//
// opens tunnels to the origin's hold port, sends one small message through
// each and waits for its echo, then leaves them idle. After reaching each
// step it prints one JSON line (HoldStep) and waits for a line on stdin
// before going on; after the last step it waits for stdin to close, then
// closes every tunnel and exits. The caller measures the proxy's memory at
// each step.
//
// Both subcommands are bounded by -timeout.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "bulk":
		err = runBulk(os.Args[2:])
	case "hold":
		err = runHold(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: load bulk|hold [flags]; load bulk -h for the flags")
	os.Exit(2)
}
