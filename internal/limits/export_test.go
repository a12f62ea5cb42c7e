package limits

import "time"

// SetClock replaces the Limiter's clock.
func (l *Limiter) SetClock(now func() time.Time) { l.now = now }

// SetClock replaces the Bucket's clock and restarts it full.
func (b *Bucket) SetClock(now func() time.Time) {
	b.now = now
	b.tokens, b.refilled = b.burst, now()
}

// Clients returns the number of client addresses with state.
func (l *Limiter) Clients() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}

// Names returns the user names tracked, as counted and as held in the
// clients' tables.
func (l *Limiter) Names() (counted, held int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.clients {
		held += len(c.names)
	}
	return l.names, held
}
