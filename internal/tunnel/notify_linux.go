package tunnel

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Notice is one wait of [Parker.Notify]: its function is called once, on
// a goroutine of its own. Its state is w, a [Wait] whose owner is
// noticeOwner.
type Notice struct {
	w  Wait
	p  *Parker // whose socket (p.rc) it waits on
	id uint64  // its epoll data; 0 when not registered
	// evented is set by the loop before it fires the wait for its
	// event: the one-shot registration is then disabled already, and
	// Leave leaves it in the set for the next wait to re-enable.
	evented atomic.Bool
	// outer, for a Parker of a connection over another TLS connection
	// (RecordConnTLS), is that connection's recordConn: the socket being
	// readable may bring records of the outer connection that hold no
	// plaintext (a KeyUpdate, an empty application-data record), so
	// fn is called only once a look (Wait.settle) found bytes for the
	// reader; otherwise the wait goes on. nil for any other Parker.
	outer *recordConn
	// look, for a wait of NotifyLook, is the reader's look at what the
	// socket brought, called as outer's settleOuter is (and in its
	// stead: the reader's look reads through the outer connection);
	// nil for one of Notify.
	look func() bool
}

// noticeOwner is a Notice as its Wait's [WaitOwner]: a Wait that looks
// (a connection over another TLS connection, or NotifyLook's) looks
// with look or settleOuter, and re-registers its socket in the epoll
// set.
type noticeOwner struct{ n *Notice }

// Look is the reader's look, or else outer's settleOuter.
func (o noticeOwner) Look() bool {
	if o.n.look != nil {
		return o.n.look()
	}
	return o.n.outer.settleOuter()
}

// Leave takes the socket out of the epoll set (while it is open:
// Control holds it), unless the wait's event has disabled it (see add),
// so that it can be registered again.
func (o noticeOwner) Leave() {
	if o.n.id != 0 {
		notices.remove(o.n)
	}
}

// Rearm registers the socket again: the wait goes on.
func (o noticeOwner) Rearm() (bool, error) { return false, notices.add(o.n) }

// Lock does nothing: a Notice's Wait takes no lock before its own.
func (noticeOwner) Lock() {}

// Unlock does nothing, as Lock.
func (noticeOwner) Unlock() {}

// notifier is the process's one epoll loop for [Parker.Notify]: a
// goroutine that runs while a wait is registered, parked in Go's
// netpoller on the epoll descriptor.
type notifier struct {
	mu      sync.Mutex
	epfd    int      // -1 until first used
	epFile  *os.File // epfd, for the sweep's deadline
	epRaw   syscall.RawConn
	waits   map[uint64]*Notice // registered and not yet fired; guarded by mu
	next    uint64             // the last id given; guarded by mu
	running bool               // the loop goroutine runs; guarded by mu
	added   bool               // a wait was registered since the last sweep; guarded by mu
	ctls    uint64             // epoll_ctl calls made (what the tests count); guarded by mu
	err     error              // why the loop could not be set up; guarded by mu
}

var notices = notifier{epfd: -1}

// notifyFlags: one event, readable or the stream's end or an error.
const notifyFlags = unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT

// Notify arranges for fn to be called, on a goroutine of its own, once
// the socket has bytes to read or its stream has ended (nil), or with
// os.ErrDeadlineExceeded once deadline has passed (zero: never), or with
// [ErrWoken] after [Notice.Wake], or with the error that kept the wait
// from being set up; whichever comes first, and only once. Unlike
// [Parker.Wait] no goroutine waits meanwhile: on Linux one epoll loop
// waits for every Notice of the process. The socket's own read deadline
// does not end the wait; closing the socket ends it with net.ErrClosed
// only at the loop's next look for closed sockets, within about a
// second (its epoll registration goes with the socket, so no event
// comes): whoever closes a socket a Notice waits on should Wake it
// first. On the Parker of a connection over another TLS connection
// ([RecordConnTLS]) the socket being readable calls fn only once what
// it brought makes bytes for the reader: records of the outer
// connection with no plaintext in them (a KeyUpdate, an empty record)
// are taken on a goroutine that then ends, and the wait goes on. It
// reports false, calling nothing, on platforms without such a loop: the
// caller waits with [Parker.Wait] instead.
func (p *Parker) Notify(deadline time.Time, fn func(error)) (*Notice, bool) {
	return p.notify(deadline, nil, fn)
}

