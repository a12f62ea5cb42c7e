package dialer

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"
)

// PoolConfig configures a Pool. Each field is required
// (config.SetDefaults fills them); without upstream keep-alive there is
// no Pool.
type PoolConfig struct {
	// MaxIdlePerHost bounds idle connections per origin.
	MaxIdlePerHost int
	// MaxIdle bounds idle connections in all.
	MaxIdle int
	// IdleTimeout closes a connection idle this long.
	IdleTimeout time.Duration
}

// Owner is who may reuse a pooled connection: the identity whose
// requests it carried (see gate.Grant.PoolOwner). It is comparable, and
// making one allocates nothing.
type Owner struct {
	// User is the user name the requests came with, session key
	// included; "" = none.
	User string
	// Client is the client's address when User is "" (the zero Addr
	// otherwise): requests without a user are told apart by where they
	// come from.
	Client netip.Addr
}

// Pool keeps idle upstream keep-alive connections, keyed by "host:port"
// (or a parent's key, or an intercepted name's TLS key), for reuse by
// client connections: TCP connections, or TLS connections (to an https
// parent, or to an intercepted tunnel's origin). Each is kept for an
// Owner, and handed out only to a Get of the same owner, so that an
// origin that ties state to a connection (NTLM, Negotiate) never serves
// one identity on a connection another's requests used; the zero Owner
// is the owner of connections anyone may reuse. The most recently
// returned connection of the owner is handed out first. Safe for
// concurrent use.
type Pool struct {
	cfg PoolConfig

	mu       sync.Mutex
	idle     map[string]*hostIdle     // guarded by mu
	timeouts map[string]time.Duration // idle timeouts of particular keys; guarded by mu
	total    int                      // guarded by mu
	closed   bool                     // guarded by mu

	stop  chan struct{}
	done  chan struct{}
	reset chan time.Duration // a new reaper period

	// Hits and Misses count Get calls that found or did not find a
	// connection; guarded by mu.
	hits, misses uint64
}

// hostIdle holds one origin's idle connections, most recent last. The
// map holds pointers so that Get never stores under a key it converted
// from bytes (which would allocate).
type hostIdle struct {
	conns   []idleConn
	timeout time.Duration // how long a connection of the key stays idle
}

type idleConn struct {
	c     net.Conn // a *net.TCPConn, or a *tls.Conn over one
	owner Owner    // who may reuse it; the zero Owner = anyone
	since time.Time
}

// NewPool returns a Pool and starts its reaper, which closes connections
// idle longer than the timeout. Close stops it. It refuses a field that
// is not positive.
func NewPool(cfg PoolConfig) (*Pool, error) {
	switch {
	case cfg.MaxIdlePerHost <= 0:
		return nil, fmt.Errorf("dialer: pool: max idle connections per host %d is not positive", cfg.MaxIdlePerHost)
	case cfg.MaxIdle <= 0:
		return nil, fmt.Errorf("dialer: pool: max idle connections %d is not positive", cfg.MaxIdle)
	case cfg.IdleTimeout <= 0:
		return nil, fmt.Errorf("dialer: pool: idle timeout %v is not positive", cfg.IdleTimeout)
	}
	p := &Pool{
		cfg:   cfg,
		idle:  make(map[string]*hostIdle),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
		reset: make(chan time.Duration, 1),
	}
	go p.reapLoop()
	return p, nil
}

// Get returns an idle connection to key kept for owner, or nil; the
// connections of other owners stay pooled for them. key is a byte slice
// so that a caller's reused buffer serves as the lookup key without
// allocating.
func (p *Pool) Get(key []byte, owner Owner) net.Conn {
	now := time.Now()
	p.mu.Lock()
	if h := p.idle[string(key)]; h != nil {
		for i := len(h.conns) - 1; i >= 0; i-- {
			ic := h.conns[i]
			expired := now.Sub(ic.since) >= h.timeout
			if !expired && ic.owner != owner {
				continue
			}
			last := len(h.conns) - 1
			copy(h.conns[i:], h.conns[i+1:])
			h.conns[last] = idleConn{}
			h.conns = h.conns[:last]
			p.total--
			if !expired {
				p.hits++
				p.mu.Unlock()
				return ic.c
			}
			ic.c.Close() // on the way: the reaper would close it
		}
	}
	p.misses++
	p.mu.Unlock()
	return nil
}

