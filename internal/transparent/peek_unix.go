//go:build unix

package transparent

import (
	"net"

	"golang.org/x/sys/unix"

	"github.com/rustle-proxy/rustle/internal/rawio"
)

// peek is what peekKind saw of a connection's first bytes.
type peek struct {
	b   [maxMethod + 1]byte
	n   int
	err error
}

// peekKind waits for c's first bytes and says what they begin, leaving
// them unread (recv with MSG_PEEK), and how many of them it saw (at most
// maxMethod+1): it waits on while they are the start of a method and no
// more. The wait is bounded by c's read deadline; on its end the error
// is the deadline's, and kind what the bytes there are (kindOther for a
// start that never became a method and its space, or for none).
func peekKind(c *net.TCPConn) (kind, n int, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return kindNothing, 0, err
	}
	var p peek
	err = rc.Read(p.look)
	switch {
	case p.err == nil && p.n == 0 && err == nil:
		return kindNothing, 0, nil // the client closed first
	case p.err != nil && p.err != unix.EAGAIN:
		return kindNothing, 0, p.err
	}
	kind = firstKind(p.b[:p.n])
	if kind == kindMore {
		kind = kindOther
	}
	return kind, p.n, err
}

// look is peekKind's RawConn.Read callback: it answers false, to wait
// for the socket to be readable again, while the bytes there do not tell
// yet.
func (p *peek) look(fd uintptr) bool {
	// A raw peek on Linux (rawio.Peek), as server's peekByte makes: the
	// first system call of a new connection's goroutine, made ordinary,
	// wakes the runtime's monitor.
	n, e := rawio.Peek(fd, p.b[:])
	p.n, p.err = n, nil
	if e != 0 {
		p.err = e
	}
	switch {
	case p.err == unix.EAGAIN:
		p.n = 0
		return false
	case p.err != nil || p.n == 0:
		return true
	}
	return firstKind(p.b[:p.n]) != kindMore || p.n == len(p.b)
}
