//go:build !linux

package dialer

import (
	"errors"
	"syscall"
)

// SetMark fails for a mark other than 0: SO_MARK is Linux's.
func SetMark(_ syscall.RawConn, mark uint32) error {
	if mark == 0 {
		return nil
	}
	return errors.New("dialer: egress.mark needs Linux (SO_MARK)")
}
