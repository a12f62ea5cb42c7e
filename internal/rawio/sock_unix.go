//go:build unix && !linux

package rawio

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Peek is Read for recv(2) with MSG_PEEK: it reads fd's queued bytes into
// p and leaves them queued. It never waits (MSG_DONTWAIT): an empty
// socket answers EAGAIN. Elsewhere than on Linux it is an ordinary
// system call.
func Peek(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		// recvfrom(2) without an address: unix.Recvfrom would allocate
		// one on each call.
		n, _, e := unix.Syscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)), unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), 0
	}
}
