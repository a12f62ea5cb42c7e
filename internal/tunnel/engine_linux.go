package tunnel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// defaultPipeSize is the largest an unprivileged process may ask
	// (fs.pipe-max-size): bulk tunnels move about 10% more per CPU second
	// with 1 MiB pipes than with 256 KiB ones. A pipe is borrowed only
	// while bytes are in flight, so idle tunnels hold none.
	defaultPipeSize = 1 << 20
	// defaultMaxIdlePipes keeps the idle pool's pipe capacity at 16 MiB
	// per engine, a quarter of the pages a user's pipes may hold before
	// the kernel shrinks new ones (fs.pipe-user-pages-soft, 64 MiB).
	defaultMaxIdlePipes = 16

	// maxSweepEvery bounds the period of the idle sweep; shorter idle
	// timeouts are swept more often (an eighth of the timeout, at least
	// every minSweepEvery).
	maxSweepEvery = time.Second
	minSweepEvery = 5 * time.Millisecond

	// eventBatch is how many epoll events one epoll_wait returns at most.
	eventBatch = 256

	// epollFlags is the one registration of every tunnel socket.
	epollFlags = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET
)

// Engine relays tunnels on one epoll loop. Its methods may be called from
// any goroutine.
type Engine struct {
	log         *slog.Logger
	idleTimeout time.Duration
	sweepEvery  time.Duration
	pipeSize    int
	maxIdle     int
	epfd        int
	evfd        int
	// epFile wraps epfd so that the loop can park in Go's netpoller until
	// epfd is readable (has events) instead of blocking a thread in
	// epoll_wait; epRaw is its RawConn, nil when the poller refused it
	// and the loop blocks in epoll_wait instead. Owned by the loop.
	epFile    *os.File
	epRaw     syscall.RawConn
	waitFn    func(fd uintptr) bool // e.tryWait, bound once
	waitN     int                   // tryWait's result; owned by the loop
	waitErr   error                 // tryWait's error; owned by the loop
	waitTries int                   // tryWait's calls in this wait; owned by the loop
	quiet     bool                  // the last look for events found none: wait parks without one; owned by the loop
	deadline  time.Time             // read deadline armed on epFile when armed is set; zero = none
	armed     bool                  // deadline is what epFile has armed (false: unknown, or passed)
	start     time.Time             // monotonic origin of the engine clock
	fakeClock func() time.Duration  // tests only: replaces the engine clock

	open atomic.Int64 // tunnels added and not yet finished
	// maxPipes is Config.MaxPipes, changed by SetMaxPipes; read by the
	// loop when it would make a pipe.
	maxPipes atomic.Int64
	// pipes counts the splice pipes open, pooled ones included, and
	// memPipes the directions relaying through memory now. Written by the
	// loop only (atomic so that Pipes may read them).
	pipes    atomic.Int64
	memPipes atomic.Int64
	// polls counts the event polls (epoll_pwait) the loop has made, for
	// tests of what a relayed message costs.
	polls  atomic.Int64
	exited chan struct{} // closed when the loop goroutine has returned

	mu      sync.Mutex
	closed  bool      // guarded by mu
	pending []*tunnel // guarded by mu; added but not yet registered
	cuts    []*tunnel // guarded by mu; tunnels to end (AddCut), registered or pending
	wakeBuf [8]byte   // guarded by mu; the eventfd increment

	// Owned by the loop goroutine.
	now        time.Duration // engine clock, refreshed after each epoll_wait
	nextSweep  time.Duration
	gen        uint32    // registration counter, tags epoll events
	byFD       []*tunnel // index: file descriptor
	all        []*tunnel // every registered tunnel; tunnel.idx is its index
	again      []*tunnel // tunnels that yielded with work left
	againSpare []*tunnel // reused backing array for again
	spare      []*tunnel // reused backing array for pending
	pool       []*pipe   // empty pipes for reuse
	small      []byte    // smallSize bytes: copySmall's buffer, empty between calls
	pipeWarn   bool      // whether a refused F_SETPIPE_SZ was logged
	memWarn    bool      // whether a pipe in memory was logged
	capWarn    bool      // whether reaching maxPipes was logged
	// noPipeUntil: pipe2 failed with EMFILE or ENFILE, and no pipe is
	// made before this engine clock reading or a tunnel's end.
	noPipeUntil time.Duration
	memPool     []*pipe // empty pipes in memory for reuse
	// pipe2 makes a pipe: unix.Pipe2, or a test's failure.
	pipe2  func(p []int, flags int) error
	events []unix.EpollEvent
}

