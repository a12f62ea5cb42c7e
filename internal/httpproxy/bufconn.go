package httpproxy

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Buffer sizes. A client connection starts with a small buffer that grows
// only for large heads; an upstream connection reads responses into a
// larger one so that a 10 KB response arrives in one read.
const (
	clientBufSize   = 8 << 10
	upstreamBufSize = 32 << 10
)

var (
	clientBufs   = sync.Pool{New: func() any { b := make([]byte, clientBufSize); return &b }}
	upstreamBufs = sync.Pool{New: func() any { b := make([]byte, upstreamBufSize); return &b }}
)

// bufConn is a connection with a read buffer of its own. buf[r:w] holds
// bytes read but not consumed. A bufConn is owned by one goroutine at a
// time.
type bufConn struct {
	c    net.Conn
	tcp  *net.TCPConn // c when it is a plain TCP connection (splice, writev), else nil
	buf  []byte
	r, w int
	bp   *[]byte    // the pooled slice header buf came from; nil for a grown buffer
	pool *sync.Pool // where bp goes back

	// rdl and wdl are the read and write deadlines armed on c, as
	// monoNow readings; 0 = unknown. rdl belongs to whoever reads c, wdl
	// to whoever writes it.
	rdl, wdl time.Duration

	// lowat is set once notSentLowat is armed on tcp; owned by whoever
	// writes c.
	lowat bool
}

// notSentLowat bounds the bytes a socket holds queued but not yet sent
// while a large body is spliced into it (TCP_NOTSENT_LOWAT). Without it,
// a slow receiver lets up to the whole send buffer queue up, which the
// kernel then transmits from the receiver's acknowledgements; with it,
// the proxy is woken to write each 16 KiB as the receiver takes it, so
// the kernel holds less and sends from the proxy's own thread.
const notSentLowat = 16 << 10

// armLowat sets notSentLowat on b's socket, once.
func (b *bufConn) armLowat() {
	if b.lowat || b.tcp == nil {
		return
	}
	b.lowat = true
	setNotSentLowat(b.tcp, notSentLowat)
}

// epoch is the origin of the monotonic clock readings deadlines are kept
// in.
var epoch = time.Now()

// monoNow returns the time since epoch from the monotonic clock alone:
// one clock reading where time.Now takes two.
func monoNow() time.Duration { return time.Since(epoch) }

// deadlineSlack returns how much earlier than wanted a deadline already
// armed may fall and still be kept: a busy connection re-arms its timers
// a few times a second instead of around every message. A timeout thus
// fires between timeout-slack and timeout after the last activity, never
// later.
func deadlineSlack(timeout time.Duration) time.Duration {
	return min(timeout/16, 500*time.Millisecond)
}

// setReadDeadline arms c's read deadline timeout after now (a monoNow
// reading), unless the one armed falls no later and within
// deadlineSlack(timeout) of it.
func (b *bufConn) setReadDeadline(now, timeout time.Duration) {
	if want := now + timeout; !keeps(b.rdl, want, timeout) {
		b.c.SetReadDeadline(epoch.Add(want))
		b.rdl = want
	}
}

// setWriteDeadline is setReadDeadline for c's write deadline.
func (b *bufConn) setWriteDeadline(now, timeout time.Duration) {
	if want := now + timeout; !keeps(b.wdl, want, timeout) {
		b.c.SetWriteDeadline(epoch.Add(want))
		b.wdl = want
	}
}

// keeps reports whether the deadline armed (0: unknown) may stand for
// want: it falls no later, and within deadlineSlack(timeout) of it.
func keeps(armed, want, timeout time.Duration) bool {
	return armed != 0 && armed <= want && armed >= want-deadlineSlack(timeout)
}

func (b *bufConn) attach(c net.Conn, pool *sync.Pool) {
	b.c = c
	b.tcp, _ = c.(*net.TCPConn)
	b.rdl, b.wdl = 0, 0
	b.lowat = false
	b.takeBuf(pool)
}

