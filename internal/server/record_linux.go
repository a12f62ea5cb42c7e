package server

import (
	"io"
	"syscall"

	"github.com/rustle-proxy/rustle/internal/rawio"
)

// recordWaiter is waitRecord's look at a socket's first TLS record.
type recordWaiter struct {
	hdr [5]byte
	err error
}

// ready is the RawConn.Read callback of waitRecord: it peeks at the
// record header and asks the kernel how many bytes are queued, and
// answers false (wait for more) until the whole record is there, or the
// socket has ended or failed. Both calls are raw (rawio), for the reason
// peeker.peek's is.
func (w *recordWaiter) ready(fd uintptr) bool {
	n, e := rawio.Peek(fd, w.hdr[:])
	switch {
	case e == syscall.EAGAIN:
		return false
	case e != 0:
		w.err = e
		return true
	case n == 0:
		w.err = io.EOF
		return true
	case n < len(w.hdr):
		return false
	}
	queued, e := rawio.Queued(fd)
	if e != 0 {
		w.err = e
		return true
	}
	return queued >= len(w.hdr)+(int(w.hdr[3])<<8|int(w.hdr[4]))
}
