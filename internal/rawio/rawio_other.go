//go:build !linux

package rawio

import "net"

// Writer makes a connection's ordinary writes: raw system calls are made
// on Linux only.
type Writer struct {
	tc   *net.TCPConn
	bufs net.Buffers
	iov  [2][]byte
}

// FD makes a connection's ordinary reads and writes.
type FD struct {
	Writer
}

// Reset makes tc the socket w writes, nil for none. It reports whether w
// has one.
func (w *Writer) Reset(tc *net.TCPConn) bool {
	w.tc = tc
	return tc != nil
}

// Holds reports whether tc is the socket w writes (Reset took it): a
// caller that may have changed its connection since asks before each
// call, so that bytes never go to another socket.
func (w *Writer) Holds(tc *net.TCPConn) bool { return w.tc == tc && tc != nil }

// Read is tc.Read.
func (f *FD) Read(p []byte) (int, error) { return f.tc.Read(p) }

// Write is tc.Write.
func (w *Writer) Write(p []byte) (int, error) { return w.tc.Write(p) }

// Writev writes a and then b with net.Buffers (one writev where the
// system has it), and returns how many of their bytes were written.
func (w *Writer) Writev(a, b []byte) (int64, error) {
	w.iov[0], w.iov[1] = a, b
	w.bufs = w.iov[:]
	n, err := w.bufs.WriteTo(w.tc)
	w.iov[0], w.iov[1] = nil, nil
	w.bufs = nil
	return n, err
}

// Wrap returns c: raw system calls are made on Linux only.
func Wrap(c net.Conn) net.Conn { return c }
