package auth

import (
	"sync"
	"time"
)

// cacheKey is the salted SHA-256 of a Proxy-Authorization value.
type cacheKey = [32]byte

// verdict is the cached result of checking one value.
type verdict struct {
	entry
	expires time.Time // entry unusable from this time on
}

// entry is what checking one value concluded, as the cache keeps it.
type entry struct {
	user    string   // user name when accepted; "" otherwise
	groups  []string // the user's rustle groups from its provider; shared, never modified
	outcome Outcome
	local   bool          // accepted by the Authenticator's own users, whom a view made by Only restricts
	ttl     time.Duration // how long to cache it; <= 0 = not cached
}

// flight is a verification in progress; later callers for the same key wait
// for it instead of running the verification again.
type flight struct {
	done chan struct{} // closed when e is set
	e    entry
}

// maxShards is the most shards a cache is split into.
const maxShards = 16

// evictSample is how many entries an insert into a full shard looks at when
// choosing a victim; a negative verdict among them is evicted first.
const evictSample = 8

// cache is a bounded map of verdicts with expiry, split into shards by the
// first byte of the key so that hits on different shards do not contend.
type cache struct {
	shards   []shard
	mask     byte // len(shards)-1; len(shards) is a power of two
	perShard int  // most entries in one shard; perShard*len(shards) <= size
	ttl      time.Duration
}

// shard is one part of a cache.
type shard struct {
	mu      sync.RWMutex
	entries map[cacheKey]verdict // guarded by mu
	pending map[cacheKey]*flight // guarded by mu
}

// newCache returns a cache of at most size entries (size >= 1), each kept for ttl.
func newCache(size int, ttl time.Duration) *cache {
	n := 1
	for n*2 <= maxShards && n*2 <= size {
		n *= 2
	}
	c := &cache{
		shards:   make([]shard, n),
		mask:     byte(n - 1),
		perShard: size / n,
		ttl:      ttl,
	}
	for i := range c.shards {
		c.shards[i].entries = make(map[cacheKey]verdict)
		c.shards[i].pending = make(map[cacheKey]*flight)
	}
	return c
}

func (c *cache) shard(k *cacheKey) *shard {
	return &c.shards[k[0]&c.mask]
}

// get returns the unexpired verdict for k, if any.
func (s *shard) get(k *cacheKey, now time.Time) (verdict, bool) {
	s.mu.RLock()
	v, ok := s.entries[*k]
	s.mu.RUnlock()
	if !ok || !now.Before(v.expires) {
		return verdict{}, false
	}
	return v, true
}

// resolve returns the verdict for k, running verify when no unexpired
// verdict is cached and no other caller is already running it for k; the
// result is cached until now() plus its ttl, and not at all when its ttl
// is not positive. Concurrent callers for the same
// key wait for the first one's result.
func (c *cache) resolve(k *cacheKey, now func() time.Time, verify func() entry) entry {
	s := c.shard(k)
	s.mu.Lock()
	if v, ok := s.entries[*k]; ok && now().Before(v.expires) {
		s.mu.Unlock()
		return v.entry
	}
	if f := s.pending[*k]; f != nil {
		s.mu.Unlock()
		<-f.done
		return f.e
	}
	f := &flight{done: make(chan struct{})}
	s.pending[*k] = f
	s.mu.Unlock()

	stored := false
	defer func() {
		// On a panic in verify the waiters get a refusal and nothing is cached.
		s.mu.Lock()
		delete(s.pending, *k)
		if stored && f.e.ttl > 0 {
			t := now()
			s.insertLocked(k, verdict{entry: f.e, expires: t.Add(f.e.ttl)}, c.perShard, t)
		}
		s.mu.Unlock()
		close(f.done)
	}()
	f.e = verify()
	stored = true
	return f.e
}

// insertLocked stores v under k, first making room when the shard holds max
// entries: expired entries go first, then a sampled negative verdict, then
// any sampled entry. s.mu must be held for writing.
func (s *shard) insertLocked(k *cacheKey, v verdict, max int, now time.Time) {
	if _, exists := s.entries[*k]; !exists && len(s.entries) >= max {
		for key, e := range s.entries {
			if !now.Before(e.expires) {
				delete(s.entries, key)
			}
		}
		if len(s.entries) >= max {
			var victim cacheKey
			found, n := false, 0
			for key, e := range s.entries { // map order is randomised
				if !found || e.outcome != Accepted {
					victim, found = key, true
				}
				n++
				if e.outcome != Accepted || n >= evictSample {
					break
				}
			}
			delete(s.entries, victim)
		}
	}
	s.entries[*k] = v
}

// len returns the number of entries, expired ones included.
func (c *cache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.entries)
		s.mu.RUnlock()
	}
	return n
}
