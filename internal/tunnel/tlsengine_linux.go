package tunnel

// TLS tunnels on the engine.
//
// Engine.AddTLS relays a tunnel whose client side is TLS (CONNECT on the
// HTTPS port) on the engine's loop, as Add does a plain one, but through
// user space: the client socket is read and written by crypto/tls over
// its RecordConn, switched to engine mode, where its reads and writes use
// the engine's descriptor and never wait. An idle TLS tunnel then holds
// no goroutine and no buffer, only crypto/tls's state.
//
// Upstream to client: the engine reads upstream into a pooled buffer and
// hands the bytes to tls.Conn.Write, whose records go to the socket as far
// as it takes them; the rest waits in a pooled out buffer of the
// RecordConn, crypto/tls being told the write succeeded. While records
// wait there the engine reads no more from upstream, so one write's
// records (a little over 16 KiB) are the most that wait, until EPOLLOUT on
// the client lets them go. Client to upstream: tls.Conn.Read in the
// RecordConn's non-blocking mode decrypts one record at a time into a
// pooled buffer, which is written to upstream; what upstream does not
// take waits in that buffer, and the client is not read meanwhile.
//
// crypto/tls writes by itself too: a KeyUpdate answer while it reads, an
// alert before it fails. Those records go through the same RecordConn
// write and wait behind the others; the client is not read while the out
// buffer is nearly full, so no flood of KeyUpdate requests makes it grow
// without bound (crypto/tls also refuses more than 16 records in a row
// that carry no data).

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

const (
	// tlsOutSize is the capacity of a RecordConn's out buffer in engine
	// mode: the records of one 16 KiB write (16 KiB and up to about 1 KiB
	// of record overhead, dynamic record sizing cutting it into up to 15
	// records), and room for the few records crypto/tls writes by itself.
	tlsOutSize = 20 << 10
	// tlsOutReadLimit: with more than this many bytes waiting in the out
	// buffer the engine does not read from the client, whose records may
	// make crypto/tls write (KeyUpdate answers).
	tlsOutReadLimit = tlsOutSize - 1<<10
	// tlsRounds bounds the records one direction of a TLS tunnel moves
	// per turn (up to 1 MiB) before the engine serves other tunnels.
	tlsRounds = 64
)

// tlsOutPool holds *[tlsOutSize]byte out buffers.
var tlsOutPool = sync.Pool{New: func() any { return new([tlsOutSize]byte) }}

// errWriteShut is a RecordConn's write error once the engine has shut
// down the socket's write half.
var errWriteShut = errors.New("tunnel: TLS socket shut down for writing")

// tlsTunnel is the TLS state of an engine tunnel; owned by the loop.
type tlsTunnel struct {
	conn *tls.Conn
	rc   *recordConn
	// up holds plaintext read from the client that upstream has not
	// taken yet, up[upR:upW]; nil when there is none.
	up       *[tlsBufSize]byte
	upR, upW int
	// downWait is the plaintext whose records wait in rc's out buffer:
	// counted as delivered once they are written.
	downWait int64
	// notified: close_notify has been written (to rc) after upstream's
	// end of stream.
	notified bool
	// stalled: the client was readable but not read, the out buffer
	// being nearly full.
	stalled bool
}

// AddTLS hands a TLS tunnel to the engine: client, a tls.Conn whose
// handshake is complete, made over [RecordConn](raw), and upstream, a
// plain TCP connection. It relays it as [RelayTLS] does (half-close, resets
// and idle timeout alike; [Result] counts plaintext delivered each way),
// on the engine's loop instead of two goroutines: an idle TLS tunnel holds
// no goroutine and no buffer. Plaintext that the caller has already read
// from client into its own buffers must be written to upstream before the
// call; plaintext still inside client is relayed first. The cut function
// and done are as for [Engine.AddCut].
//
// On success the engine owns client, raw and upstream (raw and upstream
// are closed; the caller must not use any of them again). If AddTLS
// returns an error it has closed nothing and done is never called: the
// caller still owns the connections and may relay them with [RelayTLS].
func (e *Engine) AddTLS(client *tls.Conn, raw *net.TCPConn, upstream *net.TCPConn, done func(Result)) (cut func(), err error) {
	h, err := e.AddTLSOwned(client, raw, upstream, owner(done))
	if err != nil {
		return nil, err
	}
	return h.Cut, nil
}

