//go:build unix && !linux

package dialer

import "syscall"

// setsockoptInt sets an integer socket option on the socket fd.
func setsockoptInt(fd uintptr, level, opt, value int) error {
	return syscall.SetsockoptInt(int(fd), level, opt, value)
}
