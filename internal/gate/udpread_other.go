//go:build !unix

package gate

import "net"

// datagramReader reads the datagrams of a flow's connected UDP socket
// into a buffer of its own (a parked flow holds it; only Unix systems
// wait without one).
type datagramReader struct {
	c   *net.UDPConn
	max int
	buf *[]byte
}

func newDatagramReader(c *net.UDPConn, max int) (*datagramReader, error) {
	b := make([]byte, max+1)
	return &datagramReader{c: c, max: max, buf: &b}, nil
}

// read reads one datagram into the reader's buffer: it returns the
// buffer and the datagram's length, which is more than max for a
// datagram too long.
func (d *datagramReader) read() (*[]byte, int, error) {
	n, err := d.c.Read(*d.buf)
	if err != nil {
		return nil, 0, err
	}
	return d.buf, n, nil
}

// put does nothing: the buffer is the reader's own.
func (d *datagramReader) put(*[]byte) {}
