package dialer

import "syscall"

// setsockoptInt sets an integer socket option on the socket fd, a
// Windows socket handle.
func setsockoptInt(fd uintptr, level, opt, value int) error {
	return syscall.SetsockoptInt(syscall.Handle(fd), level, opt, value)
}
