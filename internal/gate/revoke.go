package gate

import (
	"sync"
)

// Registry tracks which sessions and tunnels each user holds open on
// each listener, across configuration generations, so that a reload that
// removes a user, or takes a user off a listener, ends them. The zero
// Registry is ready to use; a nil *Registry tracks nothing.
type Registry struct {
	mu sync.Mutex
	// users holds each user's sessions and its tunnels that outlive
	// their sessions; guarded by mu.
	users map[string]*held
	// of maps a session to the users it is tracked under; guarded by mu.
	of map[*Session][]string
}

// held is what one user holds open.
type held struct {
	sessions map[*Session]struct{}
	// tunnels is the first of the user's tunnels, linked by their prev
	// and next: a list rather than a map, so that an idle tunnel costs
	// the registry no entry of its own.
	tunnels *engineTunnel
}

func (r *Registry) heldLocked(user string) *held {
	if r.users == nil {
		r.users = make(map[string]*held)
		r.of = make(map[*Session][]string)
	}
	h := r.users[user]
	if h == nil {
		h = &held{sessions: make(map[*Session]struct{})}
		r.users[user] = h
	}
	return h
}

// add tracks s under user.
func (r *Registry) add(s *Session, user string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.heldLocked(user)
	if _, ok := h.sessions[s]; ok {
		return
	}
	h.sessions[s] = struct{}{}
	r.of[s] = append(r.of[s], user)
}

// forget stops tracking s.
func (r *Registry) forget(s *Session) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range r.of[s] {
		if h := r.users[u]; h != nil {
			delete(h.sessions, s)
			r.dropLocked(u, h)
		}
	}
	delete(r.of, s)
}

// addTunnel tracks t, a tunnel of t.account on t.p.Listener whose handle
// is set, unless it has ended already.
func (r *Registry) addTunnel(t *engineTunnel) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if t.state&stateEnded == 0 {
		h := r.heldLocked(t.account)
		t.next = h.tunnels
		if t.next != nil {
			t.next.prev = t
		}
		h.tunnels = t
		t.state |= stateTracked
	}
	r.mu.Unlock()
}

// removeTunnel marks t ended and stops tracking it.
func (r *Registry) removeTunnel(t *engineTunnel) {
	if r == nil {
		return
	}
	r.mu.Lock()
	t.state |= stateEnded
	if h := r.users[t.account]; h != nil && t.state&stateTracked != 0 {
		if t.prev != nil {
			t.prev.next = t.next
		} else {
			h.tunnels = t.next
		}
		if t.next != nil {
			t.next.prev = t.prev
		}
		t.prev, t.next = nil, nil
		t.state &^= stateTracked
		r.dropLocked(t.account, h)
	}
	r.mu.Unlock()
}

func (r *Registry) dropLocked(user string, h *held) {
	if len(h.sessions) == 0 && h.tunnels == nil {
		delete(r.users, user)
	}
}

// Revoke ends every session and tunnel of a user on a listener (as
// [Policy.Listener] names it) for which keep returns false, and returns
// how many users it revoked anything of. Sessions end with ErrRevoked as
// their context's cause and their connections closed. keep is called with
// r locked: it must not call r.
func (r *Registry) Revoke(keep func(listener, user string) bool) int {
	if r == nil {
		return 0
	}
	var sessions []*Session
	var tunnels []*engineTunnel
	n := 0
	r.mu.Lock()
	for u, h := range r.users {
		revoked := false
		for s := range h.sessions {
			if !keep(s.p.Listener, u) {
				s.revoked.Store(true) // under r.mu: see toEngine
				sessions = append(sessions, s)
				revoked = true
			}
		}
		for t := h.tunnels; t != nil; t = t.next {
			if !keep(t.p.Listener, u) {
				tunnels = append(tunnels, t)
				revoked = true
			}
		}
		if revoked {
			n++
		}
	}
	r.mu.Unlock()
	for _, s := range sessions {
		s.revoke()
	}
	for _, t := range tunnels {
		t.handle.Cut()
	}
	return n
}

// Users returns the number of users holding sessions or tunnels.
func (r *Registry) Users() int {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.users)
}
