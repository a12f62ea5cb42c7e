//go:build unix

package server

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// defaultOpenFiles is the open-file limit assumed when getrlimit fails.
const defaultOpenFiles = 1024

// openFileLimit returns the process's soft and hard limits on open files
// (RLIMIT_NOFILE).
func openFileLimit() (soft, hard uint64, err error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("server: getrlimit: %w", err)
	}
	// The fields are signed on some systems (FreeBSD).
	return uint64(lim.Cur), uint64(lim.Max), nil
}
