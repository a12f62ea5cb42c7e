//go:build !linux

package tunnel

import (
	"os"
	"syscall"
)

// Parker waits for a socket to become readable through its RawConn,
// without reading: its callback answers "not yet" while the socket is
// empty, so the runtime parks the goroutine until the poller reports it
// readable. How it learns that the socket is empty depends on the
// platform: on Unix systems other than Linux it peeks (recvfrom with
// MSG_PEEK and MSG_DONTWAIT), as the Linux Parker does; on Windows it
// answers "not yet" once, and RawConn.Read then waits with a zero-byte
// overlapped read, which completes when the socket has bytes or its
// stream has ended.
type Parker struct {
	rc syscall.RawConn
	fn func(uintptr) bool // p.ready, bound once so that waits do not allocate
	// asked is set once ready has been called during this Wait (the
	// Windows callback's state).
	asked bool
	one   [1]byte
	// err is the socket error the peek reported.
	err error
}

// NewParker returns a Parker for the socket behind rc. A Parker is used by
// one goroutine at a time.
func NewParker(rc syscall.RawConn) *Parker {
	p := &Parker{rc: rc}
	p.fn = p.ready
	return p
}

// Wait returns nil when the socket has bytes to read or its stream has
// ended, and otherwise the socket's error: a reset, closed, or its read
// deadline past. Nothing is read or buffered while it waits.
func (p *Parker) Wait() error {
	p.err, p.asked = nil, false
	if err := p.rc.Read(p.fn); err != nil {
		return err
	}
	if p.err != nil {
		return os.NewSyscallError("recvfrom", p.err)
	}
	return nil
}

// WaitRead is Wait: only Linux's TLS connections read ahead (see
// RecordConn).
func (p *Parker) WaitRead() error { return p.Wait() }
