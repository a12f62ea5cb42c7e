package http1

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/rawio"
)

// Buffer sizes. A client connection starts with a small buffer that grows
// only for large heads; an upstream connection reads responses into a
// larger one so that a 10 KB response arrives in one read.
const (
	clientBufSize   = 8 << 10
	upstreamBufSize = 32 << 10
)

// ClientBufs and UpstreamBufs are the pools of the buffers a Conn takes
// (Attach, TakeBuf): *[]byte of 8 KiB for a client connection, 32 KiB for
// an upstream one.
var (
	ClientBufs   = sync.Pool{New: func() any { b := make([]byte, clientBufSize); return &b }}
	UpstreamBufs = sync.Pool{New: func() any { b := make([]byte, upstreamBufSize); return &b }}
)

// Conn is a connection with a read buffer of its own. Buf[R:W] holds
// bytes read but not consumed. A Conn is owned by one goroutine at a
// time.
type Conn struct {
	C    net.Conn     // the connection; nil when there is none
	TCP  *net.TCPConn // C when it is a plain TCP connection (splice, writev), else nil
	Buf  []byte       // the read buffer; nil while the Conn holds none
	R, W int          // Buf[R:W] is read and not consumed
	bp   *[]byte      // the pooled slice header Buf came from; nil for a grown buffer
	pool *sync.Pool   // where bp goes back

	// rdl and wdl are the read and write deadlines armed on c, as
	// MonoNow readings; 0 = unknown, noDeadline = none armed. rdl belongs
	// to whoever reads C, wdl to whoever writes it.
	rdl, wdl time.Duration

	// lowat is set once notSentLowat is armed on TCP; owned by whoever
	// writes C.
	lowat bool

	// fd makes Read, Write and Vec.WriteConn raw system calls on TCP
	// (package rawio); it is used only while it holds TCP itself. It is
	// made for the first TCP connection attached, so that a Conn of a TLS
	// connection carries none.
	fd *rawio.FD
}

// notSentLowat bounds the bytes a socket holds queued but not yet sent
// while a large body is spliced into it (TCP_NOTSENT_LOWAT). Without it,
// a slow receiver lets up to the whole send buffer queue up, which the
// kernel then transmits from the receiver's acknowledgements; with it,
// the proxy is woken to write each 16 KiB as the receiver takes it, so
// the kernel holds less and sends from the proxy's own thread.
const notSentLowat = 16 << 10

// ArmLowat sets notSentLowat on b's socket, once.
func (b *Conn) ArmLowat() {
	if b.lowat || b.TCP == nil {
		return
	}
	b.lowat = true
	SetNotSentLowat(b.TCP, notSentLowat)
}

// Lowat reports whether ArmLowat has set TCP_NOTSENT_LOWAT on the socket.
func (b *Conn) Lowat() bool { return b.lowat }

// ReadDeadline returns the read deadline ArmReadDeadline armed, as a
// MonoNow reading: 0 when it is unknown, negative when none is armed.
func (b *Conn) ReadDeadline() time.Duration { return b.rdl }

// ForgetReadDeadline forgets the read deadline armed, for a caller that
// has changed it on C directly: the next ArmReadDeadline arms anew.
func (b *Conn) ForgetReadDeadline() { b.rdl = 0 }

// ForgetWriteDeadline is ForgetReadDeadline for the write deadline.
func (b *Conn) ForgetWriteDeadline() { b.wdl = 0 }

// epoch is the origin of the monotonic clock readings deadlines are kept
// in.
var epoch = time.Now()

// MonoNow returns the time since epoch from the monotonic clock alone:
// one clock reading where time.Now takes two.
func MonoNow() time.Duration { return time.Since(epoch) }

// deadlineSlack returns how much earlier than wanted a deadline already
// armed may fall and still be kept: a busy connection re-arms its timers
// a few times a second instead of around every message. A timeout thus
// fires between timeout-slack and timeout after the last activity, never
// later.
func deadlineSlack(timeout time.Duration) time.Duration {
	return min(timeout/16, 500*time.Millisecond)
}

// DeadlineSlack is deadlineSlack for a deadline kept outside a Conn (the
// HTTP/2 server's client connection): how much earlier than wanted a
// deadline already armed may fall and still be kept.
func DeadlineSlack(timeout time.Duration) time.Duration { return deadlineSlack(timeout) }

// noDeadline is the rdl or wdl of a Conn on which no deadline is armed.
const noDeadline time.Duration = -1

// ArmReadDeadline arms C's read deadline timeout after now (a MonoNow
// reading), unless the one armed falls no later and within
// deadlineSlack(timeout) of it. A timeout of 0 (or less) means no limit:
// it clears the deadline instead.
func (b *Conn) ArmReadDeadline(now, timeout time.Duration) {
	b.ArmReadDeadlineSlack(now, timeout, deadlineSlack(timeout))
}

