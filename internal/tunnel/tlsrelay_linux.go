package tunnel

// TLS tunnels.
//
// A tunnel whose client side is TLS (CONNECT on the HTTPS proxy port) cannot
// be spliced: its bytes must be decrypted and encrypted in user space. The
// engine relays it on its loop (Engine.AddTLS, tlsengine_linux.go); where
// there is no engine, or it refuses, RelayTLS relays it with one goroutine
// per direction, but without a buffer per idle direction: each direction
// parks on socket readiness (a RawConn.Read callback that reports "not
// yet") and borrows a pooled buffer only once there are bytes to move.
//
// The difficulty is crypto/tls's read-ahead: tls.Conn reads from its
// net.Conn as much as fits in its input buffer, so it may hold a complete
// record, or several, that it has not decrypted yet while the socket itself
// is empty. A relay that waits for socket readiness before calling
// tls.Conn.Read would then sleep on data it already has. Two things prevent
// that here. RecordConn never lets crypto/tls read past the end of the
// current record, so tls.Conn never holds a complete undecrypted record
// beyond the one it asked for; and during RelayTLS its reads do not wait:
// when the socket is empty they fail with a temporary error, which
// crypto/tls passes up without breaking the connection, so tls.Conn.Read
// returns instead of blocking on a record that is only partly there or on
// a post-handshake message (a KeyUpdate) that carries no data. The relay
// reads first and parks only after such an "empty" answer, and the buffer
// it reads into is at least the largest record plaintext, so no decrypted
// byte stays behind in tls.Conn either.
//
// Measured with 500 idle tunnels (TestRelayTLSIdleMemory, Go heap and
// stacks of the relaying process): about 16 KiB per tunnel after the
// handshake or after downloads. crypto/tls keeps its input buffer, grown
// to the largest record the client sent, for the connection's life, so a
// tunnel that carried uploads in full-size records keeps about 16 KiB more
// (30 KiB more when the client grew its records step by step, as Go
// clients do, since the buffer grows by doubling).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/internal/rawio"
	"golang.org/x/sys/unix"
)

const (
	// recordTypeHandshake is the content type of a handshake record.
	recordTypeHandshake = 22

	// tlsBufSize is the size of the relay's pooled buffers; it must be
	// at least the largest TLS record plaintext (2^14 bytes), so that one
	// tls.Conn.Read takes a whole record's plaintext.
	tlsBufSize = 16 << 10
)

// tlsBufPool holds *[tlsBufSize]byte buffers, borrowed only while bytes
// are being moved.
var tlsBufPool = sync.Pool{New: func() any { return new([tlsBufSize]byte) }}

// errWouldBlock is what a RecordConn in non-blocking mode returns when its
// socket has nothing to read (ErrWouldBlock).
var errWouldBlock = ErrWouldBlock

// rawReader reads a socket without waiting, through its RawConn. Its
// fields are owned by the one goroutine that reads the socket.
type rawReader struct {
	rc  syscall.RawConn
	fn  func(uintptr) bool // r.read, bound once so that reads do not allocate
	p   []byte
	n   int
	err error
}

func newRawReader(c *net.TCPConn) (*rawReader, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &rawReader{rc: rc}
	r.fn = r.read
	return r, nil
}

func (r *rawReader) read(fd uintptr) bool {
	for {
		n, err := unix.Read(int(fd), r.p)
		if err == unix.EINTR {
			continue
		}
		r.n, r.err = max(n, 0), err
		return true
	}
}

