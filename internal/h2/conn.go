package h2

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// bufSize is the size of the pooled buffers used to read from the
// client, queue request bodies and read from upstreams. It is at least
// the largest TLS record plaintext, so that one read drains a record and
// crypto/tls keeps no decrypted bytes behind.
const bufSize = 16 << 10

// bufPool holds *[bufSize]byte, borrowed only while bytes are in flight.
var bufPool = sync.Pool{New: func() any { return new([bufSize]byte) }}

// outBuf is a pooled output buffer.
type outBuf struct{ b []byte }

// outPool holds *outBuf; an idle connection holds none.
var outPool = sync.Pool{New: func() any { return &outBuf{b: make([]byte, 0, 32<<10)} }}

const (
	// outLimit is how many queued output bytes make senders of DATA
	// wait until the connection has written some.
	outLimit = 64 << 10
	// outHardLimit is how many queued output bytes end the connection:
	// control frames (answers to PING and SETTINGS, RST_STREAM, window
	// updates) the client causes but does not read.
	outHardLimit = 4 << 20
	// framerKeep is the largest frame payload after which the framer,
	// which keeps a read buffer the size of the largest frame it has
	// read, is replaced before the connection goes idle.
	framerKeep = 4 << 10
	// lingerTime is how long a connection closed after a GOAWAY keeps
	// reading (and discarding), so that frames the client sent
	// meanwhile do not turn the close into a reset that destroys the
	// GOAWAY before the client reads it.
	lingerTime = time.Second
	// quietWait is how long a connection with no stream waits for its
	// client on its worker before it leaves the wait to no goroutine
	// (run): a client that sends one request at a time, or its
	// requests back to back, is served on by the same worker with no
	// epoll registration and goroutine started per request, as the
	// HTTP/1.1 proxy's intercepted connections are (its parkAfter); one
	// quiet for longer keeps no goroutine while it waits. At 100 ms a
	// client sending a request every 64 ms (rate-h2-1k) keeps its
	// worker: parking and waking its connection for every request cost
	// a third more CPU per request (bench/README.md, "The cost of an
	// HTTP/2 wake-up"); at 50 ms it did.
	quietWait = 100 * time.Millisecond
	// tunnelWait is how long a worker serving tunnels and no other
	// stream, which has just read a frame over framerKeep, waits for
	// the client's next bytes before it leaves the wait to no goroutine
	// (run). A tunnel moving bulk data sends its next frame within
	// microseconds: handing it off after every frame started a worker
	// and made a new framer, whose read buffer is garbage, for each
	// 16 KiB DATA frame, and the garbage collector took a fifth of an
	// HTTP/2 CONNECT upload's CPU. A tunnel quiet for longer, or one
	// sending small frames (a WebSocket's messages), keeps no goroutine
	// and costs no timer, as before.
	tunnelWait = time.Millisecond
)

var (
	errNoPreface = errors.New("h2: the connection did not start with the client preface")
	errWoken     = errors.New("h2: reader woken")
	errIdle      = errors.New("h2: connection idle")
	errDone      = errors.New("h2: connection drained")
	errHandOff   = errors.New("h2: connection idle on a worker")
)

// conn is one HTTP/2 client connection.
type conn struct {
	s          *Server
	cfg        *Config
	sess       *gate.Session // decides each stream's request
	nc         net.Conn      // the client connection
	raw        *net.TCPConn  // the socket under nc, for the linger at the end and a plain connection's Parker; nil when unknown
	clientAddr netip.Addr    // the client's IP, for Forwarded fields and logs
	localAddr  netip.AddrPort
	// icept is the intercepted tunnel whose requests the connection
	// serves (Session.Intercepted): https requests for its name, no
	// extended CONNECT; nil = a client connection of its own.
	icept *gate.Intercepted

	wg sync.WaitGroup // stream workers, pumps and writers

	// Owned by the serving goroutine.
	rd       reader
	waitFrom time.Time // when wait was last called: the idle timeout runs from it at the earliest
	fr       *http2.Framer
	hdec     *blockDecoder // decodes header blocks, with the connection's HPACK state
	park     clientWaiter  // the wait for the client's socket, or stream; nil when there is none
	// looker is park where it reads the client's TLS connection without
	// waiting (a socket's: tunnel.Looker), so that records with no
	// plaintext (a KeyUpdate) leave an idle connection's reader to wait
	// on or park (see wait, notify); nil otherwise.
	looker      tunnel.Looker
	bigFrame    bool // fr read a frame over framerKeep since it was made
	prefaced    bool // the client preface was read before serving began
	sawSettings bool
	rejected    int // malformed requests logged (rejectStream)
	// The client's budget of early resets (resetBudget): resets is what
	// is left of it at resetAt; zero resetAt = the whole burst.
	resets  float64
	resetAt time.Time

	mu         sync.Mutex
	wcond      sync.Cond          // broadcast when a write of out ends and when writing turns false; L is &mu
	streams    map[uint32]*stream // open and half-closed streams; guarded by mu
	maxID      uint32             // highest stream id the client opened; guarded by mu
	workers    int                // stream goroutines running; guarded by mu
	sendWindow int64              // connection window the client granted; guarded by mu
	peerWindow int64              // the client's SETTINGS_INITIAL_WINDOW_SIZE; guarded by mu
	peerFrame  int                // the client's SETTINGS_MAX_FRAME_SIZE; guarded by mu
	recvWindow int64              // bytes the client may still send on the connection; guarded by mu
	unacked    int64              // connection credit not yet sent; guarded by mu
	owed       int64              // connection credit held back while buffered is high; guarded by mu
	buffered   int64              // bytes queued in streams' inputs; guarded by mu
	henc       *hpack.Encoder     // writes into hbuf; guarded by mu
	hbuf       bytes.Buffer       // guarded by mu
	out        *outBuf            // frames not yet written; nil when none; guarded by mu
	queued     int64              // bytes of frames ever queued in out; guarded by mu
	sent       int64              // bytes of them written to the client; guarded by mu
	flights    []flight           // relayed DATA frames queued and not yet written, in order; guarded by mu
	writing    bool               // a goroutine is writing out; guarded by mu
	wdl        time.Time          // the write deadline the writer armed on nc (zero: none); owned by the writer (writing set)
	werr       error              // the first write failure; guarded by mu
	blocked    []*stream          // streams waiting for connection window or output room; guarded by mu
	goAway     bool               // GOAWAY sent: no new streams; guarded by mu
	closing    bool               // the connection is ending; guarded by mu
	parked     bool               // the reader waits for socket readiness; guarded by mu
	woken      bool               // the reader's read deadline was set to wake it; guarded by mu
	parkUntil  time.Time          // the deadline the reader parked with; zero: none; guarded by mu
	idleSince  time.Time          // when the connection last became idle (no stream, no worker); guarded by mu
	// handOff is set while the reader waits on a worker goroutine
	// that leaves the wait to another once the connection is idle;
	// guarded by mu.
	handOff bool
	notice  tunnel.Waker // the reader's wait when no goroutine waits (notify); nil otherwise; guarded by mu

	// Set by serve.
	ctx      context.Context
	stop     func() bool // ends the shutdown on ctx's end
	done     func()      // what ServeConnThen was given
	resumeFn func(error) // c.resume, bound once
	lookFn   func() bool // c.look, bound once
}