// ArmReadDeadlineSlack is ArmReadDeadline keeping a deadline armed that
// falls no later than wanted and within slack of it: for a wait whose
// end may come that much sooner (one that only decides when an idle
// connection parks), so that it is armed less often.
func (b *Conn) ArmReadDeadlineSlack(now, timeout, slack time.Duration) {
	if timeout <= 0 {
		if b.rdl != noDeadline {
			b.C.SetReadDeadline(time.Time{})
			b.rdl = noDeadline
		}
		return
	}
	if want := now + timeout; !keepsSlack(b.rdl, want, slack) {
		b.C.SetReadDeadline(epoch.Add(want))
		b.rdl = want
	}
}

// WriteDeadlinePassed reports whether the write deadline ArmWriteDeadline
// armed has passed at now (a MonoNow reading): false when none is armed
// or it is unknown. A copy that failed with a timeout while reading and
// writing at once tells by it which side timed out.
func (b *Conn) WriteDeadlinePassed(now time.Duration) bool { return b.wdl > 0 && now >= b.wdl }

// ArmWriteDeadline is ArmReadDeadline for C's write deadline.
func (b *Conn) ArmWriteDeadline(now, timeout time.Duration) {
	if timeout <= 0 {
		if b.wdl != noDeadline {
			b.C.SetWriteDeadline(time.Time{})
			b.wdl = noDeadline
		}
		return
	}
	if want := now + timeout; !keeps(b.wdl, want, timeout) {
		b.C.SetWriteDeadline(epoch.Add(want))
		b.wdl = want
	}
}

// keeps reports whether the deadline armed (0: unknown, noDeadline:
// none) may stand for want: it falls no later, and within
// deadlineSlack(timeout) of it.
func keeps(armed, want, timeout time.Duration) bool {
	return keepsSlack(armed, want, deadlineSlack(timeout))
}

// keepsSlack is keeps with slack given.
func keepsSlack(armed, want, slack time.Duration) bool {
	return armed > 0 && armed <= want && armed >= want-slack
}

// Attach makes c the connection read through b, with an empty buffer
// from pool, and forgets the deadlines and options of the previous one.
func (b *Conn) Attach(c net.Conn, pool *sync.Pool) {
	b.C = c
	b.TCP, _ = c.(*net.TCPConn)
	switch {
	case b.TCP != nil && b.fd == nil:
		b.fd = new(rawio.FD)
		fallthrough
	case b.fd != nil:
		b.fd.Reset(b.TCP)
	}
	b.rdl, b.wdl = 0, 0
	b.lowat = false
	b.TakeBuf(pool)
}

// TakeBuf gives b an empty buffer from pool.
func (b *Conn) TakeBuf(pool *sync.Pool) {
	b.pool = pool
	b.bp = pool.Get().(*[]byte)
	b.Buf = *b.bp
	b.R, b.W = 0, 0
}

// Release returns the buffer to its pool. The Conn must not be read
// again before Attach or TakeBuf.
func (b *Conn) Release() {
	if b.bp != nil {
		b.pool.Put(b.bp)
	}
	b.Buf, b.bp, b.pool = nil, nil, nil
	b.R, b.W = 0, 0
}

// Read reads C into p, as C.Read does; on a TCP connection with a raw,
// non-blocking system call (package rawio). One goroutine reads at a
// time.
func (b *Conn) Read(p []byte) (int, error) {
	if b.TCP != nil && b.fd != nil && b.fd.Holds(b.TCP) {
		return b.fd.Read(p)
	}
	return b.C.Read(p)
}

// Write writes p to C, as C.Write does; on a TCP connection with raw,
// non-blocking system calls. One goroutine writes at a time.
func (b *Conn) Write(p []byte) (int, error) {
	if b.TCP != nil && b.fd != nil && b.fd.Holds(b.TCP) {
		return b.fd.Write(p)
	}
	return b.C.Write(p)
}

// Buffered returns the bytes read and not consumed.
func (b *Conn) Buffered() []byte { return b.Buf[b.R:b.W] }