// readNow reads what the socket has, at most len(p) bytes, without waiting.
// It returns errWouldBlock if the socket has nothing, io.EOF at the end of
// the stream, and the RawConn's error (net.ErrClosed, a deadline) if the
// socket was closed or its read deadline has passed.
func (r *rawReader) readNow(p []byte) (int, error) {
	r.p = p
	err := r.rc.Read(r.fn)
	n, rerr := r.n, r.err
	r.p, r.n, r.err = nil, 0, nil
	switch {
	case err != nil:
		return 0, err
	case rerr == unix.EAGAIN:
		return 0, errWouldBlock
	case rerr != nil:
		return 0, os.NewSyscallError("read", rerr)
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// Parker waits for a socket to become readable through its RawConn,
// without reading: its callback peeks at the socket and answers "not yet"
// while it is empty, so the runtime parks the goroutine until the poller
// reports it readable. The peek must happen inside the same RawConn.Read
// as the wait: each RawConn.Read starts by clearing the poller's
// readiness note, so a separate "read, got EAGAIN, then wait" would lose a
// wake-up for bytes that arrived in between.
type Parker struct {
	rc  syscall.RawConn
	fn  func(uintptr) bool // p.ready, bound once so that waits do not allocate
	one [1]byte
	// ahead, for a TLS connection's Parker (TLSParker), holds bytes read
	// from the socket before the wait; nil otherwise.
	ahead *recordConn
	// rfn is p.readAhead, bound on WaitRead's first call.
	rfn func(uintptr) bool
	// err is the socket error the peek reported. The kernel reports a
	// pending error (a reset) only once, so the peek must keep it: the
	// next read would see a plain end of stream instead.
	err error
	// peekFn is p.peek, bound on Ready's first call; peeked its result.
	peekFn func(uintptr)
	peeked bool
	// inSet says that the socket is in the epoll set of Notify's loop,
	// disabled once its last wait's event fired (see notifier.add);
	// guarded by that loop's mutex.
	inSet bool
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
	p.err = nil
	if p.ahead != nil && p.ahead.held() {
		return nil
	}
	if err := p.rc.Read(p.fn); err != nil {
		return err
	}
	if p.err != nil {
		return os.NewSyscallError("recvfrom", p.err)
	}
	return nil
}

// recordConn is the net.Conn that RecordConn returns.
type recordConn struct {
	tc *net.TCPConn
	rc syscall.RawConn // tc's; nil if it has none (then reads go to tc)

	// The fields below are owned by the reading goroutine.
	bounds RecordBounds
	hello  helloSplit // the connection's first record, as Read hands it out
	// ahead holds bytes read from the socket that crypto/tls has not
	// asked for yet, ahead[ar:aw]; nil when there are none: it is
	// borrowed from tlsBufPool for one read and given back as soon as it
	// is empty, so an idle connection holds no buffer.
	ahead  *[tlsBufSize]byte
	ar, aw int
	// fillFn is c.fill, bound once so that reads do not allocate; fillN
	// and fillErr are its results.
	fillFn  func(uintptr) bool
	fillN   int
	fillErr error
	// fillNowFn is c.fill as a RawConn.Control callback (readNow's),
	// bound on first use.
	fillNowFn func(uintptr)
	// drained: in non-blocking mode, the last read from the socket
	// returned fewer bytes than it asked for, so the socket was empty
	// then: the next read answers errWouldBlock at once, and the caller's
	// Parker (which looks at the socket before it parks) sees what came
	// since.
	drained bool
	// nonBlock, when set (by RelayTLS, before its reads start), makes
	// Read return errWouldBlock instead of waiting for bytes.
	nonBlock bool

	// eng is set by Engine.AddTLS, before the engine's loop uses the
	// connection: from then on the connection reads and writes efd, the
	// engine's descriptor of the socket (tc is closed), without waiting,
	// and is used by the loop goroutine only. ready points at the
	// engine's readiness bits of the client side (canWrite, sawHup).
	eng   bool
	efd   int
	ready *uint8
	// out holds records crypto/tls wrote that the socket did not take
	// yet, out[outR:]; nil when there are none: borrowed from
	// tlsOutPool and given back once written (engine mode only).
	out   []byte
	outR  int
	wshut bool // the engine shut down the socket's write half

	// outer, for a connection whose bytes are another TLS connection's
	// plaintext (RecordConnTLS), is that connection, which readAhead
	// reads instead of the socket and which Write, Close and the
	// deadlines go to; under is the recordConn outer reads, whose socket
	// (tc, rc) this one shares for its Parkers; nil otherwise.
	// outerDrained says that outer holds no plaintext: it is set once
	// readAhead has read outer into a buffer that takes a whole
	// record's (before that outer may hold what was left of the
	// record its reader read last, before this connection took it).
	outer        *tls.Conn
	under        *recordConn
	outerDrained bool

	// wfd makes Write's system calls raw ones (package rawio), for the
	// goroutine that writes; it holds no socket over another TLS
	// connection or in engine mode.
	wfd rawio.Writer
}

// RecordConn wraps c for tls.Server (or tls.Client) so that crypto/tls
// never reads ahead past the record it is reading: each Read returns at
// most the rest of the current TLS record's 5-byte header and its body
// (the body only as far as it was read ahead), or the rest of its body.
// A connection that may later become a TLS tunnel must be wrapped this way
// from the start; [RelayTLS] and [Engine.AddTLS] require it.
//
// The socket itself is read ahead, as much as it has (up to 16 KiB), into
// a pooled buffer that is given back as soon as crypto/tls has taken its
// bytes: one read system call per record or fewer, rather than one for
// each header and one for each body, and a record read ahead whole is
// handed to crypto/tls in one Read (crypto/tls then asks for the body
// no more: each of its asks costs it an allocation). Bounding crypto/tls's reads saves
// memory: its input buffer is then empty at each record start and is
// reused from its start; with the next header already in it, it would
// grow by doubling as each body arrives (measured: 48 KiB instead of 32
// KiB kept per connection after a Go client's bulk upload). A reader that
// parks on the socket's readiness must use [TLSParker], which sees the
// bytes read ahead.
func RecordConn(c *net.TCPConn) net.Conn {
	rc := &recordConn{tc: c}
	if raw, err := c.SyscallConn(); err == nil {
		rc.rc = raw
		rc.fillFn = rc.fill
		rc.wfd.Reset(c)
	}
	return rc
}

// RecordConnRead is RecordConn for a connection whose first bytes, read
// already (a ClientHello read to see where its tunnel goes), are read
// first: they wait as bytes read ahead do, in a pooled buffer. It
// returns nil when read does not fit one (16 KiB), or c has no raw
// connection to read ahead with; the caller then reads c as it is.
func RecordConnRead(c *net.TCPConn, read []byte) net.Conn {
	rc := &recordConn{tc: c}
	raw, err := c.SyscallConn()
	if err != nil || len(read) > tlsBufSize {
		return nil
	}
	rc.rc = raw
	rc.fillFn = rc.fill
	rc.wfd.Reset(c)
	if len(read) > 0 {
		rc.ahead = tlsBufPool.Get().(*[tlsBufSize]byte)
		rc.aw = copy(rc.ahead[:], read)
	}
	return rc
}

// RecordConnTLS is RecordConnRead for a TLS connection inside c, a TLS
// connection made over [RecordConn] (an intercepted tunnel that came by
// a CONNECT on the https port: the client's TLS to the origin runs
// inside its TLS to the proxy): the inner connection reads c's
// plaintext, never past the end of its own record, and its Write,
// Close and deadlines are c's. It reads c's plaintext a record at a
// time into a pooled buffer that takes a whole record's (given back
// once crypto/tls has taken its bytes), so that c holds no plaintext
// between two of its reads; once it has, it waits for c's socket to
// have bytes holding no buffer. So a Parker ([RecordParker]) of the
// inner connection sees every byte held above the socket: those read
// ahead for c, and those of c's plaintext read ahead for the inner
// connection; it waits on c's socket. It returns nil when read does
// not fit a buffer (16 KiB), or c is not made over RecordConn (or is
// in the engine's hands); the caller then reads c as it is.
func RecordConnTLS(c *tls.Conn, read []byte) net.Conn {
	under, ok := c.NetConn().(*recordConn)
	if !ok || under.rc == nil || under.eng || under.outer != nil || len(read) > tlsBufSize {
		return nil
	}
	rc := &recordConn{tc: under.tc, rc: under.rc, outer: c, under: under}
	if len(read) > 0 {
		rc.ahead = tlsBufPool.Get().(*[tlsBufSize]byte)
		rc.aw = copy(rc.ahead[:], read)
	}
	return rc
}

// RawTCP returns the TCP socket under a TLS connection made over
// [RecordConn], which [RelayTLS] and [Engine.AddTLS] need beside it, and
// false for any other connection (one made over [RecordConnTLS] too).
func RawTCP(c *tls.Conn) (*net.TCPConn, bool) {
	rc, ok := c.NetConn().(*recordConn)
	if !ok || rc.outer != nil {
		return nil, false
	}
	return rc.tc, true
}

// TLSParker returns a Parker for the socket under c, a TLS connection
// made over [RecordConn] (maybe through wrappers, see [RecordParker]), whose Wait returns at once while bytes read
// ahead from the socket wait for crypto/tls; nil and false for any other
// connection. Like the connection's reads, it is used by the reading
// goroutine only.
func TLSParker(c *tls.Conn) (*Parker, bool) { return RecordParker(c.NetConn()) }

// RecordParker is TLSParker for c, a connection made by [RecordConn],
// [RecordConnRead] or [RecordConnTLS] that a TLS connection reads,
// maybe through wrappers that hold no bytes of their own and have a
// NetConn method returning what they read (intercept's client side);
// nil and false for any other connection. A Parker of a connection made by
// RecordConnTLS waits on the outer connection's socket, and returns at
// once while bytes wait above it (see held).
func RecordParker(c net.Conn) (*Parker, bool) {
	rc, ok := underRecord(c)
	if !ok || rc.rc == nil {
		return nil, false
	}
	p := NewParker(rc.rc)
	p.ahead = rc
	return p, true
}

// underRecord returns the recordConn c is, or the one under the
// wrappers c is made of, each of which holds no bytes of its own and
// says what it reads with a NetConn method (intercept's clientConn).
func underRecord(c net.Conn) (*recordConn, bool) {
	for range 4 {
		switch w := c.(type) {
		case *recordConn:
			return w, true
		case *tls.Conn:
			return nil, false // it holds bytes of its own
		case interface{ NetConn() net.Conn }:
			c = w.NetConn()
		default:
			return nil, false
		}
	}
	return nil, false
}

// WaitRead is Wait for a reader that reads the connection as soon as it
// is readable (the HTTP/2 server's): on a TLS connection's Parker
// ([TLSParker]), instead of peeking, it reads what the socket has into the
// connection's read-ahead buffer, which the next tls.Conn.Read takes
// without a system call of its own. It borrows that buffer only once there
// are bytes: none is held while it waits. Its callback does more than
// Wait's peek, so a goroutine whose stack must stay small waits with Wait.
// The connection must not be in RelayTLS's non-blocking mode. On another
// Parker it is Wait.
func (p *Parker) WaitRead() error {
	if p.ahead == nil {
		return p.Wait()
	}
	if p.rfn == nil {
		p.rfn = p.readAhead
	}
	p.err = nil
	if p.ahead.held() {
		return nil
	}
	if err := p.rc.Read(p.rfn); err != nil {
		return err
	}
	if p.err != nil {
		return os.NewSyscallError("read", p.err)
	}
	return nil
}

// ReadNow reads r, the TLS connection whose reads the Parker waits for
// (over the connection given to [TLSParker] or [RecordParker]), into b
// without waiting for its socket: once the Parker has seen the socket
// readable, the records it brought may hold no plaintext for r's
// reader (a TLS 1.3 KeyUpdate, which crypto/tls answers if asked to,
// an empty application-data record, of r's connection or of the one it
// runs inside, see [RecordConnTLS]) or be cut short, and then ReadNow
// returns [ErrNoPlaintext] where r's Read would wait: crypto/tls has
// taken those records, and keeps a record cut short for the next read;
// no buffer of the Parker's connection is held, and the reader may wait
// again (WaitRead, Notify). Otherwise it returns what r's Read returns:
// plaintext, or an error or the end of the stream. The socket's read
// deadline does not stop it. On a Parker of no TLS connection it is
// r.Read.
func (p *Parker) ReadNow(r io.Reader, b []byte) (int, error) {
	if p.ahead == nil || p.ahead.rc == nil {
		return r.Read(b)
	}
	n, err := p.ahead.readNow(r, b)
	if n == 0 && errors.Is(err, errWouldBlock) {
		return 0, ErrNoPlaintext
	}
	return n, err
}

// readAhead is the RawConn.Read callback of WaitRead: the connection's
// fill, whose results it keeps (WaitRead needs blocking mode, so fill
// waits on EAGAIN holding no buffer); for a connection over another TLS
// connection (RecordConnTLS), the fill of the one that reads the socket.
func (p *Parker) readAhead(fd uintptr) bool {
	c := p.ahead
	if c.under != nil {
		c = c.under
	}
	if !c.fill(fd) {
		return false
	}
	n, err := c.fillN, c.fillErr
	c.fillN, c.fillErr = 0, nil
	if n > 0 {
		c.ar, c.aw = 0, n
	} else if err != nil {
		// An error, which WaitRead returns (the kernel reports it once);
		// the end of the stream the next read sees again.
		p.err = err
	}
	return true
}

// Read reads from the socket, never past the end of the current record's
// header or body; a header and its body read ahead behind it are read
// together. The connection's first record, when it is a handshake record
// (the ClientHello), is handed out in records of at most helloFragment
// bytes (see helloSplit).
func (c *recordConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !c.hello.done {
		return c.readHello(p)
	}
	return c.read(p)
}

// helloFragment is the size of the records Read splits the connection's
// first handshake record into. crypto/tls reads a record into an input
// buffer that it keeps, grown to the largest record it has read, for the
// connection's life, and asks for room for 512 bytes more than it needs
// (bytes.MinRead): a record of at most 59 bytes keeps that buffer at the
// 576 bytes its first header read allocates, where a ClientHello in one
// record (1.5 to 2 KiB with an X25519MLKEM768 key share) grew it to
// 2 KiB. Its handshake buffer still grows to the ClientHello's size.
const helloFragment = 576 - 512 - recordHeaderLen

// helloSplit is the state of the connection's first record while Read
// hands it out: a handshake record is split into records of at most
// helloFragment bytes, as TLS allows (RFC 8446 §5.1), each under a header
// made from the real one; any other record passes as it is.
type helloSplit struct {
	done    bool // the first record has been handed out (or failed)
	started bool // its real header has been read
	split   bool // it is a handshake record
	// hdr is the header handed out for the current fragment, hn bytes
	// of it so far; chunk is what is left of the fragment's body, left
	// what is left of the real record's body.
	hdr         [recordHeaderLen]byte
	hn          int
	chunk, left int
}

// next sets up the header of the next fragment.
func (h *helloSplit) next() {
	k := h.left
	if h.split {
		k = min(k, helloFragment)
	}
	h.hdr[3], h.hdr[4] = byte(k>>8), byte(k)
	h.hn, h.chunk = 0, k
}

// readHello is Read while the connection's first record is handed out.
func (c *recordConn) readHello(p []byte) (int, error) {
	h := &c.hello
	if !h.started {
		for n := 0; n < recordHeaderLen; {
			m, err := c.read(h.hdr[n:])
			n += m
			if err != nil {
				h.done = true
				return 0, err
			}
		}
		h.started = true
		h.split = h.hdr[0] == recordTypeHandshake
		h.left = int(h.hdr[3])<<8 | int(h.hdr[4])
		h.next()
	}
	if h.hn < recordHeaderLen {
		n := copy(p, h.hdr[h.hn:])
		h.hn += n
		if h.hn == recordHeaderLen && h.chunk == 0 {
			h.done = true // an empty record
		}
		if h.hn < recordHeaderLen || h.chunk == 0 || n == len(p) || !c.pending() {
			return n, nil
		}
		// The fragment's body was read ahead: hand it on with its
		// header, as read does for whole records.
		m, err := c.readFragment(p[n:])
		return n + m, err
	}
	return c.readFragment(p)
}

// readFragment hands out what p takes of the current fragment's body.
func (c *recordConn) readFragment(p []byte) (int, error) {
	h := &c.hello
	n, err := c.read(p[:min(len(p), h.chunk)])
	h.chunk -= n
	h.left -= n
	if h.chunk == 0 {
		if h.left == 0 {
			h.done = true
		} else {
			h.next()
		}
	}
	return n, err
}

// read is Read past the first record.
func (c *recordConn) read(p []byte) (int, error) {
	room := p
	if lim := c.bounds.Limit(); len(p) > lim {
		p = p[:lim]
	}
	if c.rc == nil {
		n, err := c.tc.Read(p)
		c.bounds.Advance(p[:n])
		return n, err
	}
	if c.ar == c.aw {
		if err := c.readAhead(); err != nil {
			return 0, err
		}
	}
	atHeader := c.bounds.body == 0
	n := copy(p, c.ahead[c.ar:c.aw])
	c.ar += n
	c.bounds.Advance(p[:n])
	if atHeader && c.bounds.body > 0 && c.ar < c.aw {
		// The header is whole and its body was read ahead too: hand
		// on as much of the body as fits, so that crypto/tls takes a
		// record read ahead in one Read instead of two.
		q := room[n:]
		if len(q) > c.bounds.body {
			q = q[:c.bounds.body]
		}
		k := copy(q, c.ahead[c.ar:c.aw])
		c.ar += k
		c.bounds.Advance(q[:k])
		n += k
	}
	if c.ar == c.aw {
		tlsBufPool.Put(c.ahead)
		c.ahead, c.ar, c.aw = nil, 0, 0
	}
	return n, nil
}

// readAhead reads what the socket has into a pooled buffer, waiting for
// bytes unless the connection is in RelayTLS's non-blocking mode (then
// errWouldBlock when the socket is empty). No buffer is held while it
// waits. It returns io.EOF at the end of the stream.
func (c *recordConn) readAhead() error {
	if c.outer != nil {
		return c.readOuter()
	}
	if c.eng {
		return c.engineReadAhead()
	}
	if c.drained {
		c.drained = false
		if c.nonBlock {
			return errWouldBlock
		}
	}
	err := c.rc.Read(c.fillFn)
	n, rerr := c.fillN, c.fillErr
	c.fillN, c.fillErr = 0, nil
	switch {
	case err != nil:
		// Closed, or the read deadline passed.
		return c.opError(err)
	case rerr == unix.EAGAIN:
		return errWouldBlock
	case rerr != nil:
		return c.opError(os.NewSyscallError("read", rerr))
	case n == 0:
		return io.EOF
	}
	c.ar, c.aw = 0, n
	c.drained = c.nonBlock && n < tlsBufSize
	return nil
}

// readOuter is readAhead for a connection over another TLS connection
// (RecordConnTLS): it reads the outer connection's plaintext into a
// pooled buffer of tlsBufSize, which takes the whole of a record's
// (crypto/tls refuses a record with more), so that the outer connection
// holds no plaintext once it returns. Once it holds none, and none of
// its socket's bytes are read ahead, the socket is read ahead first, as
// readAhead reads it: the wait for its bytes holds no buffer.
func (c *recordConn) readOuter() error {
	if c.outerDrained && !c.under.pending() {
		if err := c.under.readAhead(); err != nil {
			return err
		}
	}
	c.ahead = tlsBufPool.Get().(*[tlsBufSize]byte)
	n, err := c.outer.Read(c.ahead[:])
	c.outerDrained = true
	if n == 0 {
		tlsBufPool.Put(c.ahead)
		c.ahead = nil
		if err == nil {
			err = io.ErrNoProgress
		}
		return err
	}
	c.ar, c.aw = 0, n
	return nil
}

// settleOuter is a look, without waiting, at what the outer
// connection's socket brought a connection over another TLS connection
// (RecordConnTLS) whose reader waits: it reports true when the reader is
// to read on (plaintext read into a pooled buffer, bytes that wait above
// the socket, an error or the end of the stream, which the reader's
// read then meets: crypto/tls keeps the error, a reset is then the
// socket's end), false when the socket had only records that make no
// plaintext, a KeyUpdate or an empty application-data record, which
// the outer connection has taken (it answers a KeyUpdate that asks for
// one), or a record not whole yet, which it keeps: then no buffer is
// held, and the reader may wait again (see readNow).
func (c *recordConn) settleOuter() bool {
	if c.pending() || !c.outerDrained {
		return true
	}
	c.ahead = tlsBufPool.Get().(*[tlsBufSize]byte)
	n, err := c.readNow(c.outer, c.ahead[:])
	if n > 0 {
		c.ar, c.aw = 0, n
		return true
	}
	tlsBufPool.Put(c.ahead)
	c.ahead = nil
	return !errors.Is(err, errWouldBlock)
}

// readNow reads r into b without waiting for the socket: r is a TLS
// connection that reads c (its reader's), or c's outer connection (see
// settleOuter), and the socket's reads (c's, or for a connection over
// another TLS connection the one under it) answer errWouldBlock rather
// than wait while it reads. It returns what r's Read returns: bytes, an
// error or the end of the stream (the socket's, read at once), or
// errWouldBlock when the socket had, at once, only records that make
// no plaintext for r's reader (a KeyUpdate, which crypto/tls answers
// if asked to, an empty application-data record) or a record not
// whole yet, which crypto/tls keeps for the next read: then no buffer
// of c's is held, and the reader may wait on the socket again. The
// socket's read deadline (past, for a parked reader) does not stop it:
// the socket is read with Control, what it has at once; crypto/tls
// keeps the connection usable after errWouldBlock, a temporary error.
// It reads the socket at most a few times (while each read fills the
// buffer: the socket may have more), then answers errWouldBlock.
func (c *recordConn) readNow(r io.Reader, b []byte) (int, error) {
	u := c
	if c.under != nil {
		u = c.under
	}
	defer func() { u.nonBlock, u.drained = false, false }()
	for range 4 {
		filled, full := false, false
		if !c.held() {
			u.nonBlock = true
			if u.fillNowFn == nil {
				u.fillNowFn = func(fd uintptr) { u.fill(fd) }
			}
			if err := u.rc.Control(u.fillNowFn); err != nil {
				return 0, c.opError(err) // closed
			}
			n, err := u.fillN, u.fillErr
			u.fillN, u.fillErr = 0, nil
			switch {
			case err == unix.EAGAIN:
				return 0, errWouldBlock
			case err != nil:
				return 0, c.opError(os.NewSyscallError("read", err))
			case n == 0:
				return 0, io.EOF
			}
			u.ar, u.aw = 0, n
			filled, full = true, n == tlsBufSize
		}
		// Once the bytes read are taken, the socket's read answers
		// errWouldBlock without a system call.
		u.nonBlock, u.drained = true, true
		n, err := r.Read(b)
		if n > 0 || !errors.Is(err, errWouldBlock) {
			return n, err
		}
		if filled && !full {
			return 0, errWouldBlock
		}
		// The socket may have more, or was not read: bytes held above
		// it were taken first.
	}
	return 0, errWouldBlock
}

// fill is the RawConn.Read callback of readAhead.
func (c *recordConn) fill(fd uintptr) bool {
	if c.ahead == nil {
		c.ahead = tlsBufPool.Get().(*[tlsBufSize]byte)
	}
	for {
		// A raw system call (package rawio): the socket is
		// non-blocking, and the runtime's monitor need not see it.
		n, e := rawio.Read(fd, c.ahead[:])
		var err error
		if e != 0 {
			err = e
		}
		if n <= 0 {
			tlsBufPool.Put(c.ahead)
			c.ahead = nil
			if e == unix.EAGAIN && !c.nonBlock {
				return false // wait for readiness, holding no buffer
			}
		}
		c.fillN, c.fillErr = n, err
		return true
	}
}

// opError wraps a read error as net.TCPConn.Read would.
func (c *recordConn) opError(err error) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: c.tc.LocalAddr(), Addr: c.tc.RemoteAddr(), Err: err}
}

