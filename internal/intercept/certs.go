package intercept

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Leaf certificates' lifetimes.
const (
	// leafLifetime is how long a minted leaf is valid from its minting
	// (and an hour before, for clients whose clocks are behind), capped
	// at the CA's own end.
	leafLifetime = 7 * 24 * time.Hour
	// leafRenew is how long before its end a cached leaf is minted anew.
	leafRenew = 2 * 24 * time.Hour
	// leafBackdate is how far before its minting a leaf is valid from.
	leafBackdate = time.Hour
)

// Certs mints the leaf certificates of intercepted tunnels, signed by a
// CA, and caches them: a bounded cache of the names most recently used
// (least recently used out first), shared by every worker, which mints
// a name's leaf anew once it is within two days of its end (leaves are
// valid seven days). Concurrent requests for a name not cached mint it
// once. Every leaf has the same ECDSA P-256 key, made with the Certs:
// minting is one signature, and a handshake one P-256 signature. It is
// safe for concurrent use.
type Certs struct {
	ca  *CA
	key *ecdsa.PrivateKey
	max int

	now func() time.Time // time.Now; tests move it

	mu       sync.Mutex
	entries  map[string]*leafEntry
	lru      leafEntry // the list's sentinel: lru.next is the most recently used
	inflight map[string]*minting

	hits, misses, evicted atomic.Uint64
}

// leafEntry is a cached leaf, in the LRU list.
type leafEntry struct {
	name       string
	cert       *tls.Certificate
	renewAt    time.Time
	prev, next *leafEntry
}

// minting is a leaf being minted, which other callers for its name wait
// for.
type minting struct {
	done chan struct{}
	cert *tls.Certificate
	err  error
}

// CertStats are a Certs' counts since it was made.
type CertStats struct {
	// Cached is the number of leaves in the cache.
	Cached int
	// Hits counts the leaves served from the cache; Misses those minted
	// (a name not cached, or due for renewal); Evicted the leaves the
	// bound pushed out.
	Hits, Misses, Evicted uint64
}

// NewCerts returns a Certs minting with ca that caches size leaves (at
// least 1).
func NewCerts(ca *CA, size int) (*Certs, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("intercept: generate the leaves' key: %w", err)
	}
	c := &Certs{ca: ca, key: key, max: max(size, 1), now: time.Now,
		entries: make(map[string]*leafEntry), inflight: make(map[string]*minting)}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c, nil
}

// CA returns the CA the leaves are signed by.
func (c *Certs) CA() *CA { return c.ca }

// Max returns the cache's bound.
func (c *Certs) Max() int { return c.max }

// Stats returns the cache's counts.
func (c *Certs) Stats() CertStats {
	c.mu.Lock()
	n := len(c.entries)
	c.mu.Unlock()
	return CertStats{Cached: n, Hits: c.hits.Load(), Misses: c.misses.Load(), Evicted: c.evicted.Load()}
}

// Get returns the leaf for name, a host name (ASCII, any case, a
// trailing dot ignored) or an IP address: from the cache, or minted. A
// name that is neither is an error.
func (c *Certs) Get(name string) (*tls.Certificate, error) {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	now := c.now()
	c.mu.Lock()
	if e := c.entries[name]; e != nil && now.Before(e.renewAt) {
		c.moveFront(e)
		cert := e.cert
		c.mu.Unlock()
		c.hits.Add(1)
		return cert, nil
	}
	if m := c.inflight[name]; m != nil {
		c.mu.Unlock()
		<-m.done
		return m.cert, m.err
	}
	m := &minting{done: make(chan struct{})}
	c.inflight[name] = m
	c.mu.Unlock()
	c.misses.Add(1)

	m.cert, m.err = c.mint(name, now)
	c.mu.Lock()
	delete(c.inflight, name)
	if m.err == nil {
		c.store(name, m.cert)
	}
	c.mu.Unlock()
	close(m.done)
	return m.cert, m.err
}

// store caches cert for name, evicting the least recently used leaf
// past the bound. c.mu is held.
func (c *Certs) store(name string, cert *tls.Certificate) {
	renew := cert.Leaf.NotAfter.Add(-leafRenew)
	if e := c.entries[name]; e != nil {
		e.cert, e.renewAt = cert, renew
		c.moveFront(e)
		return
	}
	e := &leafEntry{name: name, cert: cert, renewAt: renew}
	c.entries[name] = e
	c.pushFront(e)
	for len(c.entries) > c.max {
		old := c.lru.prev
		c.unlink(old)
		delete(c.entries, old.name)
		c.evicted.Add(1)
	}
}

func (c *Certs) pushFront(e *leafEntry) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}

func (c *Certs) unlink(e *leafEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *Certs) moveFront(e *leafEntry) {
	if c.lru.next == e {
		return
	}
	c.unlink(e)
	c.pushFront(e)
}

// mint makes the leaf for name, valid from an hour before now for
// leafLifetime, at most until the CA's end.
func (c *Certs) mint(name string, now time.Time) (*tls.Certificate, error) {
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-leafBackdate),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if end := c.ca.cert.NotAfter; tmpl.NotAfter.After(end) {
		tmpl.NotAfter = end
	}
	if ip, err := netip.ParseAddr(name); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else if validHostName(name) {
		tmpl.DNSNames = []string{name}
	} else {
		return nil, fmt.Errorf("intercept: mint a certificate: %q is neither a host name nor an IP address", name)
	}
	if len(name) > 64 {
		tmpl.Subject.CommonName = "" // the attribute's bound; the name is in the SAN
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.ca.cert, &c.key.PublicKey, c.ca.signer)
	if err != nil {
		return nil, fmt.Errorf("intercept: sign the certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("intercept: parse the certificate minted for %s: %w", name, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: c.key, Leaf: leaf}, nil
}

// validHostName reports whether s is a lower-case DNS name a
// certificate may name: labels of letters, digits, '-' and '_', at most
// 253 characters.
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
