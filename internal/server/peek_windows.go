package server

import "golang.org/x/sys/windows"

// peeker is peekByte's look at a socket's first byte.
type peeker struct {
	b      [1]byte
	n      int
	err    error
	waited bool
}

// peek is the RawConn.Read callback of peekByte. A Windows socket is not
// in non-blocking mode, so a recv on an empty one would wait without the
// read deadline: the first call answers false, RawConn.Read then waits
// for the socket to become readable (a zero-byte overlapped read, which
// honours the deadline) and calls again, and that call peeks (WSARecv
// with MSG_PEEK, which returns at once now) at the byte there is, or
// sees the end of the stream.
func (p *peeker) peek(fd uintptr) bool {
	if !p.waited {
		p.waited = true
		return false
	}
	buf := windows.WSABuf{Len: uint32(len(p.b)), Buf: &p.b[0]}
	var n uint32
	flags := uint32(windows.MSG_PEEK)
	p.err = windows.WSARecv(windows.Handle(fd), &buf, 1, &n, &flags, nil, nil)
	p.n = int(n)
	return true
}
