//go:build linux

package rawio

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// Read reads fd once, retrying on EINTR; n is 0 on error. It must be
// called inside a syscall.RawConn callback (where fd is the socket's,
// and stays so for the call), on a non-blocking descriptor.
func Read(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		// The pointer is converted in the call expression, as
		// unsafe.Pointer's rule for system calls requires.
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), 0
	}
}

// Write is Read for write(2).
func Write(fd uintptr, p []byte) (int, syscall.Errno) {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return 0, e
		}
		return int(n), 0
	}
}

// Writer holds what a connection's raw writes need; the zero Writer has
// no socket: Reset gives it one. Writes must not be concurrent with each
// other. A Writer (and an FD) must not be copied once Reset: its
// callbacks are bound to it.
type Writer struct {
	tc *net.TCPConn
	rc syscall.RawConn

	// wp, wn and werr are the current write's buffer and results; write
	// is the RawConn callback, bound once so that a write allocates
	// nothing. iov and niov are the buffers of Writev, and writev its
	// callback.
	wp     []byte
	wn     int
	werr   syscall.Errno
	write  func(uintptr) bool
	iov    [2]syscall.Iovec
	niov   int
	writev func(uintptr) bool
}

// FD holds what a connection's raw reads and writes need. The zero FD
// has no socket: Reset gives it one. One goroutine may read while
// another writes; reads (and writes) must not be concurrent with each
// other.
type FD struct {
	Writer

	// rp, rn and rerr are the current read's buffer and results; read is
	// its callback.
	rp   []byte
	rn   int
	rerr syscall.Errno
	read func(uintptr) bool
}

// Reset makes tc the socket w writes, nil for none. It reports whether w
// can use tc (it has a raw connection).
func (w *Writer) Reset(tc *net.TCPConn) bool {
	w.tc, w.rc = nil, nil
	if tc == nil {
		return false
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return false
	}
	w.tc, w.rc = tc, rc
	if w.write == nil {
		w.write, w.writev = w.writeFD, w.writevFD
	}
	return true
}

// Reset makes tc the socket f reads and writes, nil for none. It reports
// whether f can use tc (it has a raw connection).
func (f *FD) Reset(tc *net.TCPConn) bool {
	if !f.Writer.Reset(tc) {
		return false
	}
	if f.read == nil {
		f.read = f.readFD
	}
	return true
}

// Holds reports whether tc is the socket w writes (Reset took it): a
// caller that may have changed its connection since asks before each
// call, so that bytes never go to another socket.
func (w *Writer) Holds(tc *net.TCPConn) bool { return w.tc == tc && w.rc != nil }

func (f *FD) readFD(fd uintptr) bool {
	f.rn, f.rerr = Read(fd, f.rp)
	return f.rerr != syscall.EAGAIN
}

func (w *Writer) writeFD(fd uintptr) bool {
	w.wn, w.werr = Write(fd, w.wp)
	return w.werr != syscall.EAGAIN
}

func (w *Writer) writevFD(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), uintptr(w.niov))
		if e == syscall.EINTR {
			continue
		}
		w.wn, w.werr = int(n), e
		if e != 0 {
			w.wn = 0
		}
		return e != syscall.EAGAIN
	}
}

// opError wraps err as net.TCPConn's calls do; an error of the poller's
// wait (a deadline, a closed connection) comes from RawConn as an
// *net.OpError already, which is given op.
func (w *Writer) opError(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		oe.Op = op
		return oe
	}
	return &net.OpError{Op: op, Net: "tcp", Source: w.tc.LocalAddr(), Addr: w.tc.RemoteAddr(), Err: err}
}

// Read reads into p as net.TCPConn.Read does: it waits for bytes under
// the connection's read deadline, and returns io.EOF at the end of the
// stream.
func (f *FD) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(p) > 1<<30 {
		p = p[:1<<30]
	}
	f.rp = p
	err := f.rc.Read(f.read)
	f.rp = nil
	switch {
	case err != nil:
		return 0, f.opError("read", err)
	case f.rerr != 0:
		return 0, f.opError("read", os.NewSyscallError("read", f.rerr))
	case f.rn == 0:
		return 0, io.EOF
	}
	return f.rn, nil
}

// Write writes all of p as net.TCPConn.Write does, waiting for room
// under the connection's write deadline.
func (w *Writer) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		w.wp = p[written:min(len(p), written+1<<30)]
		err := w.rc.Write(w.write)
		w.wp = nil
		if err != nil {
			return written, w.opError("write", err)
		}
		if w.werr != 0 {
			return written, w.opError("write", os.NewSyscallError("write", w.werr))
		}
		if w.wn == 0 {
			return written, io.ErrUnexpectedEOF // as poll.FD.Write: no progress
		}
		written += w.wn
	}
	return written, nil
}

// Writev writes a and then b, with one writev(2) where the socket takes
// them, and returns how many of their bytes were written: all unless it
// fails.
func (w *Writer) Writev(a, b []byte) (int64, error) {
	if len(b) == 0 {
		n, err := w.Write(a)
		return int64(n), err
	}
	if len(a) == 0 {
		n, err := w.Write(b)
		return int64(n), err
	}
	var written int64
	for len(a)+len(b) > 0 {
		w.niov = 0
		for _, s := range [2][]byte{a, b} {
			if len(s) > 0 {
				w.iov[w.niov].Base = unsafe.SliceData(s)
				w.iov[w.niov].SetLen(len(s))
				w.niov++
			}
		}
		err := w.rc.Write(w.writev)
		w.iov = [2]syscall.Iovec{}
		if err != nil {
			return written, w.opError("writev", err)
		}
		if w.werr != 0 {
			return written, w.opError("writev", os.NewSyscallError("writev", w.werr))
		}
		n := w.wn
		if n == 0 {
			return written, io.ErrUnexpectedEOF // no progress
		}
		written += int64(n)
		k := min(n, len(a))
		a, n = a[k:], n-k
		b = b[n:]
	}
	return written, nil
}

// conn is a TCP connection whose reads and writes are made through an
// FD, for callers that share a net.Conn between goroutines as net.Conn
// allows: rmu and wmu serialize its Reads and its Writes.
type conn struct {
	*net.TCPConn
	rmu, wmu sync.Mutex
	fd       FD
}

// Wrap returns c with its reads and writes made by an FD: for a caller
// that wants them raw and needs no *net.TCPConn (the benchmark tools).
// c is returned as it is when it is not TCP.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	w := &conn{TCPConn: tc}
	if !w.fd.Reset(tc) {
		return c
	}
	return w
}

// Read is FD.Read.
func (w *conn) Read(p []byte) (int, error) {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	return w.fd.Read(p)
}

// Write is FD.Write.
func (w *conn) Write(p []byte) (int, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return w.fd.Write(p)
}
