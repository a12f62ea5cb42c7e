package server

import (
	"io"

	"golang.org/x/sys/unix"
)

// recordWaiter is waitRecord's look at a socket's first TLS record.
type recordWaiter struct {
	hdr [5]byte
	err error
}

// ready is the RawConn.Read callback of waitRecord: it peeks at the
// record header and asks the kernel how many bytes are queued, and
// answers false (wait for more) until the whole record is there, or the
// socket has ended or failed.
func (w *recordWaiter) ready(fd uintptr) bool {
	for {
		n, _, err := unix.Recvfrom(int(fd), w.hdr[:], unix.MSG_PEEK)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false
		case err != nil:
			w.err = err
			return true
		case n == 0:
			w.err = io.EOF
			return true
		case n < len(w.hdr):
			return false
		}
		queued, err := unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		if err != nil {
			w.err = err
			return true
		}
		return queued >= len(w.hdr)+(int(w.hdr[3])<<8|int(w.hdr[4]))
	}
}
