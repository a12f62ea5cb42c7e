package tunnel

import (
	"errors"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rustle-proxy/rustle/internal/workpool"
)

// ErrWoken is what a [Notice]'s function gets when [Notice.Wake] ended
// its wait.
var ErrWoken = errors.New("tunnel: wait woken")

// Wait is the state of one wait for a reader's bytes with no goroutine
// waiting meanwhile, shared by [Notice] (a socket's, in the epoll set)
// and h2's wait for an intercepted CONNECT stream's client: its
// function is called once, on a goroutine of its own, with the first
// of the bytes having come (nil, [Wait.Fire]), the deadline
// ([Wait.SetDeadline]: os.ErrDeadlineExceeded), [Wait.Wake] (ErrWoken)
// or what its owner fires it with (a failure). For a wait that looks
// (Init's looks: a reader whose bytes may make nothing for it to read,
// a TLS connection's, see [Looker]) the bytes having come start the
// owner's Look on a goroutine of its own instead (a reused worker's,
// after ReuseWorker), and the function is
// called (nil, on that goroutine) only once Look finds something to
// read; otherwise the owner registers the wait again (Rearm) and it
// goes on, its deadline too. What ends the wait while Look runs is kept
// (the first of it) for the function once Look is over.
//
// Lock order: the owner's lock (its Lock: h2's connection mutex; none
// for a Notice), then the Wait's own, then whatever Rearm takes
// (the process's epoll registry for a Notice). Fire and Wake take only
// the Wait's own, and may be called with the owner's lock held; the
// owner's Leave is called with the Wait's not held. Its zero value is
// not ready for use: call Init before anything else.
type Wait struct {
	owner WaitOwner
	fn    func(error)
	timer *time.Timer // the deadline; nil when none; guarded by mu
	// late is what ended the wait while owner.Look ran (settling),
	// which fn gets once it is over. Guarded by mu.
	late error
	mu   sync.Mutex
	// looks: the bytes having come start owner.Look, not fn.
	looks bool
	// reuse: settle runs on a reused worker (settlers), not a fresh
	// goroutine.
	reuse bool
	// settling is set while owner.Look runs. Guarded by mu.
	settling bool
	// fired is set (under mu) once fn has been started, or is being; it
	// is read without mu too (Fired).
	fired atomic.Bool
}

// WaitOwner is what a [Wait] asks of the one it serves, which knows
// where the wait is registered (a socket in the epoll set, an h2
// stream) and how to look at what came.
type WaitOwner interface {
	// Lock and Unlock are the owner's lock, which the Wait takes before
	// its own to settle what Look found (see Wait's lock order); they
	// do nothing for an owner with none.
	sync.Locker
	// Look is the reader's look at what came, for a Wait that looks,
	// on a goroutine of its own with no lock held: true when the
	// reader has bytes to read, an error or the end of the stream to
	// see; false when what came made nothing to read (a KeyUpdate, an
	// empty record). It runs on one goroutine at a time, never once
	// the Wait's function has been called.
	Look() bool
	// Leave takes the wait out of where it is registered, if it is,
	// once it has fired (Fire starts the function or Look after it);
	// the Wait's lock is not held, the owner's may be (Fire's caller).
	Leave()
	// Rearm registers the wait again after a Look that found nothing,
	// with the owner's lock and the Wait's held: again when more has
	// come meanwhile (Look is called again at once); an error ends the
	// wait with it.
	Rearm() (again bool, err error)
}

// Init readies w for its owner: fn is called once the wait ends; looks
// says that the bytes having come start owner.Look first. It is called
// once, before w is registered anywhere.
func (w *Wait) Init(owner WaitOwner, looks bool, fn func(error)) {
	w.owner, w.looks, w.fn = owner, looks, fn
}