// New creates an Engine and starts its loop goroutine. Call [Engine.Close]
// to stop it.
func New(cfg Config) (*Engine, error) {
	return newWithClock(cfg, nil)
}

// newWithClock is New with the engine clock replaced by clock, if not nil.
func newWithClock(cfg Config, clock func() time.Duration) (*Engine, error) {
	if cfg.IdleTimeout < 0 {
		return nil, fmt.Errorf("tunnel: negative idle timeout %v", cfg.IdleTimeout)
	}
	if cfg.PipeSize < 0 {
		return nil, fmt.Errorf("tunnel: negative pipe size %d", cfg.PipeSize)
	}
	if cfg.MaxPipes < 0 {
		return nil, fmt.Errorf("tunnel: negative pipe bound %d", cfg.MaxPipes)
	}
	e := &Engine{
		log:         cfg.Logger,
		idleTimeout: cfg.IdleTimeout,
		pipeSize:    cfg.PipeSize,
		maxIdle:     cfg.MaxIdlePipes,
		pipe2:       unix.Pipe2,
		exited:      make(chan struct{}),
		start:       time.Now(),
		fakeClock:   clock,
		events:      make([]unix.EpollEvent, eventBatch),
		small:       make([]byte, smallSize),
	}
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.pipeSize == 0 {
		e.pipeSize = defaultPipeSize
	}
	if e.maxIdle == 0 {
		e.maxIdle = defaultMaxIdlePipes
	} else if e.maxIdle < 0 {
		e.maxIdle = 0
	}
	if e.idleTimeout > 0 {
		e.sweepEvery = min(max(e.idleTimeout/8, minSweepEvery), maxSweepEvery)
		e.nextSweep = e.sweepEvery
	}
	e.maxPipes.Store(int64(cfg.MaxPipes))
	binary.NativeEndian.PutUint64(e.wakeBuf[:], 1)

	var err error
	e.epfd, err = unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("tunnel: epoll_create1: %w", err)
	}
	e.evfd, err = unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		unix.Close(e.epfd)
		return nil, fmt.Errorf("tunnel: eventfd: %w", err)
	}
	// The eventfd is level-triggered: it stays ready until the loop reads it.
	ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(e.evfd), Pad: -1}
	if err := unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, e.evfd, &ev); err != nil {
		unix.Close(e.evfd)
		unix.Close(e.epfd)
		return nil, fmt.Errorf("tunnel: register eventfd: %w", err)
	}
	// An epoll descriptor is itself pollable: readable while it has
	// events. Non-blocking, os.NewFile registers it with Go's netpoller.
	if err := unix.SetNonblock(e.epfd, true); err == nil {
		e.epFile = os.NewFile(uintptr(e.epfd), "tunnel-epoll")
		if rc, err := e.epFile.SyscallConn(); err == nil {
			e.epRaw = rc
		}
		e.waitFn = e.tryWait
	}
	go e.loop()
	return e, nil
}

// Add hands two connected TCP sockets to the engine, which takes ownership
// of both: their descriptors are duplicated out of Go's netpoller and the
// *net.TCPConn values are closed, so the caller must not use them again
// (bytes the caller has already read and buffered are its own to forward
// before calling Add). The engine relays client to upstream and upstream to
// client until both directions have ended or one side fails.
//
// done, if not nil, is called exactly once with the tunnel's [Result] when
// it ends, from the engine's goroutine; it must not block, and it must not
// call [Engine.Close]. If Add returns an error, both conns have been closed
// and done is never called.
func (e *Engine) Add(client, upstream *net.TCPConn, done func(Result)) error {
	_, err := e.add(client, upstream, nil, owner(done))
	return err
}

// AddCut is Add, and also returns a function that ends the tunnel before
// its time: its done callback then gets [ErrCut]. Calling it after the
// tunnel has ended, or more than once, does nothing. It does not block.
func (e *Engine) AddCut(client, upstream *net.TCPConn, done func(Result)) (cut func(), err error) {
	return e.AddMetered(client, upstream, nil, done)
}

