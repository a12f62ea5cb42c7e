package gate

import (
	"context"
	"sync"
	"time"
)

// FlowGroup is what the CONNECT-UDP flows of one client connection (one
// Session) share, so that an idle flow costs as little as it can: one
// timer that ends the flows idle past their timeout, one hook on the
// session's revocation that ends them all, and, where the system has one
// (Linux), a FlowPoller that waits for the target's datagrams of all of
// them (see StartFlow). A front-end makes one with the connection's
// first flow and closes it once the connection's last flow has ended.
type FlowGroup struct {
	s      *Session
	poller *FlowPoller // nil: none to be had
	stop   func() bool // stops the hook on the session's revocation

	mu     sync.Mutex
	flows  *FlowRelay  // the first of the group's flows, linked by prev and next; guarded by mu
	timer  *time.Timer // ends the idle flows; nil until a flow has an idle timeout; guarded by mu
	due    time.Time   // when timer fires; zero while it is stopped; guarded by mu
	closed bool        // guarded by mu
}

// NewFlowGroup returns the group of the flows of s's connection, with a
// FlowPoller when the system has one to give (an error making it is
// logged at debug level: the flows then read their sockets on
// goroutines of their own).
func NewFlowGroup(s *Session) *FlowGroup {
	fg := &FlowGroup{s: s}
	if p, err := NewFlowPoller(); err == nil {
		fg.poller = p
	} else {
		s.p.logger().Debug("gate: flows read their sockets on goroutines of their own", "err", err)
	}
	fg.stop = context.AfterFunc(s.rctx, fg.revoked)
	return fg
}

// Close stops the group's timer, its hook and its poller. Flows still in
// it get no more of their target's datagrams and are no longer ended
// when idle or revoked: close it after the last flow's Wait.
func (fg *FlowGroup) Close() {
	fg.mu.Lock()
	fg.closed = true
	if fg.timer != nil {
		fg.timer.Stop()
	}
	fg.mu.Unlock()
	fg.stop()
	if fg.poller != nil {
		fg.poller.Close()
	}
}

// add puts r in the group, setting r.group, unless the group is closed
// (r then keeps a timer and a hook of its own).
func (fg *FlowGroup) add(r *FlowRelay) bool {
	fg.mu.Lock()
	defer fg.mu.Unlock()
	if fg.closed {
		return false
	}
	r.group = fg
	r.next = fg.flows
	if r.next != nil {
		r.next.prev = r
	}
	fg.flows = r
	if r.idle > 0 {
		fg.armLocked(r.idle)
	}
	return true
}

// remove takes r out of the group.
func (fg *FlowGroup) remove(r *FlowRelay) {
	fg.mu.Lock()
	if r.prev != nil {
		r.prev.next = r.next
	} else if fg.flows == r {
		fg.flows = r.next
	}
	if r.next != nil {
		r.next.prev = r.prev
	}
	r.prev, r.next = nil, nil
	fg.mu.Unlock()
}

// armLocked makes the timer fire within d, if it was not to fire sooner;
// fg.mu is held.
func (fg *FlowGroup) armLocked(d time.Duration) {
	due := time.Now().Add(d)
	if !fg.due.IsZero() && !fg.due.After(due) {
		return
	}
	fg.due = due
	if fg.timer == nil {
		fg.timer = time.AfterFunc(d, fg.sweep)
	} else {
		fg.timer.Reset(d)
	}
}

// sweep ends the flows that passed no datagram for their idle timeout,
// and sets the timer for the next one to. It sweeps at most once per
// sixteenth of the shortest timeout, so that a connection of many busy
// flows is not swept over and over: a flow ends within that much past
// its timeout.
func (fg *FlowGroup) sweep() {
	var idle []*FlowRelay
	fg.mu.Lock()
	if fg.closed {
		fg.mu.Unlock()
		return
	}
	fg.due = time.Time{}
	var next, shortest time.Duration
	for r := fg.flows; r != nil; r = r.next {
		if r.idle <= 0 || r.ended.Load() {
			continue
		}
		if shortest == 0 || r.idle < shortest {
			shortest = r.idle
		}
		if left := r.idle - r.quiet(); left <= 0 {
			idle = append(idle, r)
		} else if next == 0 || left < next {
			next = left
		}
	}
	if next > 0 {
		fg.armLocked(max(next, shortest/16))
	}
	fg.mu.Unlock()
	for _, r := range idle {
		r.End(errFlowIdle)
	}
}

// revoked ends every flow of the group with the session's revocation.
func (fg *FlowGroup) revoked() {
	var flows []*FlowRelay
	fg.mu.Lock()
	for r := fg.flows; r != nil; r = r.next {
		flows = append(flows, r)
	}
	fg.mu.Unlock()
	cause := context.Cause(fg.s.rctx)
	for _, r := range flows {
		r.End(cause)
	}
}