// pending reports whether bytes read ahead from the socket wait for
// crypto/tls.
func (c *recordConn) pending() bool { return c.ar < c.aw }

// held reports whether bytes that came from the socket wait above it,
// so that a Parker must not wait on the socket: pending, and for a
// connection over another TLS connection (RecordConnTLS), the outer
// connection's plaintext (not known to be drained until readOuter has
// read it once) or the bytes read ahead for it.
func (c *recordConn) held() bool {
	return c.pending() || c.outer != nil && (!c.outerDrained || c.under.pending())
}

// Write writes p to the socket; in engine mode without waiting (see
// engineWrite); over another TLS connection, to that one.
func (c *recordConn) Write(p []byte) (int, error) {
	if c.outer != nil {
		return c.outer.Write(p)
	}
	if c.eng {
		return c.engineWrite(p)
	}
	if c.wfd.Holds(c.tc) {
		return c.wfd.Write(p)
	}
	return c.tc.Write(p)
}

// Close closes the socket; in engine mode it does nothing: the engine
// owns the socket and closes it when the tunnel ends. Over another TLS
// connection it closes that one.
func (c *recordConn) Close() error {
	if c.outer != nil {
		return c.outer.Close()
	}
	if c.eng {
		return nil
	}
	return c.tc.Close()
}

