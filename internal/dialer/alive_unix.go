//go:build unix && !linux

package dialer

import (
	"net"

	"golang.org/x/sys/unix"
)

// Alive reports whether c, an idle upstream connection, is still open
// with nothing unread: false when the origin has closed it (or reset it,
// or sent bytes no request asked for). It does not wait.
func Alive(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	var one [1]byte
	err = rc.Read(func(fd uintptr) bool {
		for {
			_, _, err := unix.Recvfrom(int(fd), one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
			if err == unix.EINTR {
				continue
			}
			alive = err == unix.EAGAIN
			return true
		}
	})
	return err == nil && alive
}
