package resolve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/metrics"
)

// ErrNoAnswer is wrapped (as a [net.DNSError]'s UnwrapErr) by the error
// of a lookup that no configured server answered. It has a method
// NoAnswer, which callers that cannot import this package (the dialer)
// find with errors.As.
var ErrNoAnswer error = noAnswer{}

type noAnswer struct{}

func (noAnswer) Error() string { return "resolve: no resolver answered" }

// NoAnswer marks the error as ErrNoAnswer.
func (noAnswer) NoAnswer() bool { return true }

// Family is an address family choice.
type Family uint8

// Families, for Prefer and Only.
const (
	// Auto prefers IPv6 (Prefer), or restricts nothing (Only).
	Auto Family = iota
	// IPv4 is A records.
	IPv4
	// IPv6 is AAAA records.
	IPv6
)

// ParseFamily parses "ipv4", "ipv6" or "auto" ("" is Auto).
func ParseFamily(s string) (Family, error) {
	switch s {
	case "", "auto":
		return Auto, nil
	case "ipv4":
		return IPv4, nil
	case "ipv6":
		return IPv6, nil
	}
	return 0, fmt.Errorf("resolve: family %q is not \"ipv4\", \"ipv6\" or \"auto\"", s)
}

// Config configures a Resolver.
type Config struct {
	// Servers are asked in order; at least one is required.
	Servers []Server
	// Timeout bounds one query to one server; required.
	Timeout time.Duration
	// MinTTL is the least time an answer is cached, whatever its TTL;
	// 0 = none (an answer with TTL 0 is not cached).
	MinTTL time.Duration
	// MaxTTL is the most time an answer is cached; required.
	MaxTTL time.Duration
	// NegativeTTL is the most time a negative answer (NXDOMAIN, or no
	// record of the family) is cached, and the time one without an SOA
	// is; required.
	NegativeTTL time.Duration
	// CacheSize bounds the names cached; required.
	CacheSize int
	// Prefer orders the addresses of a name: IPv4 or IPv6 first; Auto =
	// IPv6 first.
	Prefer Family
	// Only restricts lookups to one family; Auto = both.
	Only Family
	// Hosts are static entries, by lower-case name without a trailing
	// dot; they answer before the cache and the servers.
	Hosts map[string][]netip.Addr
	// TLS is the client configuration of TLS and HTTPS servers (its
	// RootCAs); nil = the system's roots. ServerName is set per server.
	TLS *tls.Config
	// Mark is the firewall mark (SO_MARK) of the sockets queries go out
	// on (egress.mark); 0 = none.
	Mark uint32
	// Metrics counts lookups and queries; nil = none.
	Metrics *metrics.DNSMetrics
	// Logger receives debug lines about UDP datagrams ignored as no
	// answer to a query; nil = none.
	Logger *slog.Logger
	// now is the clock; nil = time.Now (tests set it).
	now func() time.Time
}

// Resolver resolves host names with its configured servers, a cache and
// static hosts entries. It is safe for concurrent use.
type Resolver struct {
	cfg   Config
	ex    *exchanger
	hosts map[cacheKey][]netip.Addr
	now   func() time.Time

	mu     sync.RWMutex
	cache  map[cacheKey]*entry // guarded by mu
	flight map[cacheKey]*call  // guarded by mu
}

// cacheKey is a lookup: a lower-case name without its trailing dot, and
// the families asked.
type cacheKey struct {
	name string
	fams Family // Auto = both
}

// entry is a cached answer.
type entry struct {
	addrs   []netip.Addr // ordered; shared, never modified
	err     error        // the negative answer's error; nil for addrs
	expires time.Time
}

// call is a lookup in flight, which identical lookups wait for.
type call struct {
	waiters int // lookups that joined; guarded by Resolver.mu
	done    chan struct{}
	addrs   []netip.Addr
	err     error
}