// Fill reads once more into the buffer, compacting or growing it when it
// is full, never past limit bytes of unconsumed data.
func (b *Conn) Fill(limit int) error {
	if b.R == b.W {
		b.R, b.W = 0, 0
	}
	if b.W == len(b.Buf) {
		if b.R > 0 {
			b.W = copy(b.Buf, b.Buf[b.R:b.W])
			b.R = 0
		} else {
			if len(b.Buf) >= limit {
				return ErrHeadTooLarge
			}
			n := 2 * len(b.Buf)
			if n > limit {
				n = limit
			}
			nb := make([]byte, n)
			copy(nb, b.Buf[:b.W])
			if b.bp != nil {
				b.pool.Put(b.bp)
				b.bp = nil
			}
			b.Buf = nb
		}
	}
	n, err := b.Read(b.Buf[b.W:])
	b.W += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// ErrIdle is returned by ReadHead when the connection was closed (or
// failed) before a byte of a new message arrived: not an error to answer.
var ErrIdle = errors.New("http1: connection closed before a message")

// ErrIdleTimeout is returned by ReadHead when the deadline for the first
// byte of a message passed. For a client connection it is an idle
// timeout, not an error to answer; for an upstream it is a response that
// never came (a net.Error whose Timeout is true, answered with 504).
var ErrIdleTimeout error = idleTimeoutError{}

type idleTimeoutError struct{}

func (idleTimeoutError) Error() string   { return "http1: no message before the deadline" }
func (idleTimeoutError) Timeout() bool   { return true }
func (idleTimeoutError) Temporary() bool { return true }

// ErrTLSHandshake is returned by ReadHead when a message starts with the
// byte that starts a TLS handshake record (0x16), which no HTTP/1 message
// starts with: a client speaking TLS where plain HTTP is expected (an
// https:// proxy URL for a plain port). It is returned as soon as that
// byte is in, not when the head timeout ends the wait for a head that
// will never come.
var ErrTLSHandshake = errors.New("http1: a TLS handshake record where an HTTP message was expected")

// tlsHandshakeRecord is the content type of a TLS handshake record, the
// first byte a TLS client sends.
const tlsHandshakeRecord = 0x16

// ReadHead reads until buf[r:] holds a whole message head and returns its
// length. Empty lines before a head are skipped (RFC 9112 §2.2). The
// caller arms the deadline for the first byte (ArmReadDeadline); once
// bytes of the head are in, the rest must come within headTimeout (0 = no
// limit). A close
// before any byte yields errIdle, the first-byte deadline passing
// errIdleTimeout, a head over limit bytes errHeadTooLarge, and a first
// byte that starts a TLS handshake ErrTLSHandshake.
func (b *Conn) ReadHead(limit int, headTimeout time.Duration) (int, error) {
	scanned := 0
	started := b.R < b.W
	armed := false // the head deadline is armed
	for {
		for b.R < b.W && scanned == 0 && (b.Buf[b.R] == '\r' || b.Buf[b.R] == '\n') {
			b.R++ // leading empty lines
		}
		if scanned == 0 && b.R < b.W && b.Buf[b.R] == tlsHandshakeRecord {
			return 0, ErrTLSHandshake
		}
		if b.W-b.R >= 4 {
			if n := findHeadEnd(b.Buf[b.R:b.W], scanned-3); n > limit {
				// The buffer may hold more than limit bytes when the head
				// arrived in one read.
				return 0, ErrHeadTooLarge
			} else if n > 0 {
				return n, nil
			}
			scanned = b.W - b.R
		}
		if b.W-b.R >= limit {
			return 0, ErrHeadTooLarge
		}
		if started && !armed {
			// Part of a head is in and more must be read: it gets
			// headTimeout from now, not the idle deadline.
			armed = true
			b.ArmReadDeadline(MonoNow(), headTimeout)
		}
		err := b.Fill(limit)
		if err != nil {
			if !started && b.R == b.W {
				if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
					return 0, ErrIdleTimeout
				}
				return 0, ErrIdle
			}
			return 0, err
		}
		started = true
	}
}

// ReadRest reads, behind a message head just parsed from b's buffer, the
// rest of a body of n bytes when all of it fits in the buffer as it is:
// nothing is moved (as Fill may), so that the head parsed from the buffer
// stays valid. Each read is bounded by timeout. A body that does not fit
// is left unread (nil); io.ErrUnexpectedEOF when the connection ends
// before the body does. A front-end uses it to have a small response
// whole before it forwards any of it, so that an upstream dying in its
// middle can still be retried.
func (b *Conn) ReadRest(n int64, timeout time.Duration) error {
	if n <= 0 || int64(b.R)+n > int64(len(b.Buf)) {
		return nil
	}
	for int64(b.W-b.R) < n {
		b.ArmReadDeadline(MonoNow(), timeout)
		m, err := b.Read(b.Buf[b.W:])
		b.W += m
		switch {
		case err == io.EOF && int64(b.W-b.R) < n:
			return io.ErrUnexpectedEOF
		case err != nil && err != io.EOF:
			return err
		case err == io.EOF:
			return nil
		}
	}
	return nil
}
