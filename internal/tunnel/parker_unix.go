//go:build unix

package tunnel

import (
	"golang.org/x/sys/unix"

	"github.com/rustle-proxy/rustle/internal/rawio"
)

// ready is the RawConn.Read callback of Wait: it peeks at the socket and
// reports whether it has a byte, its end of stream or an error. On Linux
// the peek is raw (rawio.Peek): as the first system call once the poller
// has woken a parked connection's goroutine, an ordinary one wakes the
// runtime's monitor, which then polls every 20 µs while the request is
// served.
func (p *Parker) ready(fd uintptr) bool {
	_, errno := rawio.Peek(fd, p.one[:])
	if errno == unix.EAGAIN {
		return false
	}
	// Bytes or the end of the stream, which the next read takes, or an
	// error, which Wait returns.
	if errno != 0 {
		p.err = errno
	}
	return true
}
