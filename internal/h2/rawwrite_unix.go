//go:build unix

package h2

import "golang.org/x/sys/unix"

// writeFD is the RawConn.Write callback of rawWriter.write: one write(2)
// of w.p on the non-blocking socket, which takes what fits now.
func (w *rawWriter) writeFD(fd uintptr) bool {
	for {
		n, err := unix.Write(int(fd), w.p)
		if err == unix.EINTR {
			continue
		}
		w.n, w.err = n, err
		return true // never wait: the caller queues what is left
	}
}
