//go:build unix

package wire

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// DefaultOpenFiles is the open-file limit assumed when getrlimit fails.
const DefaultOpenFiles = 1024

// OpenFileLimit returns the process's soft and hard limits on open files
// (RLIMIT_NOFILE).
func OpenFileLimit() (soft, hard uint64, err error) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0, 0, fmt.Errorf("wire: getrlimit: %w", err)
	}
	// The fields are signed on some systems (FreeBSD).
	return uint64(lim.Cur), uint64(lim.Max), nil
}