func newConn(s *Server, nc net.Conn, sess *gate.Session) *conn {
	c := &conn{
		s:          s,
		cfg:        &s.cfg,
		sess:       sess,
		nc:         nc,
		icept:      sess.Intercepted(),
		streams:    make(map[uint32]*stream),
		sendWindow: defaultWindow,
		peerWindow: defaultWindow,
		peerFrame:  minFrameSize,
		recvWindow: int64(s.cfg.InitialConnWindow),
	}
	c.wcond.L = &c.mu
	c.rd.nc = nc
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.hdec = newBlockDecoder(s.cfg.MaxHeaderListSize)
	c.newFramer()
	return c
}

// newFramer (re)makes the frame reader. Header blocks are read by
// c.hdec (conn.headers), whose HPACK decoder, which holds the
// connection's decoding state, carries over.
func (c *conn) newFramer() {
	fr := http2.NewFramer(io.Discard, &c.rd)
	fr.SetMaxReadFrameSize(c.cfg.MaxFrameSize)
	fr.SetReuseFrames()
	c.fr = fr
	c.bigFrame = false
}

// serve starts the connection on a goroutine of its own: it reads and
// handles frames until the connection ends, then tears it down and calls
// done.
func (c *conn) serve(ctx context.Context, done func()) {
	if tc, ok := c.nc.(*tls.Conn); ok {
		// Its Parker sees the bytes RecordConn read ahead, and through
		// an intercepted tunnel's wrapper; an intercepted tunnel that
		// came by an HTTP/2 CONNECT stream waits on the stream.
		if w, ok := tunnel.TLSWaiter(tc); ok {
			c.park, _ = w.(clientWaiter)
			c.looker, _ = w.(tunnel.Looker)
		}
	} else if c.raw != nil {
		if rc, err := c.raw.SyscallConn(); err == nil {
			c.park = tunnel.ParkerWaiter(tunnel.NewParker(rc)).(clientWaiter)
		}
	}
	c.ctx, c.done = ctx, done
	c.resumeFn = c.resume
	c.lookFn = c.look
	c.stop = context.AfterFunc(ctx, c.shutdown)
	go c.run(true, false)
}

// clientWaiter is the reader's wait for the client's bytes: a socket's
// tunnel.Parker, or the wait of the stream an intercepted tunnel that
// came by an HTTP/2 CONNECT runs in (streamConn); Wait is WaitRead
// without reading ahead.
type clientWaiter interface {
	tunnel.Waiter
	Wait() error
}

// How a frame loop (conn.frames) ended.
const (
	loopEnded    = iota // the connection ended without a GOAWAY sent
	loopGraceful        // the connection ended with a GOAWAY sent
	loopIdle            // the connection is idle: the caller waits for the client
)

// run serves the connection from here on, on a worker goroutine (first:
// from its start; ready: the socket has just been found readable). It
// returns when the connection has ended (then it has torn it down), or
// when it waits for the client on another goroutine or on none.
//
// With a socket to wait on, a worker whose stack has grown with the
// work (TLS records, HPACK, the requests) ends when the connection goes
// idle with tunnels open (and no other stream), or with no stream at all
// once the client has sent nothing for quietWait: the wait for the client
// is registered with Parker.Notify, which needs no goroutine, and a
// fresh worker resumes once the client has sent (resume); where there is
// no such wait, or the connection is shutting down, it waits on a fresh
// goroutine (waitThen), whose stack, which has done no work, stays
// small, rather than on the grown one, which the garbage collector could
// not shrink below 8 KiB.
func (c *conn) run(first, ready bool) {
	if c.park == nil {
		c.end(c.frames(c.ctx, first, ready, false) == loopGraceful)
		return
	}
	for {
		if r := c.frames(c.ctx, first, ready, true); r != loopIdle {
			c.end(r == loopGraceful)
			return
		}
		first = false
		if c.bigFrame {
			c.newFramer() // the framer's read buffer is not kept idle
		}
		if hook := handOffHook.Load(); hook != nil {
			(*hook)(c)
		}
		switch c.notify() {
		case notifyWaiting:
			return
		case notifyReady:
			ready = true // the client has sent meanwhile: serve on here
		case notifyFailed:
			c.end(false)
			return
		default:
			go c.waitThen()
			return
		}
	}
}

// handOffHook, when set (by a test), is called by run between a
// worker's last wait and notify; nil otherwise.
var handOffHook atomic.Pointer[func(*conn)]

// lookAgainHook, when set (by a test), is called by wait, with c.mu
// held, each time the reader's deadline has brought it back to find
// that it must park on (errLookAgain); nil otherwise.
var lookAgainHook atomic.Pointer[func(*conn)]

// What notify did.
const (
	notifyNone    = iota // nothing: the caller waits on a goroutine
	notifyWaiting        // registered: resume will serve on
	notifyReady          // the socket is readable already: read on
	notifyFailed         // the socket failed: the connection ends
)

// end tears the connection down once it has ended, and says so.
func (c *conn) end(graceful bool) {
	c.stop()
	c.finish(graceful)
	c.done()
}

// waitThen waits for the client on this goroutine, then serves on (run).
func (c *conn) waitThen() {
	err := c.wait(false)
	switch err {
	case nil, errWoken:
		c.run(false, err == nil)
	case errDone:
		c.end(true)
	case errIdle:
		c.mu.Lock()
		c.goAwayLocked(http2.ErrCodeNo)
		c.mu.Unlock()
		c.end(true)
	default:
		c.end(false)
	}
}

// notify registers the wait for the client of an idle connection with
// Parker.Notify, to resume on a fresh worker, unless the client has sent
// meanwhile (with a looker, NotifyLook: the wait itself looks at what
// came meanwhile, and resumes at once if it is a frame's bytes). It registers nothing (notifyNone) where the platform has no
// such wait, and when the connection has sent GOAWAY (a connection
// shutting down may be closed under it, which a Notice would see only at
// its loop's next look for closed sockets, up to a second later) or is
// no longer idle. A connection with no stream waits until its idle
// timeout at the latest: resume then ends it.
func (c *conn) notify() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	quiet := c.quietLocked()
	if c.goAway || !quiet && !c.idleLocked() {
		return notifyNone
	}
	if !c.rd.deadline.IsZero() {
		c.nc.SetReadDeadline(time.Time{}) // the bound of the last frame's reads
		c.rd.deadline = time.Time{}
	}
	if c.looker == nil {
		switch ok, err := c.park.Ready(); {
		case ok && err != nil:
			return notifyFailed
		case ok:
			return notifyReady
		}
	}
	// A connection with a looker does not look at its socket here and
	// then read on: what came since the worker's last look, a KeyUpdate
	// say, would leave it in a blocking read. Its wait's registration is
	// the last look (NotifyLook sees the socket readable at once, and
	// reads it without waiting). With tunnels open no deadline brings a
	// Notice's wait back: the end of the last stream must wake it
	// (becameIdleLocked) to start the idle timeout. With no stream, none
	// can end while it waits.
	var deadline time.Time
	if quiet {
		deadline = gate.Deadline(later(c.waitFrom, c.idleSince), c.cfg.IdleTimeout)
	}
	var n tunnel.Waker
	var ok bool
	if c.looker != nil {
		n, ok = c.looker.NotifyLook(deadline, c.lookFn, c.resumeFn)
	} else {
		n, ok = c.park.Notify(deadline, c.resumeFn)
	}
	if !ok {
		return notifyNone
	}
	c.parked, c.notice, c.parkUntil = true, n, time.Time{}
	return notifyWaiting
}

