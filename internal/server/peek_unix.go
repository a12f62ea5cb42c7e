//go:build unix

package server

import (
	"syscall"

	"github.com/rustle-proxy/rustle/internal/rawio"
)

// peeker is peekByte's look at a socket's first byte.
type peeker struct {
	b   [1]byte
	n   int
	err error
}

// peek is the RawConn.Read callback of peekByte: recv with MSG_PEEK on
// the non-blocking socket, which waits (by answering false) while the
// socket is empty. The call is raw (rawio.Peek): as the first system
// call once the poller has woken a connection's goroutine, an ordinary
// one woke the runtime's monitor (a futex wake-up, then its 20 µs
// polling) on most new connections.
func (p *peeker) peek(fd uintptr) bool {
	n, e := rawio.Peek(fd, p.b[:])
	if e == syscall.EAGAIN {
		return false
	}
	p.n, p.err = n, nil
	if e != 0 {
		p.err = e
	}
	return true
}
