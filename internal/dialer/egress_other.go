//go:build !linux

package dialer

import (
	"errors"
	"syscall"
)

// freebindSupported and deviceSupported say this platform has
// IP_FREEBIND and SO_BINDTODEVICE: it has neither, and NewSource refuses
// what needs them.
const (
	freebindSupported = false
	deviceSupported   = false
)

// setEgress is never asked for anything here: NewSource refuses
// freebind and interfaces on this platform.
func setEgress(_ syscall.RawConn, _, freebind bool, device string) error {
	if freebind || device != "" {
		return errors.New("dialer: freebind and interface binding are only supported on Linux")
	}
	return nil
}
