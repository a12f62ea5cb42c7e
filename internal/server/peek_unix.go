//go:build unix && !linux

package server

import "golang.org/x/sys/unix"

// peeker is peekByte's look at a socket's first byte.
type peeker struct {
	b   [1]byte
	n   int
	err error
}

// peek is the RawConn.Read callback of peekByte: recv with MSG_PEEK on
// the non-blocking socket, which waits (by answering false) while the
// socket is empty.
func (p *peeker) peek(fd uintptr) bool {
	for {
		p.n, _, p.err = unix.Recvfrom(int(fd), p.b[:], unix.MSG_PEEK)
		if p.err != unix.EINTR {
			return p.err != unix.EAGAIN
		}
	}
}
