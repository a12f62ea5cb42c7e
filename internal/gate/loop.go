package gate

import (
	"log/slog"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/route"
)

// loopWarnEvery is the least time between two warnings about loops; the
// refusals in between are counted in the next one.
const loopWarnEvery = 10 * time.Second

// loopWarn counts the loops refused since the last warning.
var loopWarn warnCounter

// warnCounter counts events between warnings about them, at most one
// every loopWarnEvery.
type warnCounter struct {
	mu   sync.Mutex
	last time.Time // guarded by mu
	n    int       // guarded by mu
}

// tick counts one event at now, and reports whether to warn of it, with
// the events counted since the last warning, this one included.
func (w *warnCounter) tick(now time.Time) (n int, warn bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	if now.Sub(w.last) < loopWarnEvery {
		return 0, false
	}
	n = w.n
	w.n, w.last = 0, now
	return n, true
}

// Session states of the check that the connection is not one of
// rustle's own, come back (see Session.returning).
const (
	returnUnchecked int32 = iota
	returnNo
	returnYes
)

// checkLoop refuses r (Loop, 508) when it came back to this rustle (the
// policy's Instance) through a parent: its Via names it
// (route.NamesSelf), or its connection is the other end of one of its
// parent handshakes in progress (route.Returning; the first request of a
// session decides it for all). Otherwise it keeps a copy of r.Via for a
// tunnel's CONNECT to an HTTP parent, and returns OK.
func (s *Session) checkLoop(r *Request, g *Grant) Kind {
	how := ""
	switch {
	case r.Via != nil && route.NamesSelf(s.p.Instance, r.Via):
		how = "via"
	case s.returning():
		how = "connection"
	}
	if how == "" {
		g.via = append(g.via[:0], r.Via...)
		return OK
	}
	s.warnLoop(how, g)
	return g.refuse(Loop)
}

// returning reports whether the session's connection is one rustle made
// to a parent that led back to it (see route.Returning). The first call
// decides.
func (s *Session) returning() bool {
	switch s.loopState.Load() {
	case returnNo:
		return false
	case returnYes:
		return true
	}
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	yes := route.Returning(s.p.Instance, c)
	st := returnNo
	if yes {
		st = returnYes
	}
	s.loopState.Store(st)
	return yes
}

// warnLoop logs a refused loop at warning level, at most once every
// loopWarnEvery with the count of those refused since: each is a
// misconfigured parent, not a client's doing. how says what gave it away:
// "via" (the Via field named this rustle) or "connection" (it came from
// one of rustle's own parent connections).
func (s *Session) warnLoop(how string, g *Grant) {
	n, warn := loopWarn.tick(time.Now())
	if !warn {
		return
	}
	s.p.logger().Warn("loop detected: a request came back to this rustle through a parent proxy; check the parents' addresses",
		slog.String("detected_by", how), slog.String("client", s.client.String()),
		slog.String("target", string(g.target)), slog.String("instance", s.p.Instance.Token()), slog.Int("refused", n))
}
