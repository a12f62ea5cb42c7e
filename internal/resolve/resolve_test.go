package resolve

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// clock is a settable test clock.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Now().UnixNano())
	return c
}
func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) advance(d time.Duration) { c.ns.Add(int64(d)) }

func servers(t *testing.T, urls ...string) []Server {
	t.Helper()
	var out []Server
	for _, u := range urls {
		s, err := ParseServer(u)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// newResolver returns a resolver for cfg, its settings left zero given
// the values rustle's configuration defaults them to (a 2s query
// timeout, a 1h max TTL, a 30s negative TTL, 10,000 names), closed by
// t.Cleanup.
func newResolver(t *testing.T, cfg Config) *Resolver {
	t.Helper()
	r, err := New(withDefaults(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// withDefaults returns cfg with its zero settings given rustle's
// configuration defaults (config.DNS).
func withDefaults(cfg Config) Config {
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	if cfg.MaxTTL == 0 {
		cfg.MaxTTL = time.Hour
	}
	if cfg.NegativeTTL == 0 {
		cfg.NegativeTTL = 30 * time.Second
	}
	if cfg.CacheSize == 0 {
		cfg.CacheSize = 10000
	}
	return cfg
}

// TestNewRefusesMissingSettings checks that New refuses the settings the
// configuration fills ([dns], config.SetDefaults) when they are left
// zero, instead of choosing values of its own (it used to default each
// of them, a second place for [dns]'s defaults).
func TestNewRefusesMissingSettings(t *testing.T) {
	srv := []Server{{Transport: UDP, Addr: "127.0.0.1:53", Label: "udp"}}
	good := withDefaults(Config{Servers: srv})
	for _, tt := range []struct {
		name   string
		modify func(c *Config)
		want   string
	}{
		{"all set", func(c *Config) {}, ""},
		{"no servers", func(c *Config) { c.Servers = nil }, "no servers"},
		{"no timeout", func(c *Config) { c.Timeout = 0 }, "query timeout 0s"},
		{"no max TTL", func(c *Config) { c.MaxTTL = 0 }, "max TTL 0s"},
		{"no negative TTL", func(c *Config) { c.NegativeTTL = 0 }, "negative TTL 0s"},
		{"no cache", func(c *Config) { c.CacheSize = 0 }, "cache size 0"},
		{"negative min TTL", func(c *Config) { c.MinTTL = -time.Second }, "min TTL -1s is negative"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.modify(&c)
			r, err := New(c)
			if r != nil {
				r.Close()
			}
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("New = %v; want an error with %q", err, tt.want)
			}
		})
	}
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// TestTransports resolves one name over each transport.
func TestTransports(t *testing.T) {
	dns := proxytest.NewDNSServer(t)
	dns.Set("www.example.com", 300, "192.0.2.10", "2001:db8::10")
	for _, tc := range []struct{ name, url string }{
		{"udp", "udp://" + dns.UDP},
		{"tcp", "tcp://" + dns.TCP},
		{"tls", "tls://" + dns.TLS},
		{"https", dns.HTTPS},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := dns.Asked("www.example.com")
			r := newResolver(t, Config{Servers: servers(t, tc.url), TLS: dns.ClientTLS})
			got, err := r.LookupNetIP(context.Background(), "ip", "WWW.example.com.")
			if err != nil {
				t.Fatal(err)
			}
			if want := addrs("2001:db8::10", "192.0.2.10"); !slices.Equal(got, want) {
				t.Fatalf("got %v, want %v", got, want)
			}
			if n := dns.Asked("www.example.com") - before; n != 2 {
				t.Fatalf("server asked %d questions, want 2 (A and AAAA)", n)
			}
		})
	}
}

// TestTruncatedFallsBackToTCP: a UDP answer with TC is asked again over
// TCP.
func TestTruncatedFallsBackToTCP(t *testing.T) {
	dns := proxytest.NewDNSServer(t)
	dns.Set("big.example.com", 300, "192.0.2.11")
	dns.SetMode(proxytest.DNSTruncate)
	r := newResolver(t, Config{Servers: servers(t, "udp://"+dns.UDP), Only: IPv4})
	got, err := r.LookupNetIP(context.Background(), "ip", "big.example.com")
	if err != nil || !slices.Equal(got, addrs("192.0.2.11")) {
		t.Fatalf("got %v, %v", got, err)
	}
	if n := dns.Asked("big.example.com"); n != 2 {
		t.Fatalf("asked %d, want 2 (UDP truncated, then TCP)", n)
	}
}

// TestCacheTTL: an answer is cached for its TTL, bounded by min_ttl and
// max_ttl; then asked again.
func TestCacheTTL(t *testing.T) {
	dns := proxytest.NewDNSServer(t)
	for _, tc := range []struct {
		name           string
		ttl            uint32
		minTTL, maxTTL time.Duration
		fresh, stale   time.Duration // still cached at fresh; asked again at stale
	}{
		{"ttl", 60, 0, time.Hour, 59 * time.Second, 61 * time.Second},
		{"min_ttl", 1, 30 * time.Second, time.Hour, 29 * time.Second, 31 * time.Second},
		{"max_ttl", 86400, 0, 10 * time.Second, 9 * time.Second, 11 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := tc.name + ".example.com"
			dns.Set(host, tc.ttl, "192.0.2.20")
			clk := newClock()
			r := newResolver(t, Config{Servers: servers(t, "udp://"+dns.UDP), MinTTL: tc.minTTL, MaxTTL: tc.maxTTL, Only: IPv4, now: clk.now})
			lookup := func() {
				t.Helper()
				if got, err := r.LookupNetIP(context.Background(), "ip", host); err != nil || !slices.Equal(got, addrs("192.0.2.20")) {
					t.Fatalf("got %v, %v", got, err)
				}
			}
			lookup()
			if n := dns.Asked(host); n != 1 {
				t.Fatalf("asked %d, want 1", n)
			}
			clk.advance(tc.fresh)
			lookup()
			if n := dns.Asked(host); n != 1 {
				t.Fatalf("after %v: asked %d, want 1 (cached)", tc.fresh, n)
			}
			clk.advance(tc.stale - tc.fresh)
			lookup()
			if n := dns.Asked(host); n != 2 {
				t.Fatalf("after %v: asked %d, want 2 (expired)", tc.stale, n)
			}
		})
	}
}

// TestNegativeCache: NXDOMAIN is cached for the SOA's negative TTL,
// bounded by negative_ttl.
func TestNegativeCache(t *testing.T) {
	dns := proxytest.NewDNSServer(t)
	dns.SetNegativeTTL(20)
	for _, tc := range []struct {
		name         string
		negTTL       time.Duration
		fresh, stale time.Duration
	}{
		{"soa", time.Minute, 19 * time.Second, 21 * time.Second},
		{"negative_ttl", 5 * time.Second, 4 * time.Second, 6 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := "missing-" + tc.name + ".example.com"
			clk := newClock()
			r := newResolver(t, Config{Servers: servers(t, "udp://"+dns.UDP), NegativeTTL: tc.negTTL, now: clk.now})
			lookup := func() {
				t.Helper()
				_, err := r.LookupNetIP(context.Background(), "ip", host)
				var de *net.DNSError
				if !errors.As(err, &de) || !de.IsNotFound {
					t.Fatalf("err = %v, want a not-found DNSError", err)
				}
			}
			lookup()
			if n := dns.Asked(host); n != 2 {
				t.Fatalf("asked %d, want 2", n)
			}
			clk.advance(tc.fresh)
			lookup()
			if n := dns.Asked(host); n != 2 {
				t.Fatalf("after %v: asked %d, want 2 (cached)", tc.fresh, n)
			}
			clk.advance(tc.stale - tc.fresh)
			lookup()
			if n := dns.Asked(host); n != 4 {
				t.Fatalf("after %v: asked %d, want 4 (expired)", tc.stale, n)
			}
		})
	}
}