func (c *recordConn) LocalAddr() net.Addr  { return c.tc.LocalAddr() }
func (c *recordConn) RemoteAddr() net.Addr { return c.tc.RemoteAddr() }

// SetDeadline and the two below set tc's deadlines (over another TLS
// connection, that one's, which are its socket's); in engine mode they do
// nothing, since nothing waits (crypto/tls sets a write deadline around
// its close_notify).
func (c *recordConn) SetDeadline(t time.Time) error {
	if c.eng {
		return nil
	}
	if c.outer != nil {
		return c.outer.SetDeadline(t)
	}
	return c.tc.SetDeadline(t)
}

func (c *recordConn) SetReadDeadline(t time.Time) error {
	if c.eng {
		return nil
	}
	if c.outer != nil {
		return c.outer.SetReadDeadline(t)
	}
	return c.tc.SetReadDeadline(t)
}

func (c *recordConn) SetWriteDeadline(t time.Time) error {
	if c.eng {
		return nil
	}
	if c.outer != nil {
		return c.outer.SetWriteDeadline(t)
	}
	return c.tc.SetWriteDeadline(t)
}

// tlsRelay is one TLS tunnel being relayed by RelayTLS.
type tlsRelay struct {
	client   *tls.Conn
	raw      *net.TCPConn // the socket under client
	upstream *net.TCPConn
	idle     time.Duration
	start    time.Time

	clientWait *Parker      // waits for the client's socket (TLSParker); used by pumpUp only
	upNB       *rawReader   // upstream's non-blocking reader
	last       atomic.Int64 // time since start when a byte last moved, if idle > 0

	up   int64 // owned by the client-to-upstream direction
	down int64 // owned by the upstream-to-client direction

	wg   sync.WaitGroup // waits for downLoop
	once sync.Once
	err  error // the first failure; written once under once, read after both directions end
}

