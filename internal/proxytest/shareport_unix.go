//go:build unix

package proxytest

import (
	"fmt"
	"net"
	"syscall"
)

// PortSharingDialer returns a dialer for TCP connections from 127.0.0.1
// port (0: one the kernel picks) whose sockets set SO_REUSEADDR before
// they bind, so that connections of two such dialers to different
// addresses may have the same local port, as the kernel gives them by
// itself now and then: on one host, a client's address and port alone
// do not tell which of two listeners its connection is to. ok is false
// where sockets cannot share a port this way (not on Unix).
func PortSharingDialer(port uint16) (d *net.Dialer, ok bool) {
	return &net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)},
		Control: func(_, address string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
			}); err != nil {
				return fmt.Errorf("control socket for %s: %w", address, err)
			}
			if serr != nil {
				return fmt.Errorf("set SO_REUSEADDR on socket for %s: %w", address, serr)
			}
			return nil
		},
	}, true
}
