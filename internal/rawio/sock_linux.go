//go:build linux

package rawio

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Peek is Read for recv(2) with MSG_PEEK: it reads fd's queued bytes into
// p and leaves them queued. It never waits (MSG_DONTWAIT, whatever the
// socket's mode): an empty socket answers EAGAIN, and a raw call that
// blocked would hold its thread where the scheduler cannot see it.
func Peek(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)), syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), 0
	}
}

// Queued returns how many bytes fd has received and not yet read (the
// SIOCINQ ioctl), with a system call the Go scheduler does not see.
func Queued(fd uintptr) (int, syscall.Errno) {
	var n int32
	_, _, e := syscall.RawSyscall(unix.SYS_IOCTL, fd, unix.SIOCINQ, uintptr(unsafe.Pointer(&n)))
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// SetsockoptInt sets the socket option opt at level to value on fd with
// a system call the Go scheduler does not see; for options that never
// block (buffer sizes, flags).
func SetsockoptInt(fd uintptr, level, opt, value int) syscall.Errno {
	v := int32(value)
	_, _, e := syscall.RawSyscall6(unix.SYS_SETSOCKOPT, fd, uintptr(level), uintptr(opt), uintptr(unsafe.Pointer(&v)), unsafe.Sizeof(v), 0)
	return e
}