// resume is the end of notify's wait: it serves on, on the Notice's
// goroutine.
func (c *conn) resume(err error) {
	c.mu.Lock()
	c.parked, c.notice = false, nil
	woken := c.woken
	c.woken = false
	c.mu.Unlock()
	switch {
	case woken || errors.Is(err, tunnel.ErrWoken):
		c.run(false, false)
	case err == nil:
		c.run(false, true)
	case errors.Is(err, os.ErrDeadlineExceeded):
		// The idle timeout of a connection with no stream.
		c.mu.Lock()
		c.goAwayLocked(http2.ErrCodeNo)
		c.mu.Unlock()
		c.end(true)
	default:
		c.end(false)
	}
}

// frames reads and handles frames until the connection ends or, when
// handOff is set and the connection is idle, until it must wait for the
// client (loopIdle). first starts the connection: SETTINGS sent, the
// client preface read. ready says that the wait has just found the
// socket readable: a frame is read before the next wait.
func (c *conn) frames(ctx context.Context, first, ready, handOff bool) int {
	if first {
		if r, ok := c.start(ctx); !ok {
			return r
		}
	}
	for {
		if c.rd.empty() && c.sawSettings && !ready {
			if err := c.wait(handOff); err != nil {
				switch err {
				case errWoken:
					continue
				case errHandOff:
					return loopIdle
				case errDone:
					return loopGraceful
				case errIdle:
					c.mu.Lock()
					c.goAwayLocked(http2.ErrCodeNo)
					c.mu.Unlock()
					return loopGraceful
				}
				return loopEnded
			}
		}
		ready = false
		if !c.frame() {
			if c.goAwaySent() {
				return loopGraceful
			}
			return loopEnded
		}
		c.mu.Lock()
		done := c.drainedLocked()
		c.mu.Unlock()
		if done {
			return loopGraceful
		}
	}
}

// idleLocked reports whether the connection serves tunnels and no
// other stream: then its worker leaves the wait for the client to run's
// goroutine once the client has sent nothing for tunnelWait. A
// connection with no stream at all (quietLocked) keeps its worker for
// quietWait first: a client that sends one request at a time would
// otherwise start a worker for each.
func (c *conn) idleLocked() bool {
	if len(c.streams) == 0 {
		return false
	}
	for _, s := range c.streams {
		if !s.tunnel && !s.parkedLocked() {
			return false
		}
	}
	return true
}

// quietLocked reports whether the connection has no stream and no
// stream goroutine: its idle timeout runs.
func (c *conn) quietLocked() bool {
	return len(c.streams) == 0 && c.workers == 0
}

// start sends SETTINGS and reads the client preface. When the
// connection cannot go on it returns how it ended and false.
func (c *conn) start(ctx context.Context) (int, bool) {
	c.mu.Lock()
	c.writeSettingsLocked()
	c.flushLocked()
	c.mu.Unlock()

	c.rd.deadline = gate.Deadline(time.Now(), c.cfg.HandshakeTimeout)
	c.nc.SetReadDeadline(c.rd.deadline)
	if !c.prefaced {
		var pre [len(http2.ClientPreface)]byte
		if _, err := io.ReadFull(&c.rd, pre[:]); err != nil || string(pre[:]) != http2.ClientPreface {
			if err == nil {
				c.connError(http2.ConnectionError(http2.ErrCodeProtocol), errNoPreface)
				return loopGraceful, false
			}
			return loopEnded, false
		}
	}
	c.rd.track = true
	if ctx.Err() != nil {
		c.shutdown()
	}
	return 0, true
}

// frame reads and handles one frame. It reports whether the connection
// goes on.
func (c *conn) frame() bool {
	fh, err := c.fr.ReadFrameHeader()
	decoded := false // a header block was read and decoded
	if err == nil {
		if fh.Type == http2.FrameHeaders {
			decoded, err = c.headers(fh)
		} else {
			if fh.Length > framerKeep {
				c.bigFrame = true
			}
			var f http2.Frame
			if f, err = c.fr.ReadFrameForHeader(fh); err == nil {
				err = c.process(f)
			}
		}
	}
	if err != nil {
		method := ""
		if decoded {
			method = c.hdec.pseudo(":method")
		}
		if !c.handleError(fh, method, err) {
			return false
		}
	}
	if !c.sawSettings {
		c.nc.SetReadDeadline(time.Time{})
		c.rd.deadline = time.Time{}
		c.sawSettings = true
		// From now on a read within a frame is bounded.
		c.rd.timeout, c.rd.bounded, c.rd.always = c.cfg.WriteTimeout, true, c.park != nil
	}
	return true
}

// headers reads, decodes and handles a header block, whose HEADERS frame
// header fh was just read. It reports whether the block was decoded
// (then a stream error came from handling its request).
func (c *conn) headers(fh http2.FrameHeader) (bool, error) {
	// A header block is bounded in time and in frames.
	block := !fh.Flags.Has(http2.FlagHeadersEndHeaders)
	if block {
		c.rd.startBlock(gate.Deadline(time.Now(), c.cfg.HandshakeTimeout), c.maxContinuations())
	}
	err := c.hdec.read(fh, c.fr, &c.rd)
	if block {
		c.rd.endBlock()
	}
	if err != nil {
		return false, err
	}
	if !c.sawSettings {
		return true, http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return true, c.processHeaders(c.hdec)
}

// handleError deals with an error from reading or handling a frame;
// method is the :method of a header block decoded before the error, ""
// when none. It reports whether the connection goes on.
func (c *conn) handleError(fh http2.FrameHeader, method string, err error) bool {
	var se http2.StreamError
	var ce http2.ConnectionError
	switch {
	case errors.As(err, &se):
		c.mu.Lock()
		if fh.Type == http2.FrameHeaders && se.StreamID > c.maxID && se.StreamID%2 == 1 {
			// A refused or malformed new stream is closed, and counts.
			c.maxID = se.StreamID
		}
		s := c.streams[se.StreamID]
		if s != nil {
			c.resetLocked(s, se.Code, true)
		} else {
			c.writeRSTLocked(se.StreamID, se.Code)
		}
		c.kickLocked()
		c.mu.Unlock()
		if s == nil && fh.Type == http2.FrameHeaders && se.Code == http2.ErrCodeProtocol {
			// A malformed request, which never became a stream (an open
			// stream's own record tells of its end).
			c.rejectStream(method, se)
		}
		return true
	case errors.As(err, &ce):
		c.connError(ce, err)
		return false
	case errors.Is(err, http2.ErrFrameTooLarge):
		c.connError(http2.ConnectionError(http2.ErrCodeFrameSize), err)
		return false
	case errors.Is(err, errContinuations), errors.Is(err, errSettingsFlood):
		c.connError(http2.ConnectionError(http2.ErrCodeEnhanceYourCalm), err)
		return false
	case c.sawSettings && errors.Is(err, os.ErrDeadlineExceeded):
		c.s.log.Debug("h2: client read timed out", "client", c.clientAddr)
		return false
	}
	if !c.sawSettings && err != nil {
		c.s.log.Debug("h2: connection ended before its first SETTINGS", "err", err)
	}
	return false
}

// maxContinuations returns how many CONTINUATION frames a header block
// may have: enough to carry a header list of the largest size allowed in
// fragments of 1 KiB, and at least 16.
func (c *conn) maxContinuations() int {
	return max(16, int(c.cfg.MaxHeaderListSize>>10))
}

// connError sends GOAWAY with the error's code, for the client's error
// cause, and logs the connection's end: one access log record, whatever
// the streams before it. It returns true (a GOAWAY was sent).
func (c *conn) connError(ce http2.ConnectionError, cause error) bool {
	c.mu.Lock()
	c.goAwayLocked(http2.ErrCode(ce))
	c.mu.Unlock()
	if d := c.fr.ErrorDetail(); d != nil {
		cause = fmt.Errorf("%w: %v", cause, d)
	}
	var g gate.Grant
	c.sess.Reject(&gate.Request{Log: accesslog.ProtoH2}, &g, 0, accesslog.ReasonProtocol, cause)
	return true
}

// maxRejectedLogged bounds the malformed requests logged per connection:
// a client flooding them leaves that many lines, not one per frame.
const maxRejectedLogged = 16

// rejectStream logs a request refused as malformed, its stream reset with
// PROTOCOL_ERROR: with its method when that (from a header block that
// decoded) is a valid one, never its target; past maxRejectedLogged on
// the connection, not at all.
func (c *conn) rejectStream(method string, se http2.StreamError) {
	if c.rejected == maxRejectedLogged {
		return
	}
	c.rejected++
	r := gate.Request{Log: accesslog.ProtoH2}
	if validToken(method) {
		r.Method = method
	}
	cause := se.Cause
	if cause == nil {
		cause = se
	}
	var g gate.Grant
	c.sess.Reject(&r, &g, 0, accesslog.ReasonProtocol, cause)
}

func (c *conn) goAwaySent() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.goAway
}