// AddTLSOwned is AddTLS for a caller that keeps an object of its own per
// tunnel, as [Engine.AddOwned] is AddMetered's.
func (e *Engine) AddTLSOwned(client *tls.Conn, raw *net.TCPConn, upstream *net.TCPConn, o Owner) (Handle, error) {
	if client == nil || raw == nil || upstream == nil {
		return Handle{}, errors.New("tunnel: AddTLS: nil connection")
	}
	rc, ok := client.NetConn().(*recordConn)
	if !ok || rc.tc != raw || rc.nonBlock || rc.eng {
		return Handle{}, errors.New("tunnel: AddTLS needs a tls.Conn made over RecordConn(raw), not relayed yet")
	}
	if !client.ConnectionState().HandshakeComplete {
		return Handle{}, errors.New("tunnel: AddTLS before the TLS handshake completed")
	}
	cfd, cerr := dupFD(raw)
	ufd, uerr := dupFD(upstream)
	if err := errors.Join(cerr, uerr); err != nil {
		closeFD(cfd)
		closeFD(ufd)
		return Handle{}, err
	}
	t := &tunnel{
		fd:      [2]int32{int32(cfd), int32(ufd)},
		owner:   o,
		idx:     -1,
		started: e.clock(),
		tls:     &tlsTunnel{conn: client, rc: rc},
	}
	rc.eng, rc.efd, rc.ready = true, cfd, &t.ready[0]

	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		rc.eng, rc.efd, rc.ready = false, 0, nil
		closeFD(cfd)
		closeFD(ufd)
		return Handle{}, ErrClosed
	}
	e.pending = append(e.pending, t)
	e.open.Add(1)
	if len(e.pending) == 1 {
		e.wakeLocked()
	}
	e.mu.Unlock()
	// The engine relays on its own descriptors; these leave Go's poller.
	raw.Close()
	upstream.Close()
	return Handle{e, t}, nil
}

// runTLS is run for a TLS tunnel.
func (e *Engine) runTLS(t *tunnel) {
	more0, err := e.pumpTLSUp(t)
	more1 := false
	if err == nil {
		more1, err = e.pumpTLSDown(t)
	}
	if err == nil && t.tls.stalled && t.tls.rc.outLen() <= tlsOutReadLimit {
		// The client was not read for want of out room, which the
		// other direction has made since: read it next turn.
		more0 = true
	}
	e.endTurn(t, more0 || more1, err)
}

// pumpTLSUp moves plaintext from the TLS client to upstream.
func (e *Engine) pumpTLSUp(t *tunnel) (more bool, err error) {
	dr, ts := &t.dir[0], t.tls
	if dr.ended {
		return false, nil
	}
	ufd := int(t.fd[1])
	for range tlsRounds {
		if ts.up != nil {
			if t.ready[1]&canWrite == 0 {
				return false, nil
			}
			n, err := writeFD(ufd, ts.up[ts.upR:ts.upW])
			if n > 0 {
				ts.upR += n
				dr.n += int64(n)
				t.moved = true
			}
			switch {
			case err == unix.EAGAIN:
				t.ready[1] &^= canWrite
				return false, nil
			case err != nil:
				return false, fmt.Errorf("tunnel: TLS tunnel: write to upstream: %w", err)
			case ts.upR < ts.upW:
				// A short write: the send queue is full.
				t.ready[1] &^= canWrite
				return false, nil
			}
			tlsBufPool.Put(ts.up)
			ts.up, ts.upR, ts.upW = nil, 0, 0
		}
		if dr.eof {
			if err := shutdownWrite(ufd); err != nil {
				return false, fmt.Errorf("tunnel: TLS tunnel: shut down writes to upstream: %w", err)
			}
			dr.ended = true
			return false, nil
		}
		if t.ready[0]&canRead == 0 {
			return false, nil
		}
		if ts.stalled = ts.rc.outLen() > tlsOutReadLimit; ts.stalled {
			return false, nil
		}
		buf := tlsBufPool.Get().(*[tlsBufSize]byte)
		n, rerr := ts.conn.Read(buf[:])
		if n > 0 {
			ts.up, ts.upR, ts.upW = buf, 0, n
			t.moved = true
		} else {
			tlsBufPool.Put(buf)
		}
		switch {
		case rerr == nil:
		case rerr == errWouldBlock:
			t.ready[0] &^= canRead
		case rerr == io.EOF:
			// close_notify, or a FIN at a record boundary.
			dr.eof = true
		default:
			return false, fmt.Errorf("tunnel: TLS tunnel: read from client: %w", rerr)
		}
	}
	return true, nil
}

// pumpTLSDown moves bytes from upstream to the TLS client.
func (e *Engine) pumpTLSDown(t *tunnel) (more bool, err error) {
	dr, ts := &t.dir[1], t.tls
	if dr.ended {
		return false, nil
	}
	rc, ufd := ts.rc, int(t.fd[1])
	for range tlsRounds {
		if rc.outLen() > 0 {
			n, err := rc.flushOut()
			if n > 0 {
				t.moved = true
			}
			if err != nil {
				return false, fmt.Errorf("tunnel: TLS tunnel: write to client: %w", err)
			}
			if rc.outLen() > 0 {
				return false, nil // wait for EPOLLOUT
			}
			dr.n += ts.downWait
			ts.downWait = 0
		}
		if dr.eof {
			if !ts.notified {
				// Like RelayTLS, a client that is gone by now (it
				// answers with a reset) is no failure of this
				// direction: every byte has been delivered.
				ts.notified = true
				ts.conn.CloseWrite()
				continue
			}
			unix.Shutdown(rc.efd, unix.SHUT_WR)
			rc.wshut = true
			dr.ended = true
			return false, nil
		}
		if t.ready[1]&canRead == 0 {
			return false, nil
		}
		buf := tlsBufPool.Get().(*[tlsBufSize]byte)
		n, rerr := readFD(ufd, buf[:])
		if n > 0 {
			_, werr := ts.conn.Write(buf[:n])
			tlsBufPool.Put(buf)
			if werr != nil {
				return false, fmt.Errorf("tunnel: TLS tunnel: write to client: %w", werr)
			}
			t.moved = true
			if rc.outLen() == 0 {
				dr.n += int64(n)
			} else {
				ts.downWait += int64(n)
			}
			if n < tlsBufSize && t.ready[1]&sawHup == 0 {
				// Upstream had no more (see pump).
				t.ready[1] &^= canRead
			}
			continue
		}
		tlsBufPool.Put(buf)
		switch rerr {
		case nil:
			dr.eof = true
		case unix.EAGAIN:
			t.ready[1] &^= canRead
		default:
			return false, fmt.Errorf("tunnel: TLS tunnel: read from upstream: %w", rerr)
		}
	}
	return true, nil
}