// AddMetered is AddCut with a meter (nil = none) told of the bytes each
// direction delivers as they are, after each splice into the destination
// (at most the pipe's size, 1 MiB by default), which may stop the tunnel
// (its done callback then gets [ErrStopped]).
func (e *Engine) AddMetered(client, upstream *net.TCPConn, m Meter, done func(Result)) (cut func(), err error) {
	h, err := e.AddOwned(client, upstream, m, owner(done))
	if err != nil {
		return nil, err
	}
	return h.Cut, nil
}

// AddOwned is AddMetered for a caller that keeps an object of its own per
// tunnel: o (nil = none) is told of the tunnel's end, and the Handle's Cut
// is the cut function. It makes one allocation per tunnel, the engine's
// own state, where AddMetered makes two more (done's and cut's).
func (e *Engine) AddOwned(client, upstream *net.TCPConn, m Meter, o Owner) (Handle, error) {
	t, err := e.add(client, upstream, m, o)
	if err != nil {
		return Handle{}, err
	}
	return Handle{e, t}, nil
}

// Handle is a tunnel on the engine, as [Engine.AddOwned] and
// [Engine.AddTLSOwned] return it. The zero Handle is none.
type Handle struct {
	e *Engine
	t *tunnel
}

// Cut ends the tunnel before its time: its owner then gets [ErrCut].
// Calling it after the tunnel has ended, or more than once, or on the
// zero Handle, does nothing. It does not block.
func (h Handle) Cut() {
	e, t := h.e, h.t
	if e == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || t.cutAsked {
		return
	}
	t.cutAsked = true
	e.cuts = append(e.cuts, t)
	e.wakeLocked()
}

func (e *Engine) add(client, upstream *net.TCPConn, m Meter, o Owner) (*tunnel, error) {
	cfd, cerr := takeFD(client)
	ufd, uerr := takeFD(upstream)
	if err := errors.Join(cerr, uerr); err != nil {
		closeFD(cfd)
		closeFD(ufd)
		return nil, err
	}
	t := &tunnel{
		fd:      [2]int32{int32(cfd), int32(ufd)},
		owner:   o,
		meter:   m,
		idx:     -1,
		started: e.clock(),
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		closeFD(cfd)
		closeFD(ufd)
		return nil, ErrClosed
	}
	e.pending = append(e.pending, t)
	e.open.Add(1)
	if len(e.pending) == 1 {
		e.wakeLocked()
	}
	return t, nil
}

// Len returns the number of tunnels open now: added and not yet finished.
func (e *Engine) Len() int {
	return int(e.open.Load())
}

// SetMaxPipes changes [Config.MaxPipes] to n (0: no bound, as a negative
// n). Pipes open past a lowered bound are closed as they empty: the
// engine makes no new one until it holds fewer than n.
func (e *Engine) SetMaxPipes(n int) {
	e.maxPipes.Store(int64(max(n, 0)))
}

// MaxPipes returns the engine's bound on splice pipes; 0 means none.
func (e *Engine) MaxPipes() int {
	return int(e.maxPipes.Load())
}

// Pipes returns the splice pipes the engine holds now, idle pooled ones
// included, and the tunnel directions relaying through memory now.
func (e *Engine) Pipes() (splice, inMemory int) {
	return int(e.pipes.Load()), int(e.memPipes.Load())
}

// Close ends every open tunnel (their done callbacks get [ErrClosed]),
// closes the engine's pipes and descriptors, stops the loop goroutine and
// waits for it. It is idempotent and always returns nil.
func (e *Engine) Close() error {
	e.mu.Lock()
	if !e.closed {
		e.closed = true
		e.wakeLocked()
	}
	e.mu.Unlock()
	<-e.exited
	return nil
}

// wakeLocked makes the loop's epoll_wait return. e.mu must be held, which
// also keeps the loop from closing the eventfd underneath.
func (e *Engine) wakeLocked() {
	for {
		_, err := unix.Write(e.evfd, e.wakeBuf[:])
		// EAGAIN means the counter is at its maximum: the loop is
		// going to wake anyway.
		if err != unix.EINTR {
			return
		}
	}
}

// clock returns the engine clock: the monotonic time since New.
func (e *Engine) clock() time.Duration {
	if e.fakeClock != nil {
		return e.fakeClock()
	}
	return time.Since(e.start)
}

// takeFD duplicates c's descriptor as a non-blocking close-on-exec
// descriptor owned by the caller, then closes c.
func takeFD(c *net.TCPConn) (int, error) {
	if c == nil {
		return -1, errors.New("tunnel: nil connection")
	}
	defer c.Close()
	return dupFD(c)
}

