package http1

import (
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"

	"github.com/rustle-proxy/rustle/internal/rawio"
)

// SetNotSentLowat sets TCP_NOTSENT_LOWAT on c; 0 restores the system
// default. It is an optimisation: a failure leaves the socket as it was.
func SetNotSentLowat(c *net.TCPConn, n int) {
	rc, err := c.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		rawio.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, n)
	})
}

// Readable waits, under c's read deadline, until c has bytes to read or
// has reached its end, and returns how many can be read at once; at the
// end it returns 0 and io.EOF. A splice limited to that many moves them
// without waiting again, so that each wait for bytes, not the whole
// transfer, is what the deadline bounds.
func Readable(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("wait for bytes: %w", err)
	}
	var n int
	var serr error
	var one [1]byte
	err = rc.Read(func(fd uintptr) bool {
		// While bytes flow, SIOCINQ alone answers; a peek tells an
		// empty socket that must be waited for from one at its end.
		// Both calls are raw (rawio): an ordinary one, the first system
		// call after the poller woke the goroutine, wakes the runtime's
		// monitor, which then polls every 20 µs.
		if k, e := rawio.Queued(fd); e == 0 && k > 0 {
			n = k
			return true
		}
		k, e := rawio.Peek(fd, one[:])
		switch {
		case e == unix.EAGAIN:
			return false
		case e != 0:
			serr = e
		case k == 0:
			serr = io.EOF
		default:
			n = 1 // came between the two calls: at least one byte
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	if serr == io.EOF {
		return 0, io.EOF
	}
	if serr != nil {
		return 0, fmt.Errorf("wait for bytes: %w", serr)
	}
	return n, nil
}
