package config

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/internal/resolve"
)

// DNS configures rustle's own resolver. With no Resolvers (the zero
// value) host names are resolved by the system's resolver, as without a
// [dns] table.
type DNS struct {
	// Resolvers are the DNS servers, asked in order, the next when one
	// fails: "udp://host[:53]", "tcp://host[:53]", "tls://host[:853]"
	// (DNS over TLS) or "https://host[:443]/path" (DNS over HTTPS).
	// Empty means the system resolver, and then no other [dns] key but
	// the timeouts and bounds may be set.
	Resolvers []string `toml:"resolvers"`
	// Timeout bounds one query to one resolver; zero means 2s.
	Timeout Duration `toml:"timeout"`
	// MinTTL is the least time an answer is cached; zero means none (an
	// answer with TTL 0 is not cached).
	MinTTL Duration `toml:"min_ttl"`
	// MaxTTL is the most time an answer is cached; zero means 1h.
	MaxTTL Duration `toml:"max_ttl"`
	// NegativeTTL is the most time a negative answer (no such name, no
	// address of the family) is cached; zero means 30s.
	NegativeTTL Duration `toml:"negative_ttl"`
	// CacheSize bounds the names cached; 0 means 10000.
	CacheSize int `toml:"cache_size"`
	// Prefer is the family dialed first when a name has both: "ipv4",
	// "ipv6" or "auto" (IPv6 first); "" means "auto".
	Prefer string `toml:"prefer"`
	// Only restricts lookups to "ipv4" or "ipv6"; "" means both.
	Only string `toml:"only"`
	// Hosts are static entries, a name and its addresses, answered
	// without a query; nil means none.
	Hosts map[string][]string `toml:"hosts"`
	// CA is a PEM bundle of the CAs that sign tls:// and https://
	// resolvers' certificates; "" means the system's roots. [Load]
	// resolves a relative path against the configuration file's
	// directory.
	CA string `toml:"ca"`
}

// Enabled reports whether rustle resolves with its own resolver: some
// resolvers are configured.
func (d *DNS) Enabled() bool { return len(d.Resolvers) > 0 }

// Equal reports whether d and e configure the same resolver.
func (d *DNS) Equal(e *DNS) bool {
	return slices.Equal(d.Resolvers, e.Resolvers) && d.Timeout == e.Timeout && d.MinTTL == e.MinTTL &&
		d.MaxTTL == e.MaxTTL && d.NegativeTTL == e.NegativeTTL && d.CacheSize == e.CacheSize &&
		d.Prefer == e.Prefer && d.Only == e.Only && d.CA == e.CA &&
		maps.EqualFunc(d.Hosts, e.Hosts, slices.Equal)
}

// Defaults of the [dns] table.
const (
	defaultDNSTimeout     = 2 * time.Second
	defaultDNSMaxTTL      = time.Hour
	defaultDNSNegativeTTL = 30 * time.Second
	defaultDNSCacheSize   = 10000
)

// setDefaults fills the [dns] table's defaults.
func (d *DNS) setDefaults() {
	setDuration(&d.Timeout, defaultDNSTimeout)
	setDuration(&d.MaxTTL, defaultDNSMaxTTL)
	setDuration(&d.NegativeTTL, defaultDNSNegativeTTL)
	setInt(&d.CacheSize, defaultDNSCacheSize)
}

// HostAddrs returns the Hosts entries parsed, by lower-case name without
// a trailing dot. It is for a validated configuration: entries that do
// not parse are left out.
func (d *DNS) HostAddrs() map[string][]netip.Addr {
	if len(d.Hosts) == 0 {
		return nil
	}
	out := make(map[string][]netip.Addr, len(d.Hosts))
	for name, list := range d.Hosts {
		key := strings.ToLower(strings.TrimSuffix(name, "."))
		for _, s := range list {
			if a, err := netip.ParseAddr(s); err == nil {
				out[key] = append(out[key], a.Unmap())
			}
		}
	}
	return out
}

// validateDNS checks the [dns] table.
func (c *Config) validateDNS(v *validator) {
	d := &c.DNS
	for i, r := range d.Resolvers {
		if _, err := resolve.ParseServer(r); err != nil {
			v.add(fmt.Sprintf("dns.resolvers[%d]", i), errors.New(strings.TrimPrefix(err.Error(), "resolve: ")))
		}
	}
	v.positive("dns.timeout", d.Timeout)
	v.check(d.MinTTL.Duration >= 0, "dns.min_ttl", "%s is negative", d.MinTTL.Duration)
	v.positive("dns.max_ttl", d.MaxTTL)
	v.positive("dns.negative_ttl", d.NegativeTTL)
	v.check(d.MinTTL.Duration <= d.MaxTTL.Duration, "dns.min_ttl", "%s is more than max_ttl (%s)", d.MinTTL.Duration, d.MaxTTL.Duration)
	v.check(d.CacheSize > 0, "dns.cache_size", "%d is not positive", d.CacheSize)
	if d.Prefer != "" {
		v.oneOf("dns.prefer", d.Prefer, []string{"ipv4", "ipv6", "auto"})
	}
	if d.Only != "" {
		v.oneOf("dns.only", d.Only, []string{"ipv4", "ipv6"})
	}
	for _, name := range slices.Sorted(maps.Keys(d.Hosts)) {
		key := "dns.hosts." + name
		if !isHostname(name) {
			v.add("dns.hosts", fmt.Errorf("%q is not a host name", name))
			continue
		}
		if len(d.Hosts[name]) == 0 {
			v.addPath(key, []string{"dns", "hosts", name}, errors.New("lists no address"))
		}
		for j, a := range d.Hosts[name] {
			if _, err := netip.ParseAddr(a); err != nil {
				v.addPath(fmt.Sprintf("%s[%d]", key, j), []string{"dns", "hosts", name, indexElem(j)},
					fmt.Errorf("%q is not an IP address", a))
			}
		}
	}
	routed := slices.ContainsFunc(c.Routes, func(r Route) bool { return len(r.Resolvers) > 0 })
	if !d.Enabled() && !routed {
		for _, k := range []struct {
			key string
			set bool
		}{{"dns.prefer", d.Prefer != ""}, {"dns.only", d.Only != ""}, {"dns.hosts", len(d.Hosts) > 0}, {"dns.ca", d.CA != ""}} {
			v.check(!k.set, k.key, "needs dns.resolvers (or a route's resolvers): without them the system resolver is used")
		}
	}
}

// addPath is add for a key whose parts may hold dots (a host name): path
// locates it.
func (v *validator) addPath(key string, path []string, err error) {
	e := &Error{Key: key, Err: err}
	if v.c.src != "" {
		e.File, e.Line = v.c.src, v.c.lines[pathString(path)]
	}
	v.errs = append(v.errs, e)
}