// drainedLocked reports whether a connection that sent GOAWAY has no
// stream or stream goroutine left.
func (c *conn) drainedLocked() bool {
	return c.goAway && len(c.streams) == 0 && c.workers == 0
}

// wait parks the reader until the client's socket is readable, holding
// no read buffer, with a deadline when the connection is idle. It
// returns errWoken when shutdown or a finished stream woke it, errDone
// when the connection has drained, errIdle on the idle timeout, and a
// socket error otherwise. Without a socket to wait on it returns nil at
// once and the read blocks instead. With handOff set (the caller is a
// worker of run) it returns errHandOff instead of waiting while the
// connection is idle (tunnels only), after tunnelWait when it has just
// read a big frame, and errWoken once it has become idle meanwhile.
//
// The idle timeout runs from the later of the call and the moment the
// connection became idle (conn.idleSince). A reader parked while a
// stream other than a tunnel is open keeps a deadline that brings it
// back no later than the idle timeout after it parked (the deadline of
// its last read, when that is earlier), so that a stream's end need not
// wake it: it looks again when that deadline passes, and parks on until
// the idle timeout is really over. One parked with tunnels only has no
// deadline, and the end of the last stream wakes it. A worker (handOff)
// parked with no stream returns errHandOff once the client has sent
// nothing for quietWait.
func (c *conn) wait(handOff bool) error {
	c.hdec.release()
	c.rd.release()
	c.waitFrom = time.Now()
	c.mu.Lock()
	idle := handOff && c.idleLocked() // a worker's, for tunnels only
	if c.bigFrame && !idle {
		// The framer's read buffer is not kept through a wait that
		// may last. A worker's wait for its tunnels' next frame lasts
		// tunnelWait at most, and ends in a hand-off (run) that drops
		// it.
		c.newFramer()
	}
	if c.drainedLocked() {
		c.mu.Unlock()
		return errDone
	}
	if idle && !c.bigFrame {
		c.mu.Unlock()
		return errHandOff
	}
	if c.park == nil {
		c.mu.Unlock()
		c.armBlockingRead()
		return nil
	}
	// The frame of this function stays on the stack of a goroutine
	// parked for an idle tunnel: the work around the wait is done in
	// functions of their own.
	for {
		c.armParkLocked(handOff)
		c.parked, c.handOff = true, handOff
		c.mu.Unlock()
		var err error
		if handOff {
			// On a worker: the record is read as the wait ends, one
			// system call fewer than a peek and then a read; and, where
			// it can be, its plaintext without waiting for more, so
			// that records with none (a KeyUpdate) or one cut short
			// leave the worker to wait on until its deadline (and
			// then park), not in a read until the client sends.
			err = c.park.WaitRead()
			if err == nil && c.looker != nil && !c.look() {
				err = tunnel.ErrNoPlaintext
			}
		} else {
			err = c.park.Wait() // run's goroutine keeps its small stack
		}
		c.mu.Lock()
		c.parked, c.handOff = false, false
		if err == tunnel.ErrNoPlaintext {
			if !c.woken {
				continue // no frame yet: wait on
			}
			err = nil
		}
		if err = c.parkedLocked(err, handOff); err != errLookAgain {
			c.mu.Unlock()
			return err
		}
		if hook := lookAgainHook.Load(); hook != nil {
			(*hook)(c)
		}
	}
}

// look reads what the client's socket brought into the reader's empty
// buffer without waiting (looker's ReadNow), on the reader's goroutine
// (wait's) or before resume (notify's NotifyLook): true when that gave
// bytes, or an error or the end of the stream, which the next frame's
// read then meets; false, the buffer given back, when the records held
// no plaintext (a KeyUpdate) or one was cut short, which crypto/tls
// keeps for the next read.
func (c *conn) look() bool {
	r := &c.rd
	if r.buf == nil {
		r.buf = bufPool.Get().(*[bufSize]byte)
	}
	n, err := c.looker.ReadNow(r.nc, r.buf[:])
	if n == 0 && errors.Is(err, tunnel.ErrNoPlaintext) {
		r.release()
		return false
	}
	if n == 0 && err == nil {
		err = io.ErrNoProgress
	}
	r.r, r.w, r.err = 0, n, err
	return true
}

// errLookAgain is parkedLocked's answer when the reader parks again.
var errLookAgain = errors.New("h2: park again")

// armBlockingRead sets the read deadline of a connection read without a
// Parker: the idle timeout from now when the connection is idle, none
// otherwise.
//
//go:noinline
func (c *conn) armBlockingRead() {
	c.mu.Lock()
	idle := len(c.streams) == 0 && c.workers == 0
	c.mu.Unlock()
	var d time.Time
	if idle {
		d = gate.Deadline(c.waitFrom, c.cfg.IdleTimeout)
	}
	if !d.IsZero() || !c.rd.deadline.IsZero() {
		c.nc.SetReadDeadline(d)
		c.rd.deadline = d
	}
}

// armParkLocked sets the read deadline the reader parks with (see wait)
// and notes it in parkUntil. A worker (handOff) parks a connection with
// no stream until quietWait after it became quiet at the latest, and
// one with tunnels only that has just read a big frame for tunnelWait:
// then it leaves the wait to no goroutine.
//
//go:noinline
func (c *conn) armParkLocked(handOff bool) {
	now := time.Now()
	var want time.Time // the latest deadline the park may have; zero: none
	switch {
	case c.quietLocked():
		from := later(c.waitFrom, c.idleSince)
		want = gate.Deadline(from, c.cfg.IdleTimeout)
		if handOff {
			want = c.quietUntil(from)
		}
	case !c.idleLocked():
		want = gate.Deadline(now, c.cfg.IdleTimeout)
	case handOff:
		want = c.waitFrom.Add(tunnelWait)
	}
	if d := c.rd.deadline; want.IsZero() {
		if !d.IsZero() {
			c.nc.SetReadDeadline(time.Time{})
			c.rd.deadline = time.Time{}
		}
	} else if d.IsZero() || !d.After(now) || d.After(want) {
		// An earlier deadline still ahead is kept: it only brings the
		// reader back sooner.
		c.nc.SetReadDeadline(want)
		c.rd.deadline = want
	}
	c.parkUntil = c.rd.deadline
}