// TestFailover: a server that times out, and one that answers SERVFAIL,
// are passed over for the next; when all fail the error wraps
// ErrNoAnswer and is not a timeout.
func TestFailover(t *testing.T) {
	dead := proxytest.NewDNSServer(t)
	dead.SetMode(proxytest.DNSDrop)
	sick := proxytest.NewDNSServer(t)
	sick.SetMode(proxytest.DNSServFail)
	good := proxytest.NewDNSServer(t)
	good.Set("www.example.com", 300, "192.0.2.30")
	m := metrics.New(metrics.Config{})
	urls := []string{"udp://" + dead.UDP, dead.HTTPS, "tcp://" + sick.TCP, "tls://" + good.TLS}
	labels := make([]string, len(urls))
	for i, s := range servers(t, urls...) {
		labels[i] = s.Label
	}
	r := newResolver(t, Config{Servers: servers(t, urls...), Timeout: 100 * time.Millisecond, TLS: good.ClientTLS, Only: IPv4,
		Metrics: m.DNS(labels)})
	got, err := r.LookupNetIP(context.Background(), "ip", "www.example.com")
	if err != nil || !slices.Equal(got, addrs("192.0.2.30")) {
		t.Fatalf("got %v, %v", got, err)
	}
	for i, want := range []float64{1, 1, 1, 0} {
		if n := proxytest.Metric(t, m, "rustle_dns_failures_total", "resolver", labels[i]); n != want {
			t.Errorf("failures of %s = %v, want %v", labels[i], n, want)
		}
		if n := proxytest.Metric(t, m, "rustle_dns_queries_total", "resolver", labels[i]); n != 1 {
			t.Errorf("queries of %s = %v, want 1", labels[i], n)
		}
	}

	r2 := newResolver(t, Config{Servers: servers(t, urls[:3]...), Timeout: 100 * time.Millisecond, Only: IPv4})
	_, err = r2.LookupNetIP(context.Background(), "ip", "www.example.com")
	var de *net.DNSError
	if !errors.As(err, &de) || !errors.Is(err, ErrNoAnswer) || de.IsTimeout || de.IsNotFound {
		t.Fatalf("err = %#v, want a DNSError wrapping ErrNoAnswer, neither timeout nor not-found", err)
	}
}