// ReuseWorker makes a wait that looks run its owner's Look, and then its
// function, on a reused worker goroutine (a pool of the process, see
// package workpool) rather than on a fresh one: for a reader that
// serves on once it has bytes (a connection's next request, TLS records
// and header compression), whose fresh goroutine's stack would grow
// again, two or three copies of it, after each wait. Such a function
// should not leave the goroutine waiting for long (a connection's
// reader parks again with a Notice, not on it): the worker's stack has
// grown. It is called after Init, before w is registered.
func (w *Wait) ReuseWorker() { w.reuse = true }

// settlers runs the settle of the waits that reuse workers: a worker
// that has run one waits settlerIdle for the next before it ends.
var settlers = workpool.New((*Wait).settle, maxIdleSettlers, settlerIdle)

const (
	// maxIdleSettlers bounds the settlers waiting for a wait's end.
	maxIdleSettlers = 256
	// settlerIdle is how long a settler waits for the next wait's end.
	settlerIdle = 2 * time.Second
)

// SetDeadline ends the wait with os.ErrDeadlineExceeded once deadline
// has passed (zero: never), unless it has ended before. It is called
// once, when the wait has been registered.
func (w *Wait) SetDeadline(deadline time.Time) {
	if deadline.IsZero() {
		return
	}
	w.mu.Lock()
	if !w.fired.Load() {
		w.timer = time.AfterFunc(time.Until(deadline), w.expire)
	}
	w.mu.Unlock()
}

// expire is the deadline's timer function.
func (w *Wait) expire() { w.Fire(os.ErrDeadlineExceeded) }

// Fired reports whether the function has been started, or is being; it
// takes no lock.
func (w *Wait) Fired() bool { return w.fired.Load() }

// Wake ends the wait if its function has not been called yet: it gets
// [ErrWoken]. It does not block, and may be called more than once.
func (w *Wait) Wake() { w.Fire(ErrWoken) }

// Fire ends the wait with err (nil: the bytes have come) unless it has
// ended: the owner's Leave first, then the function, on a goroutine of
// its own. For a wait that looks, nil starts settle on a goroutine
// instead (after Leave), and what ends the wait while it looks is kept
// for the function until it is done. It does not block.
func (w *Wait) Fire(err error) {
	w.mu.Lock()
	switch {
	case w.fired.Load():
		w.mu.Unlock()
		return
	case w.settling:
		if w.late == nil {
			w.late = err
		}
		w.mu.Unlock()
		return
	case err == nil && w.looks:
		w.settling = true
		w.mu.Unlock()
		w.owner.Leave()
		if w.reuse {
			settlers.Start(w)
		} else {
			go w.settle()
		}
		return
	}
	w.endLocked()
	w.mu.Unlock()
	w.owner.Leave()
	go w.fn(err)
}

// endLocked marks the wait ended, fn to be called, and stops its
// deadline. w.mu is held.
func (w *Wait) endLocked() {
	w.fired.Store(true)
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
}

// settle is Fire for a wait that looks whose bytes have come, on a
// goroutine of its own (a reused worker's, after ReuseWorker): it calls fn (on this goroutine) once the
// owner's Look has found something for the reader, or the wait was
// ended meanwhile, or registering it again failed; otherwise (Look found
// nothing to read) the owner registers the wait again and it returns,
// holding nothing: the wait goes on, its deadline too.
func (w *Wait) settle() {
	for {
		ready := w.owner.Look()
		w.owner.Lock()
		w.mu.Lock()
		err := w.late
		if err == nil && !ready {
			again, rerr := w.owner.Rearm()
			if again {
				w.unlockAll()
				continue
			}
			if err = rerr; err == nil {
				w.settling = false
				w.unlockAll()
				return
			}
		}
		w.settling = false
		w.endLocked()
		w.unlockAll()
		w.fn(err)
		return
	}
}

// unlockAll releases the Wait's lock, then the owner's.
func (w *Wait) unlockAll() {
	w.mu.Unlock()
	w.owner.Unlock()
}
