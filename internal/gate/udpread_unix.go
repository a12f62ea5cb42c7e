//go:build unix

package gate

import (
	"errors"
	"net"
	"syscall"
)

// datagramReader reads the datagrams of a flow's connected UDP socket
// into buffers it takes from a pool only once a datagram is there: a
// flow parked on its socket holds no buffer (see readDatagram).
type datagramReader struct {
	rc  syscall.RawConn
	max int // the largest datagram wanted; one more byte tells a longer one apart
}

func newDatagramReader(c *net.UDPConn, max int) (*datagramReader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &datagramReader{rc: rc, max: max}, nil
}

// read waits until the socket is readable, holding no buffer, then reads
// one datagram into a pooled buffer: it returns the buffer (to be given
// back with put) and the datagram's length, which is more than max for a
// datagram too long.
func (d *datagramReader) read() (*[]byte, int, error) {
	var bp *[]byte
	var n int
	var rerr error
	err := d.rc.Read(func(fd uintptr) bool {
		b := getDatagramBuf(d.max + 1)
		for {
			n, rerr = syscall.Read(int(fd), *b)
			if rerr != syscall.EINTR {
				break
			}
		}
		if errors.Is(rerr, syscall.EAGAIN) {
			putDatagramBuf(b)
			return false // wait for the socket, holding nothing
		}
		bp = b
		return true
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		if bp != nil {
			putDatagramBuf(bp)
		}
		return nil, 0, err
	}
	return bp, n, nil
}

// put gives back a buffer of read.
func (d *datagramReader) put(bp *[]byte) { putDatagramBuf(bp) }