// New returns a Resolver for cfg. It refuses a Config without servers,
// or whose Timeout, MaxTTL, NegativeTTL or CacheSize is not positive
// (config.SetDefaults fills them).
func New(cfg Config) (*Resolver, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("resolve: no servers")
	}
	switch {
	case cfg.Timeout <= 0:
		return nil, fmt.Errorf("resolve: query timeout %v is not positive", cfg.Timeout)
	case cfg.MaxTTL <= 0:
		return nil, fmt.Errorf("resolve: max TTL %v is not positive", cfg.MaxTTL)
	case cfg.NegativeTTL <= 0:
		return nil, fmt.Errorf("resolve: negative TTL %v is not positive", cfg.NegativeTTL)
	case cfg.CacheSize <= 0:
		return nil, fmt.Errorf("resolve: cache size %d is not positive", cfg.CacheSize)
	case cfg.MinTTL < 0:
		return nil, fmt.Errorf("resolve: min TTL %v is negative", cfg.MinTTL)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Resolver{cfg: cfg, ex: newExchanger(cfg.TLS, cfg.Mark), now: cfg.now,
		cache: make(map[cacheKey]*entry), flight: make(map[cacheKey]*call)}
	if r.now == nil {
		r.now = time.Now
	}
	if len(cfg.Hosts) > 0 {
		r.hosts = make(map[cacheKey][]netip.Addr)
		for name, addrs := range cfg.Hosts {
			name = canonical(name)
			var v4, v6 []netip.Addr
			for _, a := range addrs {
				if a = a.Unmap(); a.Is4() {
					v4 = append(v4, a)
				} else {
					v6 = append(v6, a)
				}
			}
			for _, f := range []Family{Auto, IPv4, IPv6} {
				if list := r.order(f, v4, v6); len(list) > 0 {
					r.hosts[cacheKey{name, f}] = list
				}
			}
		}
	}
	return r, nil
}

// Close releases the idle connections of DNS over HTTPS servers.
func (r *Resolver) Close() { r.ex.close() }

