package gate

import (
	"net/netip"
	"time"

	"github.com/rustle-proxy/rustle/internal/limits"
)

// Admission is the verdict of [Policy.Admit] on a new client connection.
type Admission struct {
	// Verdict is limits.OK for an admitted connection, otherwise why it
	// is refused.
	Verdict limits.Verdict
	// RetryAfter is, for an address cooling down after failed
	// authentications, the time the cool-down has left; 0 otherwise.
	RetryAfter time.Duration
}

// OK reports whether the connection is admitted.
func (a Admission) OK() bool { return a.Verdict == limits.OK }

// Status returns the HTTP status a refusal is answered with: 503 when
// rustle holds as many client connections as limits.max_connections
// lets it, 429 for the client's own limits (its connections, its rate of
// new ones, its cool-down); 200 for an admitted connection.
func (a Admission) Status() int {
	switch a.Verdict {
	case limits.OK:
		return 200
	case limits.TooMany:
		return 503
	}
	return 429
}

// Reason returns the one-line reason of a refusal, such as "too many
// connections from the client"; "ok" for an admitted connection.
func (a Admission) Reason() string { return a.Verdict.String() }

// Admit decides, before anything is read from it, whether a new client
// connection from ip is served: the connection limits (in all, per
// client address, new connections per second per address) and the
// address's cool-down after failed authentications. Every front-end's
// accept path asks it, TCP and QUIC alike. An admitted connection is
// counted until [Policy.Release](ip), which the release function given
// to [Policy.NewSession] calls; a refused one counts nothing (the
// limiter warns of its refusals, at most once per interval and reason).
// A policy without a Limiter admits every connection.
func (p *Policy) Admit(ip netip.Addr) Admission {
	if p.Limiter == nil {
		return Admission{}
	}
	v, retry := p.Limiter.Admit(ip)
	return Admission{Verdict: v, RetryAfter: retry}
}

// Release gives back the admission of a connection from ip that Admit
// admitted.
func (p *Policy) Release(ip netip.Addr) {
	if p.Limiter != nil {
		p.Limiter.Release(ip)
	}
}
