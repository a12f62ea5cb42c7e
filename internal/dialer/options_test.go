package dialer

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// mapResolver answers from a map; a name it lacks is an error err.
type mapResolver struct {
	names map[string][]netip.Addr
	err   error
	asked []string
}

func (r *mapResolver) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	r.asked = append(r.asked, host)
	if a, ok := r.names[host]; ok {
		return a, nil
	}
	return nil, r.err
}

// noAnswer marks an error as resolve.ErrNoAnswer does.
type noAnswer struct{}

func (noAnswer) Error() string  { return "no resolver answered" }
func (noAnswer) NoAnswer() bool { return true }

// TestDialResolver: the configured resolver is asked (and a dial's own
// resolver before it), its answers go through the guard, and its
// failures are DNS errors: 502 reasons, never timeouts.
func TestDialResolver(t *testing.T) {
	ln := listen(t)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	lo := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	res := &mapResolver{names: map[string][]netip.Addr{"origin.test": lo, "www.example.com": lo},
		err: &net.DNSError{Err: "no resolver answered", Name: "x", IsTimeout: true, UnwrapErr: noAnswer{}}}

	d := newDialer(t, Config{Timeout: 10 * time.Second, Resolver: res})
	c, err := d.Dial(context.Background(), "origin.test:"+port)
	if err != nil {
		t.Fatalf("Dial through the resolver: %v", err)
	}
	c.Close()
	if len(res.asked) != 1 || res.asked[0] != "origin.test" {
		t.Fatalf("resolver asked %v", res.asked)
	}

	_, err = d.Dial(context.Background(), "gone.test:"+port)
	var de *Error
	if !errors.As(err, &de) || !de.DNS || de.Timeout || !strings.Contains(de.Reason(), "no DNS resolver answered") {
		t.Fatalf("a failed lookup: %#v (reason %q), want a DNS error, not a timeout", err, de.Reason())
	}

	guarded := newDialer(t, Config{Timeout: 10 * time.Second, Resolver: res, Guard: NewGuard(nil)})
	_, err = guarded.Dial(context.Background(), "www.example.com:"+port)
	if !errors.As(err, &de) || !de.Forbidden || !errors.Is(err, ErrPrivate) {
		t.Fatalf("a private answer for a public name: %v, want ErrPrivate", err)
	}

	own := &mapResolver{names: map[string][]netip.Addr{"route.test": lo}}
	c, err = d.DialOptions(context.Background(), "route.test:"+port, nil, &Options{Resolver: own})
	if err != nil {
		t.Fatalf("a dial's own resolver: %v", err)
	}
	c.Close()
	if len(own.asked) != 1 || len(res.asked) != 3 {
		t.Fatalf("the dial's resolver asked %v, the dialer's %v", own.asked, res.asked)
	}
}

// TestDialSource: the source's address of the destination's family is
// the connection's local address; a destination of no family the source
// has fails with ErrNoSource.
func TestDialSource(t *testing.T) {
	ln := listen(t)
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	res := &mapResolver{names: map[string][]netip.Addr{
		"dual.test": {netip.MustParseAddr("::1"), netip.MustParseAddr("127.0.0.1")},
		"v6.test":   {netip.MustParseAddr("::1")},
	}}
	d := newDialer(t, Config{Timeout: 10 * time.Second, Resolver: res})
	src4, err := NewSource(SourceConfig{Bind: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.DialOptions(context.Background(), "dual.test:"+port, nil, &Options{Source: src4})
	if err != nil {
		t.Fatalf("dual-stack destination, IPv4 source: %v", err)
	}
	if got := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap(); got != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("local address %v, want 127.0.0.1", got)
	}
	c.Close()

	_, err = d.DialOptions(context.Background(), "v6.test:"+port, nil, &Options{Source: src4})
	var de *Error
	if !errors.As(err, &de) || !errors.Is(err, ErrNoSource) || de.Timeout || de.Forbidden || de.DNS {
		t.Fatalf("IPv6-only destination, IPv4 source: %v, want ErrNoSource", err)
	}
	if !strings.Contains(de.Reason(), "no source address") {
		t.Errorf("Reason() = %q", de.Reason())
	}
}