// NotifyLook is Notify for a reader that may find no bytes of its own in
// what the socket brings (a TLS connection's, whose records may hold no
// plaintext: see [Parker.ReadNow]): once the socket is readable look is
// called, on a goroutine of its own (a worker reused from wait to wait,
// of any socket, whose stack has grown already: see Wait.ReuseWorker),
// and fn (on that goroutine, with nil) only if it reports true, the
// reader having found what to read on; when it reports false the
// socket is registered again and the wait goes on, its deadline too,
// with no goroutine. A deadline, Wake or
// failure that comes while look runs is what fn gets once it returns.
// look is called on one goroutine at a time, never once fn has been.
func (p *Parker) NotifyLook(deadline time.Time, look func() bool, fn func(error)) (*Notice, bool) {
	return p.notify(deadline, look, fn)
}

// notify is Notify, and NotifyLook with look.
func (p *Parker) notify(deadline time.Time, look func() bool, fn func(error)) (*Notice, bool) {
	n := &Notice{p: p, look: look}
	held := p.ahead != nil && p.ahead.held()
	if !held && p.ahead != nil && p.ahead.outer != nil {
		n.outer = p.ahead
	}
	n.w.Init(noticeOwner{n}, n.outer != nil || look != nil, fn)
	if look != nil {
		n.w.ReuseWorker() // the reader serves on after its look
	}
	if held {
		n.w.Fire(nil)
		return n, true
	}
	if err := notices.add(n); err != nil {
		n.w.Fire(err)
		return n, true
	}
	n.w.SetDeadline(deadline)
	return n, true
}

// Ready reports, without waiting, whether the socket has bytes to read,
// or its stream has ended (or a TLS connection's Parker holds bytes read
// ahead), so that the caller may read on rather than wait; err is the
// socket's error, which the peek has taken (the kernel reports it once:
// the next read would see a plain end of stream), ready set with it.
func (p *Parker) Ready() (ready bool, err error) {
	if p.ahead != nil && p.ahead.held() {
		return true, nil
	}
	if p.peekFn == nil {
		p.peekFn = p.peek
	}
	p.err, p.peeked = nil, false
	if err := p.rc.Control(p.peekFn); err != nil {
		return true, err
	}
	if p.err != nil {
		return true, os.NewSyscallError("recvfrom", p.err)
	}
	return p.peeked, nil
}

// peek is Ready's RawConn.Control callback.
func (p *Parker) peek(fd uintptr) { p.peeked = p.ready(fd) }

// Wake ends the wait if fn has not been called yet: fn gets [ErrWoken].
// It does not block, and may be called more than once.
func (n *Notice) Wake() { n.w.Wake() }

// add registers n's socket in the epoll set, starting the loop when it
// is not running. A socket whose last wait ended with its event stays in
// the set, disabled (one-shot), and is enabled again (EPOLL_CTL_MOD): a
// connection parked again and again makes one epoll_ctl per wait, not
// two (an add, then a delete as its event fires). Parker.inSet says
// which; the other is tried when the kernel says it was wrong (another
// Parker of the socket, a socket closed and its number reused).
func (l *notifier) add(n *Notice) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.epfd < 0 && l.err == nil {
		l.err = l.setup()
	}
	if l.err != nil {
		return l.err
	}
	l.next++
	id := l.next
	ev := unix.EpollEvent{Events: notifyFlags, Fd: int32(id), Pad: int32(id >> 32)}
	var addErr error
	err := n.p.rc.Control(func(fd uintptr) {
		op := unix.EPOLL_CTL_ADD
		if n.p.inSet {
			op = unix.EPOLL_CTL_MOD
		}
		addErr = unix.EpollCtl(l.epfd, op, int(fd), &ev)
		l.ctls++
		switch {
		case op == unix.EPOLL_CTL_MOD && addErr == unix.ENOENT:
			addErr = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, int(fd), &ev)
			l.ctls++
		case op == unix.EPOLL_CTL_ADD && addErr == unix.EEXIST:
			addErr = unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, int(fd), &ev)
			l.ctls++
		}
	})
	if err == nil && addErr != nil {
		err = os.NewSyscallError("epoll_ctl", addErr)
	}
	if err != nil {
		return fmt.Errorf("tunnel: wait for readiness: %w", err)
	}
	n.id = id
	n.p.inSet = true
	n.evented.Store(false)
	if l.waits == nil {
		l.waits = make(map[uint64]*Notice)
	}
	l.waits[id] = n
	l.added = true
	if !l.running {
		l.running = true
		go l.loop()
	}
	return nil
}