// RelayTLS relays a tunnel between a TLS client connection and a plain
// upstream connection until both directions have ended, and returns the
// bytes delivered each way (up: client to upstream; down: upstream to
// client, plaintext).
//
// client must be a tls.Conn whose handshake is complete, made over
// RecordConn(raw). Plaintext that the caller has already read from client
// into its own buffers (a bufio.Reader) must be written to upstream before
// the call; plaintext still inside client is relayed first. RelayTLS
// closes client, raw and upstream before it returns.
//
// The calling goroutine relays the client-to-upstream direction and one
// new goroutine the other. The garbage collector shrinks a parked
// goroutine's stack to 4 KiB only if it uses less than about 1.2 KiB, so
// call RelayTLS from a shallow stack (few, small frames above it) to keep
// an idle tunnel at two 4 KiB stacks rather than 8 + 4 KiB.
//
// An idle direction holds no buffer: it waits for socket readiness and
// borrows a pooled 16 KiB buffer only to move bytes. Half-close passes
// through: when upstream ends its stream, client gets a TLS close_notify
// and then a TCP FIN; when the client sends close_notify (or a FIN at a
// record boundary), upstream's write half is shut down. The other direction
// keeps flowing.
//
// The error is nil when both directions ended that way. Otherwise it says
// why the tunnel ended: a wrapped read or write error (both sockets are
// then reset), [ErrIdleTimeout] when no byte moved either way for idle (0
// means no idle timeout) or one write (at most 16 KiB) did not complete
// within idle, or ctx's error when ctx was cancelled.
func RelayTLS(ctx context.Context, client *tls.Conn, raw *net.TCPConn, upstream *net.TCPConn, idle time.Duration) (up, down int64, err error) {
	r, err := newTLSRelay(client, raw, upstream, idle)
	if err != nil {
		return 0, 0, err
	}
	// The setup above keeps its stack frame out of the goroutine that
	// parks below, so that the garbage collector can shrink its stack.
	return r.run(ctx)
}

