//go:build linux

package rawsys

import (
	"io"
	"net"
	"sync"
	"syscall"
	"unsafe"
)

// conn is a TCP connection whose reads and writes are raw,
// non-blocking read(2) and write(2) calls made while the goroutine keeps
// its processor.
//
// A write on loopback, and a read that sends an ACK, delivers the
// segment to the peer in the caller's own softirq, so it often lasts
// longer than the runtime monitor's 20 µs tick. Through net.Conn the
// goroutine is then "in a system call", and with other goroutines
// runnable the monitor hands its processor to another thread: futex
// wake-ups, thread switches and a monitor polling every 20 µs, 10 % of
// the load tool's CPU in the wss-64 row (perf), where the load core
// limited rustle's rate. With raw calls the monitor stays asleep. The
// engine of rustle's tunnels makes its calls the same way
// (internal/tunnel/rawsys_linux.go).
type conn struct {
	*net.TCPConn
	rc syscall.RawConn
	// wmu serializes Writes (net.Conn allows concurrent ones). p, n and
	// errno are the current write's arguments and results, guarded by
	// wmu; write is the RawConn callback, made once so that a write
	// allocates nothing.
	wmu   sync.Mutex
	p     []byte
	n     int
	errno syscall.Errno
	write func(fd uintptr) bool
	// rmu, rp, rn, rerrno and read are the same for Read.
	rmu    sync.Mutex
	rp     []byte
	rn     int
	rerrno syscall.Errno
	read   func(fd uintptr) bool
}

// Wrap wraps c so that its reads and writes are raw system calls; c is
// returned as it is when it is not TCP.
func Wrap(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	w := &conn{TCPConn: tc, rc: rc}
	w.write, w.read = w.writeFD, w.readFD
	return w
}

// writeFD is the RawConn callback: one write(2), false to wait for
// writability on EAGAIN.
func (w *conn) writeFD(fd uintptr) bool {
	for {
		// The pointer is converted in the call expression, as
		// unsafe.Pointer's rule for system calls requires.
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(unsafe.SliceData(w.p))), uintptr(len(w.p)))
		switch e {
		case 0:
			w.n, w.errno = int(n), 0
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		w.n, w.errno = 0, e
		return true
	}
}

// Write writes all of p, waiting for writability when the socket's
// buffer is full; the connection's write deadline applies.
func (w *conn) Write(p []byte) (int, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	written := 0
	for written < len(p) {
		w.p = p[written:]
		if err := w.rc.Write(w.write); err != nil {
			w.p = nil
			return written, &net.OpError{Op: "write", Net: "tcp", Source: w.LocalAddr(), Addr: w.RemoteAddr(), Err: err}
		}
		w.p = nil
		if w.errno != 0 {
			return written, &net.OpError{Op: "write", Net: "tcp", Source: w.LocalAddr(), Addr: w.RemoteAddr(), Err: w.errno}
		}
		written += w.n
	}
	return written, nil
}

// readFD is the RawConn callback of Read: one read(2), false to wait for
// readability on EAGAIN.
func (w *conn) readFD(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(unsafe.SliceData(w.rp))), uintptr(len(w.rp)))
		switch e {
		case 0:
			w.rn, w.rerrno = int(n), 0
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		w.rn, w.rerrno = 0, e
		return true
	}
}

// Read reads into p, waiting for readability; the connection's read
// deadline applies, and a read of 0 bytes at the end of the stream is
// io.EOF.
func (w *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	w.rmu.Lock()
	defer w.rmu.Unlock()
	w.rp = p
	err := w.rc.Read(w.read)
	w.rp = nil
	switch {
	case err != nil:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: w.LocalAddr(), Addr: w.RemoteAddr(), Err: err}
	case w.rerrno != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: w.LocalAddr(), Addr: w.RemoteAddr(), Err: w.rerrno}
	case w.rn == 0:
		return 0, io.EOF
	}
	return w.rn, nil
}