// quietUntil returns when a worker's wait for a client quiet since from
// ends: quietWait later, or at the idle timeout if that comes first.
func (c *conn) quietUntil(from time.Time) time.Time {
	q := from.Add(quietWait)
	if d := gate.Deadline(from, c.cfg.IdleTimeout); !d.IsZero() && d.Before(q) {
		return d
	}
	return q
}

// parkedLocked tells what the end of a park with err means for wait:
// errLookAgain when the reader parks again, else wait's answer.
//
//go:noinline
func (c *conn) parkedLocked(err error, handOff bool) error {
	if c.woken {
		c.woken = false
		c.rd.deadline = time.Unix(1, 0) // what wakeLocked set
		return errWoken
	}
	if err == nil || !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	// The deadline has passed: the idle timeout, or a look at whether
	// it has begun.
	if c.drainedLocked() {
		return errDone
	}
	quiet := c.quietLocked()
	from := later(c.waitFrom, c.idleSince)
	now := time.Now()
	if quiet && c.cfg.IdleTimeout > 0 && !now.Before(from.Add(c.cfg.IdleTimeout)) {
		return errIdle
	}
	if handOff && (c.idleLocked() || quiet && !now.Before(from.Add(quietWait/2))) {
		// (A deadline that becameIdleLocked moved may fall a little
		// before quietWait is over: the client has been quiet long
		// enough.)
		return errHandOff
	}
	return errLookAgain
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// becameIdleLocked notes that the connection has no stream and no
// stream goroutine left: its idle timeout starts. It wakes the reader
// unless the reader's deadline brings it back in time (see wait); a
// worker parked (handOff) gets a deadline quietWait from now, after
// which it leaves the wait to no goroutine (run), unless the client has
// sent meanwhile.
func (c *conn) becameIdleLocked() {
	c.idleSince = time.Now()
	switch {
	case c.parkUntil.IsZero():
		c.wakeLocked()
	case c.parked && c.handOff && !c.woken:
		// The deadline is moved later too once it would end the wait
		// more than quietWait/2 early (one the last request left, say):
		// a client sending every 64 ms would otherwise have its worker
		// woken by the deadline for nearly every request, to find the
		// client not quiet long enough (parkedLocked) and wait again.
		q := c.quietUntil(c.idleSince)
		if q.Before(c.parkUntil) || c.parkUntil.Before(c.idleSince.Add(quietWait/2)) {
			c.nc.SetReadDeadline(q)
			c.rd.deadline, c.parkUntil = q, q
		}
	}
}

// wakeLocked wakes the reader if it is parked, so that it looks again at
// whether the connection has drained.
func (c *conn) wakeLocked() {
	if c.parked && !c.woken {
		c.woken = true
		if c.notice != nil {
			c.notice.Wake()
		} else {
			c.nc.SetReadDeadline(time.Unix(1, 0))
		}
	}
}

// idledLocked wakes the reader if it waits on a worker goroutine and
// the connection has become idle (tunnels open, no other stream), so
// that the worker hands the wait off (see run).
func (c *conn) idledLocked() {
	if c.parked && c.handOff && c.idleLocked() {
		c.wakeLocked()
	}
}

// shutdown starts a graceful close when the server shuts down: GOAWAY,
// then the streams in progress finish.
func (c *conn) shutdown() {
	c.mu.Lock()
	if c.closing { // finish is joining the writers: start none
		c.mu.Unlock()
		return
	}
	c.goAwayLocked(http2.ErrCodeNo)
	c.wakeLocked()
	c.mu.Unlock()
}

// goAwayLocked queues a GOAWAY naming the last stream rustle handles,
// once; no stream is accepted after it.
func (c *conn) goAwayLocked(code http2.ErrCode) {
	if c.goAway {
		return
	}
	c.goAway = true
	var p [8]byte
	putUint32(p[:], c.maxID)
	putUint32(p[4:], uint32(code))
	c.appendFrame(http2.FrameGoAway, 0, 0, p[:])
	c.kickLocked()
}

// finish tears the connection down: every stream still open is reset
// (its goroutines see it), queued output is written, the connection
// closed, and every goroutine it started joined.
func (c *conn) finish(linger bool) {
	c.mu.Lock()
	c.closing = true
	for _, s := range c.streams {
		c.resetLocked(s, http2.ErrCodeCancel, false) // cancels dials too
	}
	if c.werr == nil {
		// A writer blocked on a client that does not read gives up
		// soon; then what is queued (GOAWAY) goes out.
		c.nc.SetWriteDeadline(time.Now().Add(lingerTime))
		for c.writing {
			c.wcond.Wait()
		}
		c.flushLocked()
	}
	linger = linger && c.werr == nil
	c.mu.Unlock()

	if linger && c.raw != nil {
		if cw, ok := c.nc.(interface{ CloseWrite() error }); ok && c.nc != net.Conn(c.raw) {
			cw.CloseWrite() // TLS close_notify
		}
		c.raw.CloseWrite()
		c.raw.SetReadDeadline(time.Now().Add(lingerTime))
		var discard [512]byte
		for i := 0; i < 1000; i++ {
			if _, err := c.raw.Read(discard[:]); err != nil {
				break
			}
		}
	}
	c.nc.Close()
	c.wg.Wait()
	c.rd.discard()
	c.mu.Lock()
	c.releaseOutLocked()
	c.mu.Unlock()
}

// process handles one frame.
func (c *conn) process(f http2.Frame) error {
	if !c.sawSettings {
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			return http2.ConnectionError(http2.ErrCodeProtocol)
		}
	}
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.processData(f)
	case *http2.SettingsFrame:
		return c.processSettings(f)
	case *http2.WindowUpdateFrame:
		return c.processWindowUpdate(f)
	case *http2.RSTStreamFrame:
		return c.processRSTStream(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.mu.Lock()
			c.appendFrame(http2.FramePing, http2.FlagPingAck, 0, f.Data[:])
			c.kickLocked()
			c.mu.Unlock()
		}
		return nil
	case *http2.PriorityFrame:
		if f.StreamDep == f.StreamID {
			return http2.StreamError{StreamID: f.StreamID, Code: http2.ErrCodeProtocol}
		}
		return nil
	case *http2.GoAwayFrame:
		// The client starts no more streams; close once they are done.
		c.mu.Lock()
		c.goAwayLocked(http2.ErrCodeNo)
		c.mu.Unlock()
		return nil
	case *http2.PushPromiseFrame, *http2.ContinuationFrame:
		// (HEADERS frames are read by conn.headers.)
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return nil // unknown frame types are ignored (RFC 9113 §5.5)
}

