package http1

import (
	"net"

	"golang.org/x/sys/unix"
)

// SetNotSentLowat sets TCP_NOTSENT_LOWAT on c; 0 restores the system
// default. It is an optimisation: a failure leaves the socket as it was.
func SetNotSentLowat(c *net.TCPConn, n int) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, n)
	})
}
