package authz

import (
	"sync"
	"time"
)

// verdict is what the service answered about a document.
type verdict struct {
	allow   bool
	headers []Header // sorted by name; shared, never modified
}

// cache holds the decisions of the documents asked lately, at most max,
// evicting the least recently used, and the calls in flight by document,
// which a decision on the same document waits for rather than calling
// again.
type cache struct {
	mu      sync.Mutex
	max     int                // 0 = nothing cached
	entries map[string]*entry  // guarded by mu
	lru     entry              // sentinel of the ring, most recent first; guarded by mu
	flights map[string]*flight // guarded by mu
}

// entry is one cached decision, in the LRU ring.
type entry struct {
	key        string
	v          verdict
	expires    time.Duration // monotonic (monoNow)
	prev, next *entry
}

// flight is a call in flight: done is closed once v and err are set.
type flight struct {
	key  string
	done chan struct{}
	v    verdict
	err  error
}

func (c *cache) init(max int) {
	c.max = max
	c.entries = make(map[string]*entry)
	c.flights = make(map[string]*flight)
	c.lru.prev, c.lru.next = &c.lru, &c.lru
}

// get returns the decision cached for doc, unexpired at now.
func (c *cache) get(doc []byte, now time.Duration) (verdict, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.entries[string(doc)]
	if e == nil {
		return verdict{}, false
	}
	if now >= e.expires {
		c.remove(e)
		return verdict{}, false
	}
	c.unlink(e)
	c.pushFront(e)
	return e.v, true
}

// join returns the call in flight for doc, or starts one: leader says
// the caller is to make it and land it.
func (c *cache) join(doc []byte) (f *flight, leader bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.flights[string(doc)]; f != nil {
		return f, false
	}
	f = &flight{key: string(doc), done: make(chan struct{})}
	c.flights[f.key] = f
	return f, true
}

// land ends the call f with its outcome, caching a decision for ttl from
// now (none for an error or a ttl of 0), and wakes those who wait for
// it.
func (c *cache) land(f *flight, v verdict, ttl time.Duration, err error, now time.Duration) {
	f.v, f.err = v, err
	c.mu.Lock()
	delete(c.flights, f.key)
	if err == nil && ttl > 0 && c.max > 0 {
		c.put(f.key, v, now+ttl)
	}
	c.mu.Unlock()
	close(f.done)
}

// put caches v for key until expires, evicting the least recently used
// decision when the cache is full. Called with mu held.
func (c *cache) put(key string, v verdict, expires time.Duration) {
	if e := c.entries[key]; e != nil {
		e.v, e.expires = v, expires
		c.unlink(e)
		c.pushFront(e)
		return
	}
	if len(c.entries) >= c.max {
		c.remove(c.lru.prev)
	}
	e := &entry{key: key, v: v, expires: expires}
	c.entries[key] = e
	c.pushFront(e)
}

// remove drops e. Called with mu held.
func (c *cache) remove(e *entry) {
	c.unlink(e)
	delete(c.entries, e.key)
}

func (c *cache) unlink(e *entry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *cache) pushFront(e *entry) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}