// dupFD duplicates c's descriptor as a non-blocking close-on-exec
// descriptor owned by the caller; c stays open.
func dupFD(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("tunnel: take socket %s: %w", c.RemoteAddr(), err)
	}
	nfd := -1
	var dupErr error
	err = rc.Control(func(fd uintptr) {
		nfd, dupErr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
	})
	if err == nil {
		err = dupErr
	}
	if err != nil {
		return -1, fmt.Errorf("tunnel: duplicate socket %s: %w", c.RemoteAddr(), err)
	}
	if err := unix.SetNonblock(nfd, true); err != nil {
		unix.Close(nfd)
		return -1, fmt.Errorf("tunnel: set socket %s non-blocking: %w", c.RemoteAddr(), err)
	}
	return nfd, nil
}

func closeFD(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// loop is the engine's goroutine: it waits for socket events, relays bytes,
// registers added tunnels and sweeps idle ones until Close.
func (e *Engine) loop() {
	defer close(e.exited)
	for {
		timeout := -1
		if len(e.again) > 0 {
			timeout = 0
		} else if e.idleTimeout > 0 && len(e.all) > 0 {
			// Only tunnels need sweeping: an engine without any sleeps
			// until one comes.
			wait := e.nextSweep - e.clock()
			// Round up so that the sweep is not missed by a millisecond.
			timeout = max(int((wait+time.Millisecond-1)/time.Millisecond), 0)
		}
		n, err := e.wait(timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			err = fmt.Errorf("tunnel: epoll_wait: %w", err)
			e.log.Error("tunnel engine stopped", "err", err)
			e.shutdown(err)
			return
		}
		e.now = e.clock()
		woken := false
		for i := range n {
			ev := &e.events[i]
			if ev.Pad == -1 {
				woken = true
				continue
			}
			fd := int(ev.Fd)
			if fd >= len(e.byFD) {
				continue
			}
			t := e.byFD[fd]
			if t == nil || t.gen != uint32(ev.Pad) {
				continue // stale event of a finished tunnel
			}
			side := 0
			if t.fd[1] == ev.Fd {
				side = 1
			}
			e.handle(t, side, ev.Events)
		}
		if len(e.again) > 0 {
			e.resume()
		}
		if woken {
			var buf [8]byte
			unix.Read(e.evfd, buf[:])
			if !e.register() {
				e.shutdown(ErrClosed)
				return
			}
		}
		if e.idleTimeout > 0 && e.now >= e.nextSweep {
			e.sweep()
			e.nextSweep = e.now + e.sweepEvery
		}
	}
}

// register takes the pending tunnels and adds their sockets to the epoll
// set. It reports false when the engine has been closed.
func (e *Engine) register() bool {
	e.mu.Lock()
	batch := e.pending
	e.pending = e.spare[:0]
	cuts := e.cuts
	e.cuts = nil
	closed := e.closed
	e.mu.Unlock()
	if closed {
		e.spare = batch
		for _, t := range batch {
			e.finish(t, ErrClosed)
		}
		return false
	}
	for i, t := range batch {
		batch[i] = nil
		e.gen++
		if e.gen == 1<<32-1 { // Pad -1 is the eventfd
			e.gen = 0
		}
		t.gen = e.gen
		t.last = e.now
		// A connected socket has room to send: assume so until a
		// write says otherwise, rather than wait for its first
		// EPOLLOUT, so that the first bytes read can be written at
		// once (copySmall) even when their EPOLLIN comes first.
		t.ready[0] |= canWrite
		t.ready[1] |= canWrite
		t.idx = int32(len(e.all))
		e.all = append(e.all, t)
		for _, fd := range t.fd {
			if int(fd) >= len(e.byFD) {
				e.byFD = append(e.byFD, make([]*tunnel, int(fd)+1-len(e.byFD))...)
			}
			e.byFD[fd] = t
		}
		for s, fd := range t.fd {
			ev := unix.EpollEvent{Events: epollFlags, Fd: fd, Pad: int32(t.gen)}
			if err := unix.EpollCtl(e.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev); err != nil {
				e.finish(t, fmt.Errorf("tunnel: register %s socket: %w", sideName[s], err))
				break
			}
		}
		if t.tls != nil && !t.dead {
			// Records read ahead, or plaintext inside crypto/tls,
			// bring no event: read the client once anyway.
			t.ready[0] |= canRead
			t.queued = true
			e.again = append(e.again, t)
		}
	}
	e.spare = batch[:0]
	// Cut after registering: a tunnel cut while pending is in the batch.
	for _, t := range cuts {
		e.finish(t, ErrCut)
	}
	return true
}

// sweep finishes the tunnels that have been idle for the idle timeout.
func (e *Engine) sweep() {
	// Backwards, because finish moves the last tunnel into the hole.
	for i := len(e.all) - 1; i >= 0; i-- {
		if i >= len(e.all) {
			continue
		}
		if t := e.all[i]; e.now-t.last >= e.idleTimeout {
			e.finish(t, ErrIdleTimeout)
		}
	}
}

// shutdown finishes every tunnel with err, closes the pooled pipes and the
// engine's descriptors. It runs on the loop goroutine as it exits.
func (e *Engine) shutdown(err error) {
	e.mu.Lock()
	e.closed = true
	batch := e.pending
	e.pending = nil
	e.mu.Unlock()
	for _, t := range batch {
		e.finish(t, err)
	}
	for len(e.all) > 0 {
		e.finish(e.all[len(e.all)-1], err)
	}
	for _, p := range e.pool {
		e.closePipe(p)
	}
	e.pool = nil
	e.again = nil
	// No Add writes to the eventfd any more: e.closed was set under e.mu.
	unix.Close(e.evfd)
	if e.epFile != nil {
		e.epFile.Close() // epfd with it
	} else {
		unix.Close(e.epfd)
	}
}

// wait returns the events ready on epfd, waiting up to timeout
// milliseconds for one (-1: no limit), as epoll_wait does. Events already
// ready are taken at once; otherwise the loop goroutine parks in Go's
// netpoller until epfd is readable or the timeout passes. Blocking in
// epoll_wait instead would hold a thread in a system call that the
// runtime's monitor keeps stealing the processor from, at a cost of
// thread hand-offs and wake-ups on every idle moment of the engine.
func (e *Engine) wait(timeout int) (int, error) {
	// RawConn.Read below also takes ready events first (tryWait), and
	// must, for it forgets the poller's earlier readiness before its
	// first call, so a look here before it is a second epoll_pwait
	// before each park. A busy loop takes that look, which skips the
	// deadline and RawConn bookkeeping (going straight to Read was
	// measured worse: WebSocket 64 B, 8 alternating runs, 23.0 against
	// 21.8 us/msg); a quiet one, whose last look found nothing, goes
	// straight to the park (three polls per message relayed from a
	// parked loop down to two).
	if !e.quiet || timeout == 0 || e.epRaw == nil {
		e.polls.Add(1)
		n, err := pollEvents(e.epfd, e.events)
		if n != 0 || err != nil || timeout == 0 {
			e.quiet = false
			return n, err
		}
	}
	if e.epRaw == nil {
		return unix.EpollWait(e.epfd, e.events, timeout)
	}
	var dl time.Time
	if timeout > 0 {
		dl = time.Now().Add(time.Duration(timeout) * time.Millisecond)
	}
	// A deadline armed a little earlier than wanted is kept: the loop
	// wakes early, finds nothing due and waits again.
	if !e.armed || dl.IsZero() != e.deadline.IsZero() || dl.Before(e.deadline) || dl.Sub(e.deadline) > 10*time.Millisecond {
		e.epFile.SetReadDeadline(dl)
		e.deadline, e.armed = dl, true
	}
	e.waitN, e.waitErr, e.waitTries = 0, nil, 0
	err := e.epRaw.Read(e.waitFn)
	// Events at the first look: busy again, take the shortcut next time.
	e.quiet = e.waitTries > 1 || e.waitN == 0
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			e.armed = false // passed: arm the next one whatever it is
			return 0, nil
		}
		// Not pollable after all: block in epoll_wait from now on.
		e.log.Debug("tunnel: waiting in epoll_wait", "err", err)
		e.epRaw = nil
		return unix.EpollWait(e.epfd, e.events, timeout)
	}
	return e.waitN, e.waitErr
}

// tryWait is the RawConn.Read callback of wait: it takes the events ready
// without waiting and asks to park when there are none.
func (e *Engine) tryWait(fd uintptr) bool {
	e.waitTries++
	e.polls.Add(1)
	n, err := pollEvents(int(fd), e.events)
	e.waitN, e.waitErr = n, err
	return n != 0 || err != nil
}