// TestPreferOnly orders and filters the families.
func TestPreferOnly(t *testing.T) {
	dns := proxytest.NewDNSServer(t)
	dns.Set("dual.example.com", 300, "192.0.2.40", "2001:db8::40")
	dns.Set("v6.example.com", 300, "2001:db8::41")
	for _, tc := range []struct {
		name          string
		prefer, only  Family
		network, host string
		want          []netip.Addr
		notFound      bool
	}{
		{"auto", Auto, Auto, "ip", "dual.example.com", addrs("2001:db8::40", "192.0.2.40"), false},
		{"prefer ipv4", IPv4, Auto, "ip", "dual.example.com", addrs("192.0.2.40", "2001:db8::40"), false},
		{"prefer ipv6", IPv6, Auto, "ip", "dual.example.com", addrs("2001:db8::40", "192.0.2.40"), false},
		{"only ipv4", Auto, IPv4, "ip", "dual.example.com", addrs("192.0.2.40"), false},
		{"only ipv6", Auto, IPv6, "ip", "dual.example.com", addrs("2001:db8::40"), false},
		{"only ipv4, v6-only name", Auto, IPv4, "ip", "v6.example.com", nil, true},
		{"only ipv4 asked ip6", Auto, IPv4, "ip6", "dual.example.com", nil, true},
		{"network ip4", Auto, Auto, "ip4", "dual.example.com", addrs("192.0.2.40"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newResolver(t, Config{Servers: servers(t, "udp://"+dns.UDP), Prefer: tc.prefer, Only: tc.only})
			got, err := r.LookupNetIP(context.Background(), tc.network, tc.host)
			if tc.notFound {
				var de *net.DNSError
				if !errors.As(err, &de) || !de.IsNotFound {
					t.Fatalf("got %v, %v; want not found", got, err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestCNAME follows an alias chain; the TTL is the chain's least.
func TestCNAME(t *testing.T) {
	dns := proxytest.NewDNSServer(t)
	dns.SetCNAME("alias.example.com", 5, "real.example.net")
	dns.Set("real.example.net", 300, "192.0.2.50")
	clk := newClock()
	r := newResolver(t, Config{Servers: servers(t, "tcp://"+dns.TCP), Only: IPv4, now: clk.now})
	got, err := r.LookupNetIP(context.Background(), "ip", "alias.example.com")
	if err != nil || !slices.Equal(got, addrs("192.0.2.50")) {
		t.Fatalf("got %v, %v", got, err)
	}
	clk.advance(6 * time.Second)
	r.LookupNetIP(context.Background(), "ip", "alias.example.com")
	if n := dns.Asked("alias.example.com"); n != 2 {
		t.Fatalf("asked %d, want 2: the CNAME's 5s TTL bounds the answer's", n)
	}
}

// TestHosts answers static entries without a query.
func TestHosts(t *testing.T) {
	dns := proxytest.NewDNSServer(t)
	r := newResolver(t, Config{Servers: servers(t, "udp://"+dns.UDP),
		Hosts: map[string][]netip.Addr{"Intranet.Example": addrs("192.0.2.60", "2001:db8::60")}})
	got, err := r.LookupNetIP(context.Background(), "ip4", "intranet.example.")
	if err != nil || !slices.Equal(got, addrs("192.0.2.60")) {
		t.Fatalf("got %v, %v", got, err)
	}
	if n := dns.Asked("intranet.example"); n != 0 {
		t.Fatalf("asked %d, want 0", n)
	}
}

// TestCoalesce: concurrent identical lookups send one query per family.
func TestCoalesce(t *testing.T) {
	dns := proxytest.NewDNSServer(t)
	dns.Set("busy.example.com", 300, "192.0.2.70")
	release := dns.Hold() // hold the first query until all have joined
	defer release()
	r := newResolver(t, Config{Servers: servers(t, "udp://"+dns.UDP), Only: IPv4, Timeout: 5 * time.Second})
	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := r.LookupNetIP(context.Background(), "ip", "busy.example.com")
			if err == nil && !slices.Equal(got, addrs("192.0.2.70")) {
				err = errors.New("wrong answer")
			}
			errs <- err
		}()
	}
	// No lookup can finish before the answer: wait until all are parked
	// on the one call in flight, then answer.
	waitJoined(t, r, n)
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if q := dns.Asked("busy.example.com"); q != 1 {
		t.Fatalf("%d identical lookups sent %d queries, want 1", n, q)
	}
}

// waitJoined waits until n lookups wait on calls in flight, and checks
// that they share one.
func waitJoined(t *testing.T, r *Resolver, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		inFlight, waiting := len(r.flight), 0
		for _, c := range r.flight {
			waiting += c.waiters
		}
		r.mu.Unlock()
		if waiting == n {
			if inFlight != 1 {
				t.Fatalf("%d calls in flight, want 1 for %d identical lookups", inFlight, n)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d lookups joined", waiting, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCacheSizeBound: the cache holds at most CacheSize names.
func TestCacheSizeBound(t *testing.T) {
	dns := proxytest.NewDNSServer(t)
	r := newResolver(t, Config{Servers: servers(t, "udp://"+dns.UDP), Only: IPv4, CacheSize: 3})
	for i := range 10 {
		host := string(rune('a'+i)) + ".example.com"
		dns.Set(host, 300, "192.0.2.80")
		if _, err := r.LookupNetIP(context.Background(), "ip", host); err != nil {
			t.Fatal(err)
		}
	}
	r.mu.RLock()
	n := len(r.cache)
	r.mu.RUnlock()
	if n != 3 {
		t.Fatalf("cache holds %d names, want 3", n)
	}
}

func TestParseServer(t *testing.T) {
	for _, tc := range []struct {
		in, label, addr string
		ok              bool
	}{
		{"udp://192.0.2.1", "udp://192.0.2.1", "192.0.2.1:53", true},
		{"tcp://[2001:db8::1]:5353", "tcp://[2001:db8::1]:5353", "[2001:db8::1]:5353", true},
		{"tls://dns.example", "tls://dns.example", "dns.example:853", true},
		{"https://u:secret@dns.example/dns-query?x=1", "https://dns.example/dns-query", "", true},
		{"https://dns.example", "", "", false},
		{"udp://u:p@192.0.2.1", "", "", false},
		{"udp://192.0.2.1/path", "", "", false},
		{"udp://192.0.2.1:0", "", "", false},
		{"quic://192.0.2.1", "", "", false},
		{"192.0.2.1", "", "", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			s, err := ParseServer(tc.in)
			if (err == nil) != tc.ok {
				t.Fatalf("err = %v, want ok %v", err, tc.ok)
			}
			if err != nil {
				if errContains(err, "secret") {
					t.Fatalf("error %q shows the password", err)
				}
				return
			}
			if s.Label != tc.label || s.Addr != tc.addr {
				t.Fatalf("got label %q addr %q, want %q %q", s.Label, s.Addr, tc.label, tc.addr)
			}
		})
	}
}

func errContains(err error, s string) bool {
	return err != nil && len(s) > 0 && contains(err.Error(), s)
}

func contains(a, b string) bool {
	for i := 0; i+len(b) <= len(a); i++ {
		if a[i:i+len(b)] == b {
			return true
		}
	}
	return false
}

// BenchmarkCacheHit: a cached lookup does not allocate.
func BenchmarkCacheHit(b *testing.B) {
	dns := proxytest.NewDNSServer(b)
	dns.Set("www.example.com", 3600, "192.0.2.90", "2001:db8::90")
	r, err := New(withDefaults(Config{Servers: []Server{{Transport: UDP, Addr: dns.UDP, Label: "udp"}}, Metrics: metrics.New(metrics.Config{}).DNS([]string{"udp"})}))
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	ctx := context.Background()
	if _, err := r.LookupNetIP(ctx, "ip", "www.example.com"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if _, err := r.LookupNetIP(ctx, "ip", "www.example.com"); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCacheHitAllocs pins the benchmark's promise in a test.
func TestCacheHitAllocs(t *testing.T) {
	dns := proxytest.NewDNSServer(t)
	dns.Set("www.example.com", 3600, "192.0.2.90")
	r := newResolver(t, Config{Servers: servers(t, "udp://"+dns.UDP), Metrics: metrics.New(metrics.Config{}).DNS([]string{"udp"})})
	ctx := context.Background()
	if _, err := r.LookupNetIP(ctx, "ip", "www.example.com"); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { r.LookupNetIP(ctx, "ip", "www.example.com") }); n != 0 {
		t.Fatalf("a cache hit allocates %v times, want 0", n)
	}
	if _, err := r.LookupNetIP(ctx, "ip", "gone.example.com"); err == nil {
		t.Fatal("want NXDOMAIN")
	}
	if n := testing.AllocsPerRun(100, func() { r.LookupNetIP(ctx, "ip", "gone.example.com") }); n != 0 {
		t.Fatalf("a negative cache hit allocates %v times, want 0", n)
	}
}

// spoofServer is a UDP DNS server on loopback that, for each query, first
// sends the datagrams spoofs makes of it and then the genuine answer: the
// A record 192.0.2.40 for the name asked.
func spoofServer(t *testing.T, spoofs func(t *testing.T, id uint16, q dnsmessage.Question) [][]byte) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { pc.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			var p dnsmessage.Parser
			h, err := p.Start(buf[:n])
			if err != nil {
				continue
			}
			q, err := p.Question()
			if err != nil {
				continue
			}
			for _, d := range spoofs(t, h.ID, q) {
				pc.WriteTo(d, from)
			}
			pc.WriteTo(dnsResponse(t, dnsmessage.Header{ID: h.ID, Response: true}, q, "192.0.2.40"), from)
		}
	}()
	return pc.LocalAddr().String()
}

// dnsResponse builds a message with header h, question q and, when a is
// set, an A record of a for q's name.
func dnsResponse(t *testing.T, h dnsmessage.Header, q dnsmessage.Question, a string) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, h)
	err := errors.Join(b.StartQuestions(), b.Question(q), b.StartAnswers())
	if a != "" {
		err = errors.Join(err, b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60},
			dnsmessage.AResource{A: netip.MustParseAddr(a).As4()}))
	}
	msg, ferr := b.Finish()
	if err = errors.Join(err, ferr); err != nil {
		t.Errorf("build response: %v", err)
	}
	return msg
}

// TestSpoofedAnswerIgnored: datagrams that know the query's port and ID
// but are no answer to its question (a query, another name, type or
// class, a malformed message), or that have another ID, however many, are
// ignored and counted: the genuine answer that follows within the timeout
// is used.
func TestSpoofedAnswerIgnored(t *testing.T) {
	spoofed := "203.0.113.66"
	other := func(q dnsmessage.Question, f func(*dnsmessage.Question)) dnsmessage.Question { f(&q); return q }
	for _, tc := range []struct {
		name   string
		spoofs func(t *testing.T, id uint16, q dnsmessage.Question) [][]byte
	}{
		{"query", func(t *testing.T, id uint16, q dnsmessage.Question) [][]byte {
			return [][]byte{dnsResponse(t, dnsmessage.Header{ID: id}, q, spoofed)} // QR=0
		}},
		{"another name", func(t *testing.T, id uint16, q dnsmessage.Question) [][]byte {
			return [][]byte{dnsResponse(t, dnsmessage.Header{ID: id, Response: true},
				other(q, func(q *dnsmessage.Question) { q.Name = dnsmessage.MustNewName("evil.example.") }), spoofed)}
		}},
		{"another type", func(t *testing.T, id uint16, q dnsmessage.Question) [][]byte {
			return [][]byte{dnsResponse(t, dnsmessage.Header{ID: id, Response: true},
				other(q, func(q *dnsmessage.Question) { q.Type = dnsmessage.TypeAAAA }), "")}
		}},
		{"another class", func(t *testing.T, id uint16, q dnsmessage.Question) [][]byte {
			return [][]byte{dnsResponse(t, dnsmessage.Header{ID: id, Response: true},
				other(q, func(q *dnsmessage.Question) { q.Class = dnsmessage.ClassCHAOS }), spoofed)}
		}},
		{"truncated for another name", func(t *testing.T, id uint16, q dnsmessage.Question) [][]byte {
			return [][]byte{dnsResponse(t, dnsmessage.Header{ID: id, Response: true, Truncated: true},
				other(q, func(q *dnsmessage.Question) { q.Name = dnsmessage.MustNewName("evil.example.") }), "")}
		}},
		{"malformed", func(t *testing.T, id uint16, q dnsmessage.Question) [][]byte {
			return [][]byte{{byte(id >> 8), byte(id), 0x81, 0x80, 0, 1}}
		}},
		{"flood of other IDs", func(t *testing.T, id uint16, q dnsmessage.Question) [][]byte {
			var out [][]byte
			for i := range 40 {
				out = append(out, dnsResponse(t, dnsmessage.Header{ID: id + 1 + uint16(i), Response: true}, q, spoofed))
			}
			return out
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var sent atomic.Int64
			addr := spoofServer(t, func(t *testing.T, id uint16, q dnsmessage.Question) [][]byte {
				s := tc.spoofs(t, id, q)
				sent.Store(int64(len(s)))
				return s
			})
			srvs := servers(t, "udp://"+addr)
			m := metrics.New(metrics.Config{})
			r := newResolver(t, Config{Servers: srvs, Timeout: 5 * time.Second, Only: IPv4, Metrics: m.DNS([]string{srvs[0].Label})})
			got, err := r.LookupNetIP(context.Background(), "ip", "www.example.com")
			if err != nil || !slices.Equal(got, addrs("192.0.2.40")) {
				t.Fatalf("got %v, %v; want the genuine answer 192.0.2.40", got, err)
			}
			if n := proxytest.Metric(t, m, "rustle_dns_failures_total"); n != 0 {
				t.Errorf("failures = %v, want 0", n)
			}
			if n := proxytest.Metric(t, m, "rustle_dns_stray_responses_total", "resolver", srvs[0].Label); n != float64(sent.Load()) {
				t.Errorf("stray responses = %v, want %d", n, sent.Load())
			}
		})
	}
}
