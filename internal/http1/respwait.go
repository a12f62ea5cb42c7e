package http1

import (
	"sync"
	"time"
)

// ResponseWait arms the read deadline of an upstream whose response head
// is awaited while another goroutine may still be sending the request
// body. The response-header timeout starts when the request is complete
// (RFC 9110 §15 leaves the origin free to answer early, and an early
// answer is read at once); while the body flows, the body writer's own
// deadlines guard its progress and the head is awaited without one. When
// the body fails on the client's side, the wait is cut at once: nothing
// the origin might say can complete the exchange any more.
//
// The reader calls Arm before each ReadHead and End after the wait; the
// body writer calls BodySent or Cut, once. The zero ResponseWait is not
// ready: Start it.
type ResponseWait struct {
	mu      sync.Mutex
	c       *Conn
	timeout time.Duration
	state   uint8 // rwBody, rwSent, rwCut
	waiting bool  // the reader is between Arm and End
}

const (
	rwBody uint8 = iota // the body is still being sent
	rwSent              // the body was sent (or failed upstream): the timeout runs
	rwCut               // the body failed on the client's side: the wait ends
)

// Start readies w for a wait on c, with the response-header timeout
// (0 = none) to start once the body is sent.
func (w *ResponseWait) Start(c *Conn, timeout time.Duration) {
	w.c, w.timeout, w.state, w.waiting = c, timeout, rwBody, false
}

// Arm arms c's read deadline for the first byte of a response head: none
// while the body is still being sent, the timeout once it was, one past
// if the wait was cut.
func (w *ResponseWait) Arm() {
	w.mu.Lock()
	w.waiting = true
	w.c.ForgetReadDeadline()
	switch w.state {
	case rwBody:
		w.c.ArmReadDeadline(MonoNow(), 0)
	case rwSent:
		w.c.ArmReadDeadline(MonoNow(), w.timeout)
	default:
		w.c.C.SetReadDeadline(pastDeadline)
	}
	w.mu.Unlock()
}

// End ends a wait begun with Arm; c's read deadline is the reader's own
// again (forgotten: the next ArmReadDeadline arms anew).
func (w *ResponseWait) End() {
	w.mu.Lock()
	w.waiting = false
	w.c.ForgetReadDeadline()
	w.mu.Unlock()
}

// BodySent tells a reader waiting, or about to wait, that the request is
// complete upstream, or can get no further there: its timeout starts now.
func (w *ResponseWait) BodySent() {
	w.mu.Lock()
	w.state = rwSent
	if w.waiting && w.timeout > 0 {
		w.c.C.SetReadDeadline(time.Now().Add(w.timeout))
	}
	w.mu.Unlock()
}

// Cut ends the wait: the body failed on the client's side.
func (w *ResponseWait) Cut() {
	w.mu.Lock()
	w.state = rwCut
	if w.waiting {
		w.c.C.SetReadDeadline(pastDeadline)
	}
	w.mu.Unlock()
}

// WasCut reports whether Cut was called.
func (w *ResponseWait) WasCut() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.state == rwCut
}

// pastDeadline is a deadline long past: it wakes a blocked read at once.
var pastDeadline = time.Unix(1, 0)