// newTLSRelay checks RelayTLS's arguments and prepares the relay; on error
// it has closed the connections.
func newTLSRelay(client *tls.Conn, raw *net.TCPConn, upstream *net.TCPConn, idle time.Duration) (*tlsRelay, error) {
	rc, ok := client.NetConn().(*recordConn)
	if !ok || rc.tc != raw {
		client.Close()
		raw.Close()
		upstream.Close()
		return nil, errors.New("tunnel: RelayTLS needs a tls.Conn made over RecordConn(raw)")
	}
	if !client.ConnectionState().HandshakeComplete {
		raw.Close()
		upstream.Close()
		return nil, errors.New("tunnel: RelayTLS before the TLS handshake completed")
	}
	wait, ok := TLSParker(client)
	upNB, err := newRawReader(upstream)
	if !ok || err != nil {
		if err == nil {
			err = errors.New("the client's socket has no RawConn")
		}
		raw.Close()
		upstream.Close()
		return nil, fmt.Errorf("tunnel: TLS tunnel sockets: %w", err)
	}
	rc.nonBlock = true
	return &tlsRelay{
		client:     client,
		raw:        raw,
		upstream:   upstream,
		idle:       idle,
		start:      time.Now(),
		clientWait: wait,
		upNB:       upNB,
	}, nil
}