func (c *conn) processSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	if f.NumSettings() > maxSettings {
		return errSettingsFlood
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// The streams' windows change once per frame, by the last
	// SETTINGS_INITIAL_WINDOW_SIZE in it: a frame repeating the entry
	// thousands of times costs no more than one with it once.
	window := int64(-1)
	err := f.ForeachSetting(func(st http2.Setting) error {
		if err := st.Valid(); err != nil {
			return err
		}
		switch st.ID {
		case http2.SettingHeaderTableSize:
			// The encoder keeps the smallest size it was given
			// until its next table size update (RFC 7541 §4.2).
			c.henc.SetMaxDynamicTableSize(st.Val)
		case http2.SettingInitialWindowSize:
			window = int64(st.Val)
		case http2.SettingMaxFrameSize:
			c.peerFrame = int(st.Val)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if window >= 0 && window != c.peerWindow {
		delta := window - c.peerWindow
		c.peerWindow = window
		c.s.windowChanges.Add(uint64(len(c.streams)))
		for _, s := range c.streams {
			s.sendWindow += delta
			if s.sendWindow > maxWindow {
				return http2.ConnectionError(http2.ErrCodeFlowControl)
			}
			s.cond.Broadcast()
		}
	}
	c.appendFrame(http2.FrameSettings, http2.FlagSettingsAck, 0, nil)
	c.kickLocked()
	return nil
}

func (c *conn) processWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, inc := f.StreamID, int64(f.Increment)
	if id == 0 {
		c.sendWindow += inc
		if c.sendWindow > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
		c.wakeBlockedLocked()
		return nil
	}
	if id > c.maxID || id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol) // idle stream
	}
	s := c.streams[id]
	if s == nil {
		return nil // closed: a late frame
	}
	s.sendWindow += inc
	if s.sendWindow > maxWindow {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	s.cond.Broadcast()
	return nil
}

func (c *conn) processRSTStream(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID > c.maxID || f.StreamID%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol) // idle stream
	}
	if s := c.streams[f.StreamID]; s != nil {
		early := !s.headersSent
		c.resetLocked(s, f.ErrCode, false)
		if early && !c.earlyResetLocked() {
			c.s.log.Debug("h2: too many streams reset before their answer", "client", c.clientAddr)
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
	}
	return nil
}

// resetBudget returns how many streams a client may reset before rustle
// has answered them (or open while the workers of such streams are still
// running), at once (burst) and per second after that: twice
// the streams it may have open, at least 100 and at most 1,000, and a
// tenth of that per second. A stream reset so costs rustle its worker,
// its authorization and maybe a dial, the client only two small frames
// (the rapid reset attack, CVE-2023-44487).
func resetBudget(maxStreams uint32) (burst int, perSecond float64) {
	burst = int(min(max(2*uint64(maxStreams), 100), 1000))
	return burst, float64(burst) / 10
}

// earlyResetLocked spends one of the client's early resets; it reports
// false when none is left.
func (c *conn) earlyResetLocked() bool {
	burst, rate := resetBudget(c.cfg.MaxConcurrentStreams)
	now := time.Now()
	if c.resetAt.IsZero() {
		c.resets = float64(burst)
	} else {
		c.resets = min(float64(burst), c.resets+now.Sub(c.resetAt).Seconds()*rate)
	}
	c.resetAt = now
	if c.resets < 1 {
		return false
	}
	c.resets--
	return true
}

// processHeaders handles the header block f has just decoded.
func (c *conn) processHeaders(f *blockDecoder) error {
	id := f.id
	c.mu.Lock()
	defer c.mu.Unlock()
	if id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	if id <= c.maxID {
		s := c.streams[id]
		switch {
		case s == nil:
			return http2.ConnectionError(http2.ErrCodeStreamClosed)
		case s.remoteDone:
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
		case !f.endStream():
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		// Trailers.
		for _, hf := range f.fields() {
			if len(hf.Name) > 0 && hf.Name[0] == ':' {
				return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
			}
		}
		if f.truncated {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
		}
		// Checked, then dropped: the upstream body ends without them.
		return c.endOfRequestLocked(s)
	}
	c.maxID = id
	if f.flags.Has(http2.FlagHeadersPriority) && f.priority.StreamDep == id {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if c.goAway || c.closing || len(c.streams) >= int(c.cfg.MaxConcurrentStreams) {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream}
	}
	if c.workers >= 2*int(c.cfg.MaxConcurrentStreams) {
		// The workers of streams that have ended (reset before
		// their answer) are still running: refused, and counted as
		// reset early.
		if !c.earlyResetLocked() {
			return http2.ConnectionError(http2.ErrCodeEnhanceYourCalm)
		}
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeRefusedStream}
	}
	var req request
	if f.truncated {
		req = local(request{method: f.pseudo(":method"), contentLength: -1}, 431, "request header fields too large")
	} else {
		var err error
		req, err = parseRequest(f.fields(), c.icept == nil, c.localAddr, c.icept)
		if err != nil {
			return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol, Cause: err}
		}
	}
	if f.endStream() && req.contentLength > 0 {
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	s := c.newStreamLocked(id, req)
	// The stream's fields lie in the decoder's buffer, which the stream
	// takes.
	s.fields = f.take()
	if f.endStream() {
		s.remoteDone = true
		s.req.endStream = true
	}
	c.streams[id] = s
	c.workers++
	c.wg.Add(1)
	switch req.kind {
	case kindForward, kindLocal:
		c.s.pool.Start(s) // the stream ends with its answer
	default:
		go s.run() // a tunnel's stack stays small
	}
	return nil
}

// endOfRequestLocked handles END_STREAM from the client.
func (c *conn) endOfRequestLocked(s *stream) error {
	if s.req.contentLength >= 0 && s.got != s.req.contentLength {
		return http2.StreamError{StreamID: s.id, Code: http2.ErrCodeProtocol}
	}
	s.remoteDone = true
	s.cond.Broadcast()
	s.wakeInterceptLocked()
	s.kickUpLocked()
	if s.localDone {
		c.removeLocked(s)
	}
	return nil
}

func (c *conn) processData(f *http2.DataFrame) error {
	id := f.StreamID
	n := int64(f.Length)
	data := f.Data()
	c.mu.Lock()
	defer c.mu.Unlock()
	if id > c.maxID || id%2 == 0 {
		return http2.ConnectionError(http2.ErrCodeProtocol) // idle stream
	}
	if n > c.recvWindow {
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvWindow -= n
	s := c.streams[id]
	if s == nil || s.remoteDone {
		c.creditConnLocked(n)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeStreamClosed}
	}
	if n > s.recvWindow {
		c.creditConnLocked(n)
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeFlowControl}
	}
	s.recvWindow -= n
	if pad := n - int64(len(data)); pad > 0 {
		c.creditConnLocked(pad)
		s.creditLocked(pad)
	}
	s.got += int64(len(data))
	if s.req.contentLength >= 0 && s.got > s.req.contentLength {
		c.creditConnLocked(int64(len(data)))
		return http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	if len(data) > 0 {
		s.deliverLocked(data)
	}
	if f.StreamEnded() {
		return c.endOfRequestLocked(s)
	}
	c.kickLocked()
	return nil
}

// creditConnLocked returns n bytes of connection window to the client,
// in batches.
func (c *conn) creditConnLocked(n int64) {
	c.unacked += n
	if c.unacked >= int64(c.cfg.InitialConnWindow/4) {
		c.writeWindowUpdateLocked(0, c.unacked)
		c.recvWindow += c.unacked
		c.unacked = 0
	}
}

// queuedLocked accounts for n bytes queued in a stream's input: their
// connection credit is returned now unless the connection already holds
// more than a connection window of queued bytes, which bounds its memory.
func (c *conn) queuedLocked(n int64) {
	c.buffered += n
	c.owed += n
	c.releaseOwedLocked()
}

// dequeuedLocked accounts for n queued bytes consumed.
func (c *conn) dequeuedLocked(n int64) {
	c.buffered -= n
	c.releaseOwedLocked()
}

func (c *conn) releaseOwedLocked() {
	if c.owed > 0 && c.buffered <= int64(c.cfg.InitialConnWindow) {
		c.creditConnLocked(c.owed)
		c.owed = 0
	}
}

