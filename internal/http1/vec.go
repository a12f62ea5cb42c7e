package http1

import (
	"net"
	"sync"
)

// Vec writes two buffers with one writev; its fields are reused so that
// a write allocates nothing. A Vec is used by one goroutine at a time.
type Vec struct {
	iov  [2][]byte
	bufs net.Buffers
}

// maxJoin bounds what Vec.Write copies together for a connection without
// writev, so that head and a small body leave in one TLS record.
const maxJoin = 16 << 10

// joinBufs holds the buffers Vec.Write joins two buffers in, for a
// connection without writev (TLS): borrowed for one write, so that a
// connection idle between writes holds none (an idle intercepted
// connection would otherwise keep its last answer's size).
var joinBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// Write writes a and b to c with one system call where it can, and
// returns how many of their bytes were written: all unless it fails.
func (v *Vec) Write(c net.Conn, a, b []byte) (int64, error) {
	if len(b) == 0 {
		n, err := c.Write(a)
		return int64(n), err
	}
	if len(a) == 0 {
		n, err := c.Write(b)
		return int64(n), err
	}
	if _, ok := c.(*net.TCPConn); !ok {
		if len(a)+len(b) > maxJoin {
			n, err := c.Write(a)
			if err != nil {
				return int64(n), err
			}
			m, err := c.Write(b)
			return int64(n + m), err
		}
		bp := joinBufs.Get().(*[]byte)
		join := append(append((*bp)[:0], a...), b...)
		n, err := c.Write(join)
		*bp = join[:0]
		joinBufs.Put(bp)
		return int64(n), err
	}
	v.iov[0], v.iov[1] = a, b
	v.bufs = v.iov[:]
	n, err := v.bufs.WriteTo(c)
	v.iov[0], v.iov[1] = nil, nil
	v.bufs = nil
	return n, err
}

// WriteConn is Write to c.C; on a TCP connection with raw, non-blocking
// system calls (package rawio). One goroutine writes c at a time.
func (v *Vec) WriteConn(c *Conn, a, b []byte) (int64, error) {
	if c.TCP == nil || c.fd == nil || !c.fd.Holds(c.TCP) {
		return v.Write(c.C, a, b)
	}
	return c.fd.Writev(a, b)
}