// run relays until both directions end, on the calling goroutine (client
// to upstream) and one more (upstream to client).
func (r *tlsRelay) run(ctx context.Context) (up, down int64, err error) {
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		r.fail(fmt.Errorf("tunnel: TLS tunnel: %w", context.Cause(ctx)))
	})
	r.wg.Add(1)
	go r.downLoop()
	if err := r.pumpUp(); err != nil {
		r.fail(err)
	}
	r.wg.Wait()
	if !stop() {
		<-cancelled
	}
	if r.err == nil {
		// Both directions ended cleanly; close_notify has been sent, so
		// Close only closes the socket.
		r.client.Close()
		r.upstream.Close()
	}
	return r.up, r.down, r.err
}

// fail records err as the tunnel's error if it is the first, and closes
// both sockets so that the other direction stops too. On a socket failure
// the sockets are reset, so that the surviving peer does not mistake the
// end for a clean one; on an idle timeout or cancellation they are closed
// normally.
func (r *tlsRelay) fail(err error) {
	r.once.Do(func() {
		r.err = err
		if !errors.Is(err, ErrIdleTimeout) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			r.raw.SetLinger(0)
			r.upstream.SetLinger(0)
		}
		r.raw.Close()
		r.upstream.Close()
	})
}

// downLoop runs the upstream-to-client direction.
func (r *tlsRelay) downLoop() {
	defer r.wg.Done()
	if err := r.pumpDown(); err != nil {
		r.fail(err)
	}
}