// takeBuf gives b an empty buffer from pool.
func (b *bufConn) takeBuf(pool *sync.Pool) {
	b.pool = pool
	b.bp = pool.Get().(*[]byte)
	b.buf = *b.bp
	b.r, b.w = 0, 0
}

// release returns the buffer to its pool. The bufConn must not be read
// again before attach.
func (b *bufConn) release() {
	if b.bp != nil {
		b.pool.Put(b.bp)
	}
	b.buf, b.bp, b.pool = nil, nil, nil
	b.r, b.w = 0, 0
}

// buffered returns the bytes read and not consumed.
func (b *bufConn) buffered() []byte { return b.buf[b.r:b.w] }

// fill reads once more into the buffer, compacting or growing it when it
// is full, never past limit bytes of unconsumed data.
func (b *bufConn) fill(limit int) error {
	if b.r == b.w {
		b.r, b.w = 0, 0
	}
	if b.w == len(b.buf) {
		if b.r > 0 {
			b.w = copy(b.buf, b.buf[b.r:b.w])
			b.r = 0
		} else {
			if len(b.buf) >= limit {
				return errHeadTooLarge
			}
			n := 2 * len(b.buf)
			if n > limit {
				n = limit
			}
			nb := make([]byte, n)
			copy(nb, b.buf[:b.w])
			if b.bp != nil {
				b.pool.Put(b.bp)
				b.bp = nil
			}
			b.buf = nb
		}
	}
	n, err := b.c.Read(b.buf[b.w:])
	b.w += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// errIdle is returned by readHead when the connection was closed (or
// failed) before a byte of a new message arrived: not an error to answer.
var errIdle = errors.New("httpproxy: connection closed before a message")

// errIdleTimeout is returned by readHead when the deadline for the first
// byte of a message passed. For a client connection it is an idle
// timeout, not an error to answer; for an upstream it is a response that
// never came (a net.Error whose Timeout is true, answered with 504).
var errIdleTimeout error = idleTimeoutError{}

type idleTimeoutError struct{}

func (idleTimeoutError) Error() string   { return "httpproxy: no message before the deadline" }
func (idleTimeoutError) Timeout() bool   { return true }
func (idleTimeoutError) Temporary() bool { return true }

// readHead reads until buf[r:] holds a whole message head and returns its
// length. Empty lines before a head are skipped (RFC 9112 §2.2). The
// caller arms the deadline for the first byte (setReadDeadline); once
// bytes of the head are in, the rest must come within headTimeout. A close
// before any byte yields errIdle, the first-byte deadline passing
// errIdleTimeout, and a head over limit bytes errHeadTooLarge.
func (b *bufConn) readHead(limit int, headTimeout time.Duration) (int, error) {
	scanned := 0
	started := b.r < b.w
	armed := false // the head deadline is armed
	for {
		for b.r < b.w && scanned == 0 && (b.buf[b.r] == '\r' || b.buf[b.r] == '\n') {
			b.r++ // leading empty lines
		}
		if b.w-b.r >= 4 {
			if n := findHeadEnd(b.buf[b.r:b.w], scanned-3); n > limit {
				// The buffer may hold more than limit bytes when the head
				// arrived in one read.
				return 0, errHeadTooLarge
			} else if n > 0 {
				return n, nil
			}
			scanned = b.w - b.r
		}
		if b.w-b.r >= limit {
			return 0, errHeadTooLarge
		}
		if started && !armed {
			// Part of a head is in and more must be read: it gets
			// headTimeout from now, not the idle deadline.
			armed = true
			b.setReadDeadline(monoNow(), headTimeout)
		}
		err := b.fill(limit)
		if err != nil {
			if !started && b.r == b.w {
				if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
					return 0, errIdleTimeout
				}
				return 0, errIdle
			}
			return 0, err
		}
		started = true
	}
}
