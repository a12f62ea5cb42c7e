//go:build unix && !linux

package tunnel

import "golang.org/x/sys/unix"

// ready is the RawConn.Read callback of Wait: it peeks at the socket and
// reports whether it has a byte, its end of stream or an error.
func (p *Parker) ready(fd uintptr) bool {
	for {
		_, _, err := unix.Recvfrom(int(fd), p.one[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		case nil:
		default:
			p.err = err
		}
		return true
	}
}
