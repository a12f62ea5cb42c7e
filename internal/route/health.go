package route

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// HealthConfig configures a parent's passive health check. Each field
// is required (config.SetDefaults fills them).
type HealthConfig struct {
	// MaxFails is how many failed connects within Window mark the parent
	// down.
	MaxFails int
	// Window is the span MaxFails failures must fall in.
	Window time.Duration
	// Cooldown is how long a parent stays down.
	Cooldown time.Duration
}

// check returns what is wrong with c: a field that is not positive.
func (c HealthConfig) check() error {
	switch {
	case c.MaxFails <= 0:
		return fmt.Errorf("health: max_fails %d is not positive", c.MaxFails)
	case c.Window <= 0:
		return fmt.Errorf("health: fail_window %v is not positive", c.Window)
	case c.Cooldown <= 0:
		return fmt.Errorf("health: cooldown %v is not positive", c.Cooldown)
	}
	return nil
}

// Health is a parent's health: up, or down until a time. A failure that
// counts against the parent (see [ErrorKind]) is noted, a success clears
// the count. A parent whose cool-down has passed is on probation: it is
// picked again, and its next failure puts it down at once.
type Health struct {
	cfg HealthConfig

	downUntil atomic.Int64 // unix nanoseconds; 0 = up, not on probation
	onChange  func(up bool)

	mu    sync.Mutex
	fails int       // guarded by mu
	first time.Time // the first failure counted; guarded by mu
}

func (h *Health) init(cfg HealthConfig) { h.cfg = cfg }

// carry takes old's state: down or up, and the failures counted; a
// reload's new parent of the same name and URL goes on from it.
func (h *Health) carry(old *Health) {
	old.mu.Lock()
	defer old.mu.Unlock()
	h.fails, h.first = old.fails, old.first
	h.downUntil.Store(old.downUntil.Load())
}

// Up reports whether the parent may be picked at now: it is not down
// (it may be on probation). It allocates nothing.
func (h *Health) Up(now time.Time) bool {
	d := h.downUntil.Load()
	return d == 0 || now.UnixNano() >= d
}

// Failed notes a failure at now and reports whether it put the parent
// down.
func (h *Health) Failed(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if d := h.downUntil.Load(); d != 0 {
		if now.UnixNano() < d {
			return false // already down
		}
		h.down(now) // on probation
		return true
	}
	if h.fails == 0 || now.Sub(h.first) > h.cfg.Window {
		h.fails, h.first = 0, now
	}
	h.fails++
	if h.fails < h.cfg.MaxFails {
		return false
	}
	h.down(now)
	return true
}

func (h *Health) down(now time.Time) {
	was := h.downUntil.Load()
	h.downUntil.Store(now.Add(h.cfg.Cooldown).UnixNano())
	h.fails = 0
	if was == 0 && h.onChange != nil {
		h.onChange(false)
	}
}

// Succeeded notes a success: the failures are forgotten and a parent on
// probation is up again.
func (h *Health) Succeeded() {
	if h.downUntil.Load() == 0 {
		h.mu.Lock()
		h.fails = 0
		h.mu.Unlock()
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fails = 0
	if h.downUntil.Swap(0) != 0 && h.onChange != nil {
		h.onChange(true)
	}
}

// observe notes the outcome of a dial.
func (h *Health) observe(err error, now time.Time) {
	if err == nil {
		h.Succeeded()
		return
	}
	var e *Error
	if errors.As(err, &e) && !e.Kind.countsAgainst() {
		h.Succeeded() // the parent answered
		return
	}
	h.Failed(now)
}

// ProbeConfig configures a parent's active health check: every Interval,
// a connect to the parent (and a CONNECT through it to Target when set);
// a failure counts as a failed connect, a success brings a down parent
// back.
type ProbeConfig struct {
	// Interval is the time between probes; 0 = no probes.
	Interval time.Duration
	// Target is host:port the probe asks the parent to connect to; "" =
	// only a TCP connect (and TLS handshake) to the parent.
	Target string
}

func (c ProbeConfig) check() error {
	if c.Interval < 0 {
		return errors.New("probe interval is negative")
	}
	if c.Target != "" && c.Interval == 0 {
		return errors.New("probe target without an interval")
	}
	if c.Target != "" {
		if _, _, err := splitTarget(c.Target); err != nil {
			return fmt.Errorf("probe target: %w", err)
		}
	}
	return nil
}