// canonical returns name in lower case without a trailing dot; it does
// not allocate when name is so already.
func canonical(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// families returns what network ("ip", "ip4", "ip6") asks under Only, and
// false when Only rules it out.
func (r *Resolver) families(network string) (Family, bool) {
	want := Auto
	switch network {
	case "ip4", "tcp4", "udp4":
		want = IPv4
	case "ip6", "tcp6", "udp6":
		want = IPv6
	}
	switch {
	case r.cfg.Only == Auto:
		return want, true
	case want == Auto:
		return r.cfg.Only, true
	}
	return want, want == r.cfg.Only
}

// LookupNetIP returns the addresses of host for network ("ip", "ip4" or
// "ip6"), as [net.Resolver.LookupNetIP] does: from the hosts entries, the
// cache, or the servers. The slice returned is shared: callers must not
// modify it. An IP literal is returned as itself. Errors are
// *[net.DNSError]: IsNotFound for a name that does not exist or has no
// address of the family, UnwrapErr [ErrNoAnswer] when no server
// answered.
func (r *Resolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if ip, ok, err := dialer.ParseHost(host); ok {
		return []netip.Addr{ip}, nil
	} else if err != nil {
		return nil, &net.DNSError{Err: err.Error(), Name: host, IsNotFound: true}
	}
	fams, ok := r.families(network)
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	key := cacheKey{canonical(host), fams}
	if addrs, ok := r.hosts[key]; ok {
		r.cfg.Metrics.HostsHit()
		return addrs, nil
	}
	if addrs, err, ok := r.cached(key); ok {
		r.cfg.Metrics.CacheHit()
		return addrs, err
	}
	r.cfg.Metrics.CacheMiss()
	return r.wait(ctx, key, host)
}

// cached returns the unexpired cache entry of key.
func (r *Resolver) cached(key cacheKey) ([]netip.Addr, error, bool) {
	r.mu.RLock()
	e, ok := r.cache[key]
	r.mu.RUnlock()
	if !ok || !r.now().Before(e.expires) {
		return nil, nil, false
	}
	return e.addrs, e.err, true
}

// wait joins the lookup of key in flight, or starts it, and waits for it
// or for ctx.
func (r *Resolver) wait(ctx context.Context, key cacheKey, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	c, ok := r.flight[key]
	if !ok {
		c = &call{done: make(chan struct{})}
		r.flight[key] = c
		go r.run(key, c)
	}
	c.waiters++
	r.mu.Unlock()
	select {
	case <-c.done:
		return c.addrs, c.err
	case <-ctx.Done():
		return nil, &net.DNSError{Err: ctx.Err().Error(), Name: host, IsTimeout: errors.Is(ctx.Err(), context.DeadlineExceeded), UnwrapErr: ctx.Err()}
	}
}

// run looks key up with the servers, caches the outcome and hands it to
// the call's waiters. Its time is bounded by the queries' timeouts.
func (r *Resolver) run(key cacheKey, c *call) {
	addrs, ttl, err := r.query(key)
	r.mu.Lock()
	if ttl > 0 {
		if _, ok := r.cache[key]; !ok && len(r.cache) >= r.cfg.CacheSize {
			r.evictLocked()
		}
		r.cache[key] = &entry{addrs: addrs, err: err, expires: r.now().Add(ttl)}
	}
	delete(r.flight, key)
	c.addrs, c.err = addrs, err
	r.mu.Unlock()
	close(c.done)
}

// evictLocked makes room for one entry: it drops the expired ones, or
// when none has expired an arbitrary one (Go's map order).
func (r *Resolver) evictLocked() {
	now := r.now()
	for k, e := range r.cache {
		if !now.Before(e.expires) {
			delete(r.cache, k)
		}
	}
	if len(r.cache) < r.cfg.CacheSize {
		return
	}
	for k := range r.cache {
		delete(r.cache, k)
		if len(r.cache) < r.cfg.CacheSize {
			return
		}
	}
}

// famResult is one family's outcome.
type famResult struct {
	a   answer
	err error
}

// query asks the servers for key's families (in parallel) and returns the
// ordered addresses or the error, and how long to cache them (0 = not).
func (r *Resolver) query(key cacheKey) ([]netip.Addr, time.Duration, error) {
	name, err := dnsmessage.NewName(key.name + ".")
	if err != nil {
		return nil, 0, &net.DNSError{Err: "invalid name", Name: key.name, IsNotFound: true}
	}
	var v4, v6 famResult
	switch key.fams {
	case IPv4:
		v4 = r.ask(name, dnsmessage.TypeA)
	case IPv6:
		v6 = r.ask(name, dnsmessage.TypeAAAA)
	default:
		done := make(chan struct{})
		go func() {
			v6 = r.ask(name, dnsmessage.TypeAAAA)
			close(done)
		}()
		v4 = r.ask(name, dnsmessage.TypeA)
		<-done
	}
	var asked []famResult
	switch key.fams {
	case IPv4:
		asked = []famResult{v4}
	case IPv6:
		asked = []famResult{v6}
	default:
		asked = []famResult{v4, v6}
	}
	var failed error
	ttl := time.Duration(-1)
	negTTL := r.cfg.NegativeTTL
	for _, f := range asked {
		switch {
		case f.err != nil:
			failed = f.err
		case len(f.a.addrs) > 0:
			t := time.Duration(f.a.ttl) * time.Second
			if ttl < 0 || t < ttl {
				ttl = t
			}
		case f.a.soa:
			negTTL = min(negTTL, time.Duration(f.a.ttl)*time.Second)
		}
	}
	addrs := r.order(key.fams, v4.a.addrs, v6.a.addrs)
	if len(addrs) > 0 {
		if failed != nil {
			return addrs, 0, nil // a partial answer is used but not cached
		}
		return addrs, min(max(ttl, r.cfg.MinTTL), r.cfg.MaxTTL), nil
	}
	if failed != nil {
		return nil, 0, &net.DNSError{Err: ErrNoAnswer.Error() + " (" + failed.Error() + ")", Name: key.name, UnwrapErr: ErrNoAnswer}
	}
	return nil, negTTL, &net.DNSError{Err: "no such host", Name: key.name, IsNotFound: true}
}

// ask asks the servers in order for name's records of type t, each query
// bounded by the timeout, until one answers.
func (r *Resolver) ask(name dnsmessage.Name, t dnsmessage.Type) famResult {
	q := dnsmessage.Question{Name: name, Type: t, Class: dnsmessage.ClassINET}
	var last error
	for i := range r.cfg.Servers {
		srv := &r.cfg.Servers[i]
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout)
		t0 := time.Now()
		a, err := r.ex.exchange(ctx, srv, q, func(why error) {
			r.cfg.Metrics.Stray(i)
			r.cfg.Logger.Debug("dns: ignored a datagram that is no answer to the query",
				"resolver", srv.Label, "name", q.Name.String(), "type", q.Type.String(), "reason", why.Error())
		})
		cancel()
		r.cfg.Metrics.Query(i, time.Since(t0), err == nil)
		if err == nil {
			return famResult{a: a}
		}
		last = fmt.Errorf("%s: %w", srv.Label, err)
	}
	return famResult{err: last}
}

// order returns the addresses in the configured preference, in a new
// slice: IPv4 first for Prefer IPv4, IPv6 first otherwise; only those of
// fams.
func (r *Resolver) order(fams Family, v4, v6 []netip.Addr) []netip.Addr {
	switch fams {
	case IPv4:
		v6 = nil
	case IPv6:
		v4 = nil
	}
	out := make([]netip.Addr, 0, len(v4)+len(v6))
	if r.cfg.Prefer == IPv4 {
		return append(append(out, v4...), v6...)
	}
	return append(append(out, v6...), v4...)
}
