// Package resolve is rustle's own DNS stub resolver, used instead of the
// system's when the configuration has a [dns] table.
//
// A [Resolver] asks its configured servers in order — plain DNS over UDP
// (falling back to TCP for a truncated answer) or TCP, DNS over TLS
// (RFC 7858) and DNS over HTTPS (RFC 8484) — each query bounded by its
// own timeout, and moves on to the next server when one times out, cannot
// be reached, answers SERVFAIL or REFUSED, or answers something that is
// not an answer to the question. An authoritative "no such name"
// (NXDOMAIN) or "no such record" (NODATA) is an answer, not a failure.
// When every server failed the lookup fails with an error that wraps
// [ErrNoAnswer].
//
// Answers are cached for their TTL, bounded below by MinTTL and above by
// MaxTTL; negative answers for the SOA's negative TTL (RFC 2308), at most
// NegativeTTL. The cache holds at most CacheSize names. A cache hit takes
// a read lock and does not allocate. Concurrent lookups of one name that
// miss the cache share one set of queries. Static Hosts entries answer
// before the cache and are never queried.
//
// Addresses are returned in the order Prefer asks (IPv6 first for auto,
// as RFC 6724's default policy and RFC 8305 do); Only restricts lookups
// to one family. Messages are built and parsed with
// golang.org/x/net/dns/dnsmessage.
package resolve