// pumpUp moves plaintext from the TLS client to upstream until the client
// ends its stream (nil) or something fails.
func (r *tlsRelay) pumpUp() error {
	wait := r.clientWait
	for {
		buf := tlsBufPool.Get().(*[tlsBufSize]byte)
		n, err := r.client.Read(buf[:])
		if n > 0 {
			w, werr := r.write(r.upstream, buf[:n])
			r.up += int64(w)
			if werr != nil {
				tlsBufPool.Put(buf)
				return r.wrap(werr, "write to upstream")
			}
		}
		tlsBufPool.Put(buf)
		switch {
		case err == nil:
		case err == errWouldBlock || errors.Is(err, os.ErrDeadlineExceeded):
			// Nothing to read, or the idle deadline set by park
			// passed while this direction was busy: park checks.
			if err := r.park(wait, r.raw); err != nil {
				return r.wrap(err, "wait for client")
			}
		case err == io.EOF:
			// A failure here means upstream is gone (reset); the
			// other direction reports that when it reads.
			r.upstream.CloseWrite()
			return nil
		default:
			return r.wrap(err, "read from client")
		}
	}
}

// pumpDown moves bytes from upstream to the TLS client until upstream ends
// its stream (nil) or something fails.
func (r *tlsRelay) pumpDown() error {
	wait := NewParker(r.upNB.rc)
	for {
		buf := tlsBufPool.Get().(*[tlsBufSize]byte)
		n, err := r.upNB.readNow(buf[:])
		if n > 0 {
			w, werr := r.write(r.client, buf[:n])
			r.down += int64(w)
			if werr != nil {
				tlsBufPool.Put(buf)
				return r.wrap(werr, "write to client")
			}
		}
		tlsBufPool.Put(buf)
		if err == nil && n < len(buf) {
			// A short read emptied the socket: wait rather than
			// read again for EAGAIN (the Parker looks first).
			err = errWouldBlock
		}
		switch {
		case err == nil:
		case err == errWouldBlock || errors.Is(err, os.ErrDeadlineExceeded):
			// Nothing to read, or the idle deadline set by park
			// passed while this direction was busy: park checks.
			if err := r.park(wait, r.upstream); err != nil {
				return r.wrap(err, "wait for upstream")
			}
		case err == io.EOF:
			// Failures here mean the client is gone: typically it
			// closed its socket entirely after its own close_notify,
			// and answers ours with a reset. Every byte has been
			// delivered; if the client reset early, the other
			// direction reports it when it reads.
			r.client.CloseWrite()
			r.raw.CloseWrite()
			return nil
		default:
			return r.wrap(err, "read from upstream")
		}
	}
}

// write writes p to w within the idle timeout, notes the activity and
// returns how many bytes of p were written.
func (r *tlsRelay) write(w net.Conn, p []byte) (int, error) {
	if r.idle <= 0 {
		return w.Write(p)
	}
	now := time.Since(r.start)
	w.SetWriteDeadline(r.start.Add(now + r.idle))
	n, err := w.Write(p)
	if err == nil {
		r.last.Store(int64(time.Since(r.start)))
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		err = fmt.Errorf("%w: no write progress for %v", ErrIdleTimeout, r.idle)
	}
	return n, err
}

// park waits until src may be readable. With an idle timeout it wakes when
// the tunnel's last activity is idle old, and returns ErrIdleTimeout if no
// byte moved in either direction since.
func (r *tlsRelay) park(p *Parker, src *net.TCPConn) error {
	for {
		if r.idle > 0 {
			src.SetReadDeadline(r.start.Add(time.Duration(r.last.Load()) + r.idle))
		}
		err := p.Wait()
		if err == nil {
			return nil
		}
		if r.idle <= 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		if time.Since(r.start)-time.Duration(r.last.Load()) >= r.idle {
			return ErrIdleTimeout
		}
		// The other direction moved bytes meanwhile: wait on.
	}
}

// wrap names the failed action, unless err is ErrIdleTimeout, which is
// returned as is. (An error that only follows from fail closing the
// sockets is wrapped too, but fail keeps the first error only.)
func (r *tlsRelay) wrap(err error, action string) error {
	if errors.Is(err, ErrIdleTimeout) {
		return err
	}
	return fmt.Errorf("tunnel: TLS tunnel: %s: %w", action, err)
}