// releaseTLS gives back the buffers of a finished TLS tunnel.
func releaseTLS(ts *tlsTunnel) {
	if ts.up != nil {
		tlsBufPool.Put(ts.up)
		ts.up = nil
	}
	ts.rc.release()
}

// engineReadAhead is readAhead in engine mode: it reads the engine's
// descriptor without waiting.
func (c *recordConn) engineReadAhead() error {
	if c.drained {
		c.drained = false
		return errWouldBlock
	}
	if c.ahead == nil {
		c.ahead = tlsBufPool.Get().(*[tlsBufSize]byte)
	}
	n, err := readFD(c.efd, c.ahead[:])
	if n <= 0 {
		tlsBufPool.Put(c.ahead)
		c.ahead = nil
		switch err {
		case nil:
			return io.EOF
		case unix.EAGAIN:
			return errWouldBlock
		}
		return c.opError(os.NewSyscallError("read", err))
	}
	c.ar, c.aw = 0, n
	// A short read emptied the socket: the next read would get EAGAIN,
	// and bytes that come later bring a new edge. A peer's FIN that came
	// before brings none, hence sawHup (see pump).
	c.drained = n < tlsBufSize && *c.ready&sawHup == 0
	return nil
}

// engineWrite is Write in engine mode: it writes what the socket takes
// and keeps the rest in the out buffer, reporting p written; the engine
// writes the out buffer once the socket is writable again.
func (c *recordConn) engineWrite(p []byte) (int, error) {
	if c.wshut {
		return 0, errWriteShut
	}
	total := len(p)
	if c.outLen() == 0 && *c.ready&canWrite != 0 {
		n, err := writeFD(c.efd, p)
		switch {
		case err == unix.EAGAIN:
			*c.ready &^= canWrite
		case err != nil:
			return 0, &net.OpError{Op: "write", Net: "tcp", Source: c.tc.LocalAddr(), Addr: c.tc.RemoteAddr(), Err: os.NewSyscallError("write", err)}
		default:
			p = p[n:]
			if len(p) > 0 {
				*c.ready &^= canWrite
			}
		}
	}
	if len(p) > 0 {
		if c.out == nil {
			c.out = tlsOutPool.Get().(*[tlsOutSize]byte)[:0]
		}
		// Beyond tlsOutSize (never, by the engine's rules) append
		// grows it from the heap.
		c.out = append(c.out, p...)
	}
	return total, nil
}

// outLen returns the bytes waiting in the out buffer.
func (c *recordConn) outLen() int { return len(c.out) - c.outR }

// flushOut writes the out buffer while the socket takes it and returns
// how many bytes it wrote.
func (c *recordConn) flushOut() (int, error) {
	if *c.ready&canWrite == 0 {
		return 0, nil
	}
	n, err := writeFD(c.efd, c.out[c.outR:])
	switch {
	case err == unix.EAGAIN:
		*c.ready &^= canWrite
		return 0, nil
	case err != nil:
		return 0, err
	}
	c.outR += n
	if c.outLen() > 0 {
		*c.ready &^= canWrite
		return n, nil
	}
	c.putOut()
	return n, nil
}

// putOut gives the empty out buffer back.
func (c *recordConn) putOut() {
	if cap(c.out) == tlsOutSize {
		tlsOutPool.Put((*[tlsOutSize]byte)(c.out[:tlsOutSize]))
	}
	c.out, c.outR = nil, 0
}

// release gives back the buffers of a connection whose tunnel ended.
func (c *recordConn) release() {
	if c.out != nil {
		c.putOut()
	}
	if c.ahead != nil {
		tlsBufPool.Put(c.ahead)
		c.ahead, c.ar, c.aw = nil, 0, 0
	}
	c.wshut = true
}

// shutdownWrite shuts down fd's write half; for a reset socket it returns
// the socket's pending error when there is one.
func shutdownWrite(fd int) error {
	err := unix.Shutdown(fd, unix.SHUT_WR)
	if err == unix.ENOTCONN {
		if soErr, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR); soErr != 0 {
			err = unix.Errno(soErr)
		}
	}
	return err
}