// Put offers an idle connection for reuse by owner (the zero Owner =
// anyone: see [Pool]). It reports whether the pool kept it; when it did not, Put
// closed it.
func (p *Pool) Put(key string, owner Owner, c net.Conn) bool {
	p.mu.Lock()
	h := p.idle[key]
	if p.closed || h != nil && len(h.conns) >= p.cfg.MaxIdlePerHost || p.total >= p.cfg.MaxIdle {
		p.mu.Unlock()
		c.Close()
		return false
	}
	if h == nil {
		h = &hostIdle{timeout: p.timeoutLocked(key)}
		p.idle[key] = h
	}
	h.conns = append(h.conns, idleConn{c: c, owner: owner, since: time.Now()})
	p.total++
	p.mu.Unlock()
	return true
}

// SetKeyIdleTimeouts gives the connections kept under the keys of m
// their own idle timeout (a parent proxy's idle_timeout, under the key
// its connections are pooled with), replacing the ones set before; every
// other key has PoolConfig.IdleTimeout. Connections already kept take
// their key's new timeout at once; the reaper runs often enough for the
// shortest.
func (p *Pool) SetKeyIdleTimeouts(m map[string]time.Duration) {
	p.mu.Lock()
	p.timeouts = make(map[string]time.Duration, len(m))
	shortest := p.cfg.IdleTimeout
	for k, d := range m {
		if d > 0 {
			p.timeouts[k] = d
			shortest = min(shortest, d)
		}
	}
	for k, h := range p.idle {
		h.timeout = p.timeoutLocked(k)
	}
	p.mu.Unlock()
	select {
	case <-p.reset: // an older period not taken yet
	default:
	}
	p.reset <- reapPeriod(shortest)
}

// timeoutLocked returns the idle timeout of key's connections.
func (p *Pool) timeoutLocked(key string) time.Duration {
	if d, ok := p.timeouts[key]; ok {
		return d
	}
	return p.cfg.IdleTimeout
}

// reapPeriod returns how often the reaper runs for a shortest idle
// timeout of d: every d/2, and at most every second unless d is shorter
// (at most every 10ms).
func reapPeriod(d time.Duration) time.Duration {
	return max(d/2, min(time.Second, d), 10*time.Millisecond)
}

// Retain closes the idle connections that keep reports false for (a
// reload's guard no longer lets them through) and returns how many it
// closed. keep is given the TCP connection (under TLS for an https
// parent's) and called with the pool locked.
func (p *Pool) Retain(keep func(c *net.TCPConn) bool) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	closed := 0
	for k, h := range p.idle {
		kept := h.conns[:0]
		for _, ic := range h.conns {
			if tc := TCPOf(ic.c); tc != nil && keep(tc) {
				kept = append(kept, ic)
				continue
			}
			ic.c.Close()
			closed++
		}
		clear(h.conns[len(kept):])
		h.conns = kept
		if len(kept) == 0 {
			delete(p.idle, k)
		}
	}
	p.total -= closed
	return closed
}

// Len returns the number of idle connections held.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total
}

// Stats returns how many Get calls found a connection and how many did not.
func (p *Pool) Stats() (hits, misses uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits, p.misses
}

// Close closes every idle connection and stops the reaper; later Puts
// close their connection. Close is idempotent.
func (p *Pool) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	for k, h := range p.idle {
		for _, ic := range h.conns {
			ic.c.Close()
		}
		delete(p.idle, k)
	}
	p.total = 0
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	return nil
}

// reapLoop closes expired idle connections until Close.
func (p *Pool) reapLoop() {
	defer close(p.done)
	t := time.NewTicker(reapPeriod(p.cfg.IdleTimeout))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case d := <-p.reset:
			t.Reset(d)
		case now := <-t.C:
			p.reap(now)
		}
	}
}

func (p *Pool) reap(now time.Time) {
	var expired []net.Conn
	p.mu.Lock()
	for k, h := range p.idle {
		list := h.conns
		keep := list[:0]
		for _, ic := range list {
			if now.Sub(ic.since) >= h.timeout {
				expired = append(expired, ic.c)
				p.total--
			} else {
				keep = append(keep, ic)
			}
		}
		for i := len(keep); i < len(list); i++ {
			list[i] = idleConn{}
		}
		if len(keep) == 0 {
			delete(p.idle, k)
		} else {
			h.conns = keep
		}
	}
	p.mu.Unlock()
	for _, c := range expired {
		c.Close()
	}
}

// TCPOf returns the TCP connection c is, or that c runs directly over
// when it has a NetConn method (a *tls.Conn, an origin's HTTP/2
// connection); nil for any other.
func TCPOf(c net.Conn) *net.TCPConn {
	switch c := c.(type) {
	case *net.TCPConn:
		return c
	case interface{ NetConn() net.Conn }:
		tc, _ := c.NetConn().(*net.TCPConn)
		return tc
	}
	return nil
}