// remove takes n's socket out of the epoll set, unless it is closed
// (then it has left it) or n's event has fired (then it stays, disabled:
// see add), and forgets n; the loop ends at a sweep that finds no wait
// (see loop).
func (l *notifier) remove(n *Notice) {
	evented := n.evented.Load()
	deleted := false
	if !evented {
		n.p.rc.Control(func(fd uintptr) {
			unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
			deleted = true
		})
	}
	l.mu.Lock()
	delete(l.waits, n.id)
	n.id = 0
	if !evented {
		n.p.inSet = false
	}
	if deleted {
		l.ctls++
	}
	l.mu.Unlock()
}

// setup makes the epoll set; l.mu is held.
func (l *notifier) setup() error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("tunnel: epoll_create1: %w", err)
	}
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return fmt.Errorf("tunnel: epoll set non-blocking: %w", err)
	}
	// The poller parks the loop until the epoll descriptor is readable
	// (has events), as the engine's loop does. The set lives as long as
	// the process.
	f := os.NewFile(uintptr(epfd), "tunnel-notify")
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("tunnel: poll the epoll set: %w", err)
	}
	l.epfd, l.epFile, l.epRaw = epfd, f, rc
	return nil
}

// loop waits for events and fires their Notices until a sweep finds no
// wait left and none registered since the sweep before: it stays one to
// two sweeps (notifySweep) after the last wait has gone, so that a
// connection parked again and again (a client whose requests come more
// than a moment apart) starts no loop goroutine, allocates no event
// buffer and sets no deadline for each wait, and ending a wait needs no
// wake-up of the loop.
func (l *notifier) loop() {
	events := make([]unix.EpollEvent, 64)
	var n int
	var werr error
	// Every wait starts with a look at the set, even after a look that
	// took every event there was: RawConn.Read's first step forgets a
	// readiness the poller reported meanwhile (runtime pollReset), so an
	// event that came between the last look and this wait would have
	// no edge left to bring the loop back until the next sweep.
	try := func(fd uintptr) bool {
		n, werr = pollEvents(int(fd), events)
		return n != 0 || werr != nil
	}
	nextSweep := time.Now().Add(notifySweep)
	l.epFile.SetReadDeadline(nextSweep)
	for {
		n, werr = 0, nil
		err := l.epRaw.Read(try)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			werr = err
		}
		if werr != nil {
			l.failAll(fmt.Errorf("tunnel: wait for readiness: %w", werr))
			return
		}
		for i := range n {
			ev := &events[i]
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			l.mu.Lock()
			w := l.waits[id]
			l.mu.Unlock()
			if w != nil {
				w.evented.Store(true)
				w.w.Fire(nil)
			}
		}
		swept := false
		if now := time.Now(); !now.Before(nextSweep) {
			l.sweep()
			swept = true
			nextSweep = now.Add(notifySweep)
			l.epFile.SetReadDeadline(nextSweep)
		}
		l.mu.Lock()
		if swept {
			if len(l.waits) == 0 && !l.added {
				l.running = false
				l.mu.Unlock()
				return
			}
			l.added = false
		}
		l.mu.Unlock()
	}
}

// notifySweep is how often the loop looks for waits whose socket has
// been closed under them: its epoll registration went with it, so no
// event comes.
const notifySweep = time.Second

// sweep calls the waits whose socket has been closed with net.ErrClosed.
func (l *notifier) sweep() {
	var closed []*Notice
	l.mu.Lock()
	for _, w := range l.waits {
		if w.p.rc.Control(func(uintptr) {}) != nil {
			closed = append(closed, w)
		}
	}
	l.mu.Unlock()
	for _, w := range closed {
		w.w.Fire(net.ErrClosed)
	}
}

// failAll fires every wait with err, the loop having failed, and lets
// the next add start a new loop.
func (l *notifier) failAll(err error) {
	l.mu.Lock()
	waits := make([]*Notice, 0, len(l.waits))
	for _, w := range l.waits {
		waits = append(waits, w)
	}
	l.running = false
	l.mu.Unlock()
	for _, w := range waits {
		w.w.Fire(err)
	}
}
