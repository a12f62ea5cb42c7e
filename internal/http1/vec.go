package http1

import "net"

// Vec writes two buffers with one writev; its fields are reused so that
// a write allocates nothing. A Vec is used by one goroutine at a time.
type Vec struct {
	iov  [2][]byte
	bufs net.Buffers
	join []byte // a and b joined, for connections without writev (TLS)
}

// maxJoin bounds what Vec.Write copies together for a connection without
// writev, so that head and a small body leave in one TLS record.
const maxJoin = 16 << 10

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
		v.join = append(append(v.join[:0], a...), b...)
		n, err := c.Write(v.join)
		return int64(n), err
	}
	v.iov[0], v.iov[1] = a, b
	v.bufs = v.iov[:]
	n, err := v.bufs.WriteTo(c)
	v.iov[0], v.iov[1] = nil, nil
	v.bufs = nil
	return n, err
}
