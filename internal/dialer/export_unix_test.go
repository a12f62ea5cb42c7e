//go:build unix

package dialer

import "syscall"

func getsockoptInt(fd int) (int, error) {
	return syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF)
}