// resetLocked ends s abnormally: RST_STREAM with code when send is set,
// and every goroutine of the stream is woken to give up.
func (c *conn) resetLocked(s *stream, code http2.ErrCode, send bool) {
	if s.reset {
		return
	}
	s.reset = true
	if send {
		c.writeRSTLocked(s.id, code)
		c.kickLocked()
	}
	c.removeLocked(s)
	if s.cancel != nil {
		s.cancel()
	}
	if s.paceStop != nil {
		s.paceStop()
	}
	if s.up != nil {
		s.up.SetDeadline(time.Unix(1, 0))
	}
	if s.upWait != nil {
		s.upWait.Wake() // the tunnel's wait for its upstream
	}
	s.wakeInterceptLocked()
	if !s.pumping {
		c.dequeuedLocked(int64(s.in.n))
		s.in.drop()
	}
	s.cond.Broadcast()
}

// removeLocked forgets a stream that is closed.
func (c *conn) removeLocked(s *stream) {
	if c.streams[s.id] == s {
		delete(c.streams, s.id)
		switch {
		case c.goAway:
			c.wakeLocked()
		case len(c.streams) == 0 && c.workers == 0:
			c.becameIdleLocked()
		case !s.tunnel:
			c.idledLocked()
		}
	}
}

// wakeBlockedLocked wakes the streams waiting for connection window or
// output room.
func (c *conn) wakeBlockedLocked() {
	for i, s := range c.blocked {
		s.blocked = false
		s.cond.Broadcast()
		c.blocked[i] = nil
	}
	c.blocked = c.blocked[:0]
}

// Output. Frames are appended to c.out under mu, in the order they must
// be sent (which is also the order HPACK encodes header blocks in), and
// written by one goroutine at a time.

func (c *conn) appendFrame(t http2.FrameType, flags http2.Flags, id uint32, payload []byte) {
	if c.out == nil {
		c.out = outPool.Get().(*outBuf)
	}
	n := len(payload)
	c.out.b = append(c.out.b, byte(n>>16), byte(n>>8), byte(n), byte(t), byte(flags),
		byte(id>>24)&0x7f, byte(id>>16), byte(id>>8), byte(id))
	c.out.b = append(c.out.b, payload...)
	c.queued += int64(9 + n)
	if len(c.out.b) > outHardLimit && c.werr == nil {
		c.werr = errors.New("h2: client does not read its answers")
		c.nc.Close()
	}
}

func (c *conn) writeSettingsLocked() {
	settings := [...]http2.Setting{
		{ID: http2.SettingMaxConcurrentStreams, Val: c.cfg.MaxConcurrentStreams},
		{ID: http2.SettingInitialWindowSize, Val: c.cfg.InitialStreamWindow},
		{ID: http2.SettingMaxFrameSize, Val: c.cfg.MaxFrameSize},
		{ID: http2.SettingMaxHeaderListSize, Val: c.cfg.MaxHeaderListSize},
		{ID: http2.SettingEnableConnectProtocol, Val: 1},
	}
	if c.icept != nil {
		// Inside an intercepted tunnel, no WebSocket over HTTP/2: its
		// tunnel relays TCP sockets only, and the origin's is TLS. The
		// client opens an HTTP/1.1 connection for it instead.
		settings[len(settings)-1].Val = 0
	}
	var p [len(settings) * 6]byte
	for i, st := range settings {
		p[i*6] = byte(st.ID >> 8)
		p[i*6+1] = byte(st.ID)
		putUint32(p[i*6+2:], st.Val)
	}
	c.appendFrame(http2.FrameSettings, 0, 0, p[:])
	if extra := int64(c.cfg.InitialConnWindow) - defaultWindow; extra > 0 {
		c.writeWindowUpdateLocked(0, extra)
	}
}

func (c *conn) writeWindowUpdateLocked(id uint32, n int64) {
	var p [4]byte
	putUint32(p[:], uint32(n))
	c.appendFrame(http2.FrameWindowUpdate, 0, id, p[:])
}

func (c *conn) writeRSTLocked(id uint32, code http2.ErrCode) {
	var p [4]byte
	putUint32(p[:], uint32(code))
	c.appendFrame(http2.FrameRSTStream, 0, id, p[:])
}

// writeHeadersLocked encodes fields and queues them as a HEADERS frame
// and as many CONTINUATION frames as the client's frame size needs.
func (c *conn) writeHeadersLocked(id uint32, fields []hpack.HeaderField, end bool) {
	c.hbuf.Reset()
	for _, f := range fields {
		c.henc.WriteField(f)
	}
	block := c.hbuf.Bytes()
	t := http2.FrameHeaders
	for {
		n := min(len(block), c.peerFrame)
		var flags http2.Flags
		if t == http2.FrameHeaders && end {
			flags |= http2.FlagHeadersEndStream
		}
		if n == len(block) {
			flags |= http2.FlagHeadersEndHeaders
		}
		c.appendFrame(t, flags, id, block[:n])
		block = block[n:]
		if len(block) == 0 {
			break
		}
		t = http2.FrameContinuation
	}
	if c.hbuf.Cap() > 4<<10 {
		c.hbuf = bytes.Buffer{}
	}
}

// kickLocked gets queued output written: by a new goroutine unless one
// is writing already. The reader uses it, as it must never block on the
// client.
func (c *conn) kickLocked() {
	if c.writing || c.out == nil || len(c.out.b) == 0 || c.werr != nil {
		return
	}
	c.writing = true
	c.wg.Add(1)
	go c.writeLoop()
}

func (c *conn) writeLoop() {
	defer c.wg.Done()
	c.mu.Lock()
	c.writeOutLocked()
	c.mu.Unlock()
}

// flushLocked writes queued output on the calling goroutine, unless
// another goroutine is writing it. It unlocks mu while writing.
func (c *conn) flushLocked() {
	if c.writing || c.out == nil || len(c.out.b) == 0 || c.werr != nil {
		return
	}
	c.writing = true
	c.writeOutLocked()
}

// writeOutLocked writes until nothing is queued; c.writing is set.
func (c *conn) writeOutLocked() {
	for c.out != nil && len(c.out.b) > 0 && c.werr == nil {
		buf := c.out
		c.out = nil
		timeout := c.cfg.WriteTimeout
		if c.closing {
			timeout = lingerTime
		}
		c.mu.Unlock()
		c.armWrite(timeout)
		n, err := c.nc.Write(buf.b)
		c.mu.Lock()
		c.landedLocked(int64(n), err != nil)
		buf.b = buf.b[:0]
		if c.out == nil {
			c.out = buf
		} else {
			outPool.Put(buf)
		}
		if err != nil && c.werr == nil {
			c.werr = err
			c.nc.Close() // the reader stops too
		}
		c.wakeBlockedLocked()
		c.wcond.Broadcast() // streams waiting for their DATA to be written
	}
	c.writing = false
	c.releaseOutLocked()
	c.wcond.Broadcast()
	c.wakeBlockedLocked()
}

// armWrite arms the client's write deadline timeout from now, unless the
// one armed falls no later and within http1.DeadlineSlack(timeout) of
// it, as the HTTP/1.1 proxy does: a busy connection re-arms its timer a
// few times a second, not for each write. It is called by the writer
// (c.writing set) with mu not held.
func (c *conn) armWrite(timeout time.Duration) {
	want := gate.Deadline(time.Now(), timeout)
	if keepDeadline(c.wdl, want, timeout) {
		return
	}
	c.nc.SetWriteDeadline(want)
	c.wdl = want
}

// keepDeadline reports whether the deadline armed (zero: none) may stand
// for want (zero: none): it falls no later, and within
// http1.DeadlineSlack(timeout) of it.
func keepDeadline(armed, want time.Time, timeout time.Duration) bool {
	if want.IsZero() || armed.IsZero() {
		return want.IsZero() && armed.IsZero()
	}
	return !armed.After(want) && !armed.Before(want.Add(-http1.DeadlineSlack(timeout)))
}

