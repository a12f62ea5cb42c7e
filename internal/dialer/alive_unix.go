//go:build unix

package dialer

import (
	"net"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/rustle-proxy/rustle/internal/rawio"
)

// aliveCheck is the state of one Alive call; pooled, with its callback
// bound once, so that Alive does not allocate.
type aliveCheck struct {
	fn    func(uintptr) bool
	alive bool
	one   [1]byte
}

var aliveChecks = sync.Pool{New: func() any {
	a := new(aliveCheck)
	a.fn = a.peek
	return a
}}

func (a *aliveCheck) peek(fd uintptr) bool {
	// A raw peek (rawio.Peek), made before each reuse of a pooled
	// upstream connection: an ordinary call wakes the runtime's monitor.
	// Nothing to read is the one answer of a live idle connection: a
	// byte, the end of the stream or an error say it is not.
	_, errno := rawio.Peek(fd, a.one[:])
	a.alive = errno == unix.EAGAIN
	return true
}

// Alive reports whether c, an idle upstream connection, is still open
// with nothing unread: false when the origin has closed it (or reset it,
// or sent bytes no request asked for). It does not wait.
func Alive(c *net.TCPConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	a := aliveChecks.Get().(*aliveCheck)
	a.alive = false
	err = rc.Read(a.fn)
	alive := err == nil && a.alive
	aliveChecks.Put(a)
	return alive
}