// flight is a relayed DATA frame queued in out: its stream, where in the
// connection's output it ends (conn.queued after it) and its payload.
type flight struct {
	s   *stream
	end int64
	n   int64
}

// landedLocked accounts for n more bytes of output written to the client:
// each relayed DATA frame now wholly written counts in its stream's bytes
// down. After a failed write (failed set) the frames not written never
// will be, and are forgotten.
func (c *conn) landedLocked(n int64, failed bool) {
	c.sent += n
	i := 0
	for ; i < len(c.flights) && c.flights[i].end <= c.sent; i++ {
		c.flights[i].s.downBytes += c.flights[i].n
	}
	if failed {
		i = len(c.flights)
	}
	k := copy(c.flights, c.flights[i:])
	clear(c.flights[k:])
	c.flights = c.flights[:k]
	if k == 0 && cap(c.flights) > 256 {
		c.flights = nil // a burst of small frames: hold no large array while idle
	}
}

// releaseOutLocked gives back an empty output buffer, so that an idle
// connection holds none.
func (c *conn) releaseOutLocked() {
	if c.out != nil && (len(c.out.b) == 0 || c.werr != nil) && !c.writing {
		c.out.b = c.out.b[:0]
		if cap(c.out.b) <= 1<<20 {
			outPool.Put(c.out)
		}
		c.out = nil
	}
}

func putUint32(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v>>24), byte(v>>16), byte(v>>8), byte(v)
}

// reader buffers the client connection for the framer. It reads whole
// TLS records (a buffer of bufSize takes any record's plaintext), so
// that nothing stays inside crypto/tls when it is empty, and it borrows
// its buffer only while it holds bytes.
//
// Once track is set (after the connection preface) it follows the frame
// boundaries in the bytes it hands out (to the framer and to
// blockDecoder, which reads a header block's CONTINUATION frames by
// itself): it bounds each read within a frame, and the frames and the
// time a header block may take.
type reader struct {
	nc   net.Conn
	buf  *[bufSize]byte
	r, w int
	err  error // a read error held back until the buffered bytes are read

	track bool // frame boundaries are followed
	hn    int  // bytes of the next frame header handed out, 0 to 8
	hlen  int  // that header's length field, as far as handed out
	left  int  // payload bytes of the current frame not yet handed out
	// frames counts the frame headers handed out since startBlock; a
	// header block may have at most limit of them (its CONTINUATION
	// frames) when limit is positive.
	frames, limit int
	// until is the header block's deadline; zero when none.
	until time.Time
	// timeout bounds each read from nc within a frame once bounded is
	// set (after the first SETTINGS frame); 0 = no limit. With always
	// set, a read at a frame boundary is bounded too: the connection
	// waits for readiness before it, so the read itself should not
	// wait.
	timeout         time.Duration
	bounded, always bool
	// deadline is the read deadline last set on nc (by arm or
	// conn.wait); zero: none.
	deadline time.Time
}

// errContinuations is a header block in more CONTINUATION frames than a
// header list of the size allowed needs (CVE-2023-45288).
var errContinuations = errors.New("h2: header block in too many CONTINUATION frames")

// maxSettings bounds the entries of one SETTINGS frame: a peer has
// reason to send each setting it knows once (a few more, repeated, are
// applied in order, RFC 9113 §6.5.3), and a frame of thousands costs
// their parsing on every frame of a flood. It is the bound of Go's own
// HTTP/2 server, which also refuses any duplicate; rustle accepts
// duplicates, applying the last of each.
const maxSettings = 100

// errSettingsFlood is a SETTINGS frame of more than maxSettings entries.
var errSettingsFlood = fmt.Errorf("h2: a SETTINGS frame of more than %d entries", maxSettings)

func (r *reader) Read(p []byte) (int, error) {
	if len(p) >= bufSize && r.r == r.w && r.err == nil && !r.overLimit() {
		// Big enough for what a read brings: straight into p.
		r.arm()
		n, err := r.nc.Read(p)
		r.advance(p[:n])
		return n, err
	}
	b, err := r.next(len(p))
	return copy(p, b), err
}

// overLimit reports whether a header block has used up its
// CONTINUATION frames and reached the end of the last one.
func (r *reader) overLimit() bool {
	return r.limit > 0 && r.frames >= r.limit && r.hn == 0 && r.left == 0
}

// next hands out up to n of the next bytes without a copy, as Read
// would: they are valid until the next read. It is blockDecoder's
// payloadReader.
func (r *reader) next(n int) ([]byte, error) {
	if r.overLimit() {
		return nil, errContinuations
	}
	if r.r == r.w {
		if r.err != nil {
			return nil, r.err
		}
		if err := r.fill(); err != nil {
			return nil, err
		}
	}
	b := r.buf[r.r:min(r.w, r.r+n)]
	r.r += len(b)
	r.advance(b)
	return b, nil
}

// fill reads from nc into the empty buffer. An error that came with
// bytes is held back until they are read.
func (r *reader) fill() error {
	r.arm()
	if r.buf == nil {
		r.buf = bufPool.Get().(*[bufSize]byte)
	}
	n, err := r.nc.Read(r.buf[:])
	r.r, r.w, r.err = 0, n, err
	if n == 0 {
		if err == nil {
			err = io.ErrNoProgress
		}
		r.err = nil
		return err
	}
	return nil
}

// advance follows the frames through b, the bytes handed out next.
func (r *reader) advance(b []byte) {
	if !r.track {
		return
	}
	for len(b) > 0 {
		if r.left > 0 {
			k := min(r.left, len(b))
			r.left -= k
			b = b[k:]
			continue
		}
		if r.hn < 3 {
			r.hlen = r.hlen<<8 | int(b[0])
		}
		r.hn++
		b = b[1:]
		if r.hn == 9 {
			r.left, r.hn, r.hlen = r.hlen, 0, 0
			r.frames++
		}
	}
}

// arm sets the read deadline for a read from nc: one within a frame
// waits at most timeout, and no longer than the header block's deadline.
func (r *reader) arm() {
	if !r.bounded || !r.always && r.hn == 0 && r.left == 0 && r.until.IsZero() {
		return
	}
	d := gate.Deadline(time.Now(), r.timeout)
	if !r.until.IsZero() && (d.IsZero() || r.until.Before(d)) {
		d = r.until
	}
	// A deadline armed already is kept when it falls no later and
	// within http1.DeadlineSlack of d, as the client's write deadline
	// is (conn.armWrite).
	if keepDeadline(r.deadline, d, r.timeout) {
		return
	}
	r.nc.SetReadDeadline(d)
	r.deadline = d
}

// startBlock starts a header block, whose HEADERS frame header was just
// read: until is its deadline (zero: none), and it may have up to limit
// CONTINUATION frames.
func (r *reader) startBlock(until time.Time, limit int) {
	r.until, r.frames, r.limit = until, 0, limit
}

// endBlock ends the header block's bounds.
func (r *reader) endBlock() {
	r.until, r.limit = time.Time{}, 0
}

// empty reports whether no byte is buffered.
func (r *reader) empty() bool { return r.r == r.w && r.err == nil }

// release gives the buffer back when it is empty.
func (r *reader) release() {
	if r.r == r.w && r.buf != nil {
		bufPool.Put(r.buf)
		r.buf = nil
		r.r, r.w = 0, 0
	}
}

// discard drops what is buffered, at the end of the connection.
func (r *reader) discard() {
	r.r = r.w
	r.release()
}
