// Package dialer connects rustle to upstreams: it dials with a timeout and
// the configured socket options, classifies failures so that callers can
// answer 502 or 504, and keeps idle keep-alive connections per origin in a
// Pool shared by all client connections.
//
// With a [Guard], a Dialer resolves host names itself and connects only to
// addresses it has checked: private, local and reserved addresses and the
// proxy's own listening addresses are refused (answered 403 by a proxy)
// unless an exception allows them, and the address checked is the address
// dialed, so a second DNS answer cannot slip past the check.
//
// A dial may carry [Options], the choices a route makes: the [Resolver]
// that resolves its host (rustle's own, see package resolve, or the
// system's) and the [Source] its connection comes from (fixed addresses,
// an address from a prefix per connection or per session key, the
// address the client reached, an interface). The destination's address
// family decides the source's; a destination with no address of a family
// the source has is refused with [ErrNoSource], never dialed from another
// address.
package dialer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// Config configures a Dialer.
type Config struct {
	// Timeout bounds name resolution and connection set-up together;
	// required (timeouts.connect).
	Timeout time.Duration
	// SocketBufferBytes sets SO_SNDBUF and SO_RCVBUF on dialed sockets.
	// 0 = kernel autotuning.
	SocketBufferBytes int
	// Guard refuses private destinations and the proxy's own addresses;
	// nil = no such check (and names are resolved by net.Dialer).
	Guard *Guard
	// Resolver resolves host names; nil = net.DefaultResolver, and
	// then, without a Guard or a dial's policy or options, names are
	// resolved by net.Dialer. A dial's Options may name another.
	Resolver Resolver
	// Mark is the firewall mark (SO_MARK, see SetMark) of every socket
	// the dialer makes, TCP and UDP; 0 = none.
	Mark uint32
}

// Resolver resolves host names, as [net.Resolver.LookupNetIP] does
// (network "ip", "ip4" or "ip6"); *net.Resolver and *resolve.Resolver
// implement it. The slice returned is not modified.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options are one dial's choices beyond the dialer's own, which a route
// (or the listener and user, see gate) makes. The zero Options changes
// nothing.
type Options struct {
	// Resolver resolves the host; nil = the dialer's.
	Resolver Resolver
	// Source chooses the connection's source address and interface;
	// nil = the kernel's choice.
	Source *Source
	// Key is the session key: connections with one key take one address
	// from a Source's prefix (and one of its addresses); "" = each
	// connection its own.
	Key string
	// Reached is the address the client connected to, the source of a
	// bind_same Source.
	Reached netip.Addr
}

// Dialer dials upstream TCP connections.
type Dialer struct {
	nd       net.Dialer
	timeout  time.Duration
	guard    *Guard
	resolver Resolver
	custom   bool // resolver is not the system's: resolve always
	buffers  int  // SO_SNDBUF and SO_RCVBUF; 0 = autotuning
	mark     uint32
}

// Permitter decides, for one dial, whether each address the destination
// resolved to may be connected to; *acl.Decision implements it.
type Permitter interface {
	// Permit reports whether ip may be dialed, and whether it may be even
	// though the guard refuses it as private.
	Permit(ip netip.Addr) (ok, private bool)
}

// fallbackDelay is how long the first address family gets before the
// other is tried in parallel (RFC 8305's Happy Eyeballs, as net.Dialer).
const fallbackDelay = 300 * time.Millisecond

// minAttempt is the least time one address of several gets, when the
// timeout allows it.
const minAttempt = 2 * time.Second

// New returns a Dialer for cfg.
func New(cfg Config) (*Dialer, error) {
	if cfg.Timeout <= 0 {
		return nil, fmt.Errorf("dialer: connect timeout %v is not positive", cfg.Timeout)
	}
	if cfg.SocketBufferBytes < 0 {
		return nil, fmt.Errorf("dialer: socket buffer size %d is negative", cfg.SocketBufferBytes)
	}
	d := &Dialer{nd: net.Dialer{
		Timeout:   cfg.Timeout,
		KeepAlive: -1, // rustle bounds idle connections with its own timeouts
	}, timeout: cfg.Timeout, guard: cfg.Guard, resolver: cfg.Resolver, custom: cfg.Resolver != nil,
		buffers: cfg.SocketBufferBytes, mark: cfg.Mark}
	if d.resolver == nil {
		d.resolver = net.DefaultResolver
	}
	if n, mark := cfg.SocketBufferBytes, cfg.Mark; n > 0 || mark != 0 {
		d.nd.Control = func(_, _ string, rc syscall.RawConn) error {
			if n > 0 {
				if err := SetBuffers(rc, n); err != nil {
					return err
				}
			}
			return SetMark(rc, mark)
		}
	}
	return d, nil
}

// Resolver returns the resolver the dialer resolves host names with: the
// configured one, or net.DefaultResolver.
func (d *Dialer) Resolver() Resolver { return d.resolver }

// Error is a failed dial. Timeout is set when the connect timeout (or the
// caller's deadline) expired, which a proxy answers with 504; Forbidden
// when every address was refused by the guard or the policy (Err wraps
// ErrPrivate, ErrOwnAddress or ErrDenied), which a proxy answers with 403;
// other failures are answered with 502. DNS is set when the host could
// not be resolved (no such name, or no resolver answered): a 502, never a
// timeout, whatever the resolvers' timeouts were.
type Error struct {
	Addr      string
	Timeout   bool
	Forbidden bool
	DNS       bool
	Err       error
}

func (e *Error) Error() string {
	return fmt.Sprintf("dialer: dial upstream %s: %v", e.Addr, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Reason is a one-line, client-safe description of the failure, for the
// body of a 502 or 504 answer; a cause with a Reason method (a parent
// proxy's failure, see package route) gives its own.
func (e *Error) Reason() string {
	var dnsErr *net.DNSError
	var own interface{ Reason() string }
	switch {
	case errors.As(e.Err, &own):
		// A cause with a client-safe reason of its own: a parent proxy's
		// failure.
		return own.Reason()
	case errors.Is(e.Err, ErrOwnAddress):
		return "destination " + e.Addr + " is this proxy"
	case errors.Is(e.Err, ErrPrivate):
		return "destination " + e.Addr + " is a private or local address"
	case e.Forbidden:
		return "destination " + e.Addr + " is not allowed"
	case errors.Is(e.Err, ErrNoSource):
		return "no source address of the address family of " + e.Addr + " is configured"
	case e.Timeout:
		return "connect to " + e.Addr + " timed out"
	case errors.As(e.Err, &dnsErr):
		if dnsErr.IsNotFound {
			return "cannot resolve " + dnsErr.Name + ": no such host"
		}
		var na interface{ NoAnswer() bool }
		if errors.As(dnsErr, &na) && na.NoAnswer() { // resolve.ErrNoAnswer
			return "cannot resolve " + dnsErr.Name + ": no DNS resolver answered"
		}
		return "cannot resolve " + dnsErr.Name
	case errors.Is(e.Err, syscall.ECONNREFUSED):
		return "connection to " + e.Addr + " refused"
	case errors.Is(e.Err, syscall.ENETUNREACH), errors.Is(e.Err, syscall.EHOSTUNREACH):
		return e.Addr + " is unreachable"
	}
	return "cannot connect to " + e.Addr
}

// Dial connects to addr ("host:port", IPv6 literals in brackets), with the
// guard's checks and no policy; see DialPermit.
func (d *Dialer) Dial(ctx context.Context, addr string) (*net.TCPConn, error) {
	return d.DialPermit(ctx, addr, nil)
}

// DialPermit connects to addr ("host:port", IPv6 literals in brackets).
// With a guard, or a non-nil p, it resolves the host itself, drops every
// address that p or the guard refuses, and connects to the addresses left,
// the first address family first and the other after fallbackDelay. When
// nothing is left it returns an [*Error] with Forbidden set. Errors are
// always *Error.
func (d *Dialer) DialPermit(ctx context.Context, addr string, p Permitter) (*net.TCPConn, error) {
	return d.DialOptions(ctx, addr, p, nil)
}

// DialOptions is DialPermit with o's choices (nil = none): o's resolver
// resolves the host, and o's source gives each connection its source
// address, of the destination address's family: addresses of a family
// the source has no address of are dropped after the guard's checks, and
// when none is left the dial fails with ErrNoSource.
func (d *Dialer) DialOptions(ctx context.Context, addr string, p Permitter, o *Options) (*net.TCPConn, error) {
	res, custom := d.resolver, d.custom
	if o != nil && o.Resolver != nil {
		res, custom = o.Resolver, true
	}
	if o != nil && o.Source == nil && o.Resolver == nil {
		o = nil
	}
	if d.guard == nil && p == nil && !custom && o == nil {
		c, err := d.nd.DialContext(ctx, "tcp", addr)
		if err != nil {
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) {
				return nil, &Error{Addr: addr, DNS: true, Err: err}
			}
			return nil, dialError(addr, err)
		}
		return c.(*net.TCPConn), nil
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	addrs, err := d.resolve(ctx, addr, p, res, o)
	if err != nil {
		return nil, err
	}
	c, err := d.dialAddrs(ctx, addrs, o)
	if err != nil {
		return nil, dialError(addr, err)
	}
	return c, nil
}

// DialTrusted connects to addr ("host:port"), an address the operator
// configured (a parent proxy), with the dialer's timeout and socket
// options but without the guard: a parent on loopback or a private
// network is the operator's choice, not a client's. Errors are *Error.
func (d *Dialer) DialTrusted(ctx context.Context, addr string) (*net.TCPConn, error) {
	c, err := d.nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, dialError(addr, err)
	}
	return c.(*net.TCPConn), nil
}

// Resolve returns the addresses addr ("host:port") may be connected to
// under the guard and p, as DialPermit would try them: for a caller that
// hands the connection to someone else (a SOCKS5 parent proxy given the
// address rustle resolved and checked). It fails as DialPermit would, with
// an [*Error], when nothing is left.
func (d *Dialer) Resolve(ctx context.Context, addr string, p Permitter) ([]netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	return d.resolve(ctx, addr, p, d.resolver, nil)
}

// resolve resolves addr's host with res and returns the addresses the
// guard, p and o's source leave, in the order dialAddrs tries them.
func (d *Dialer) resolve(ctx context.Context, addr string, p Permitter, res Resolver, o *Options) ([]netip.AddrPort, error) {
	host, port, err := SplitHostPort(addr)
	if err != nil {
		return nil, &Error{Addr: addr, Err: err}
	}
	var ips []netip.Addr
	if ip, ok, err := ParseHost(host); err != nil {
		return nil, &Error{Addr: addr, Forbidden: true, Err: err}
	} else if ok {
		ips = []netip.Addr{ip}
	} else {
		ips, err = res.LookupNetIP(ctx, "ip", host)
		if err != nil {
			return nil, &Error{Addr: addr, DNS: true, Err: err}
		}
	}
	addrs := make([]netip.AddrPort, 0, len(ips))
	var refused error
	for _, ip := range ips {
		ap := netip.AddrPortFrom(ip.Unmap(), port)
		if err := d.check(ap, p); err != nil {
			if refused == nil {
				refused = fmt.Errorf("%w (%s)", err, ap.Addr())
			}
			continue
		}
		addrs = append(addrs, ap)
	}
	if len(addrs) == 0 {
		if refused == nil {
			refused = &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
			return nil, &Error{Addr: addr, DNS: true, Err: refused}
		}
		return nil, &Error{Addr: addr, Forbidden: true, Err: refused}
	}
	if o != nil && o.Source != nil && o.Source.Restricts() {
		kept := addrs[:0]
		first := addrs[0].Addr()
		for _, a := range addrs {
			if o.Source.serves(a.Addr(), o.Reached) {
				kept = append(kept, a)
			}
		}
		if len(kept) == 0 {
			fam := "IPv4"
			if !first.Is4() {
				fam = "IPv6"
			}
			return nil, &Error{Addr: addr, Err: fmt.Errorf("%w: %s resolves to %s addresses only (%s)", ErrNoSource, host, fam, first)}
		}
		addrs = kept
	}
	return addrs, nil
}

// Check applies the guard and p to the remote address of a connection made
// for another request (a pooled one) before it is reused: nil, or the
// error a dial to ap would have been refused with.
func (d *Dialer) Check(ap netip.AddrPort, p Permitter) error {
	if d.guard == nil && p == nil {
		return nil
	}
	return d.check(netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), p)
}

func (d *Dialer) check(ap netip.AddrPort, p Permitter) error {
	ok, private := true, false
	if p != nil {
		ok, private = p.Permit(ap.Addr())
	}
	if !ok {
		return ErrDenied
	}
	if d.guard != nil {
		return d.guard.Check(ap, private)
	}
	return nil
}

// dialError wraps a failed resolution or connection.
func dialError(addr string, err error) *Error {
	var ne net.Error
	timeout := errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
	return &Error{Addr: addr, Timeout: timeout, Err: err}
}

// dialAddrs connects to one of addrs: those of the first address's family
// in turn, and after fallbackDelay (or as soon as they have all failed)
// those of the other family in parallel. It returns the first connection
// made and closes any other.
func (d *Dialer) dialAddrs(ctx context.Context, addrs []netip.AddrPort, o *Options) (*net.TCPConn, error) {
	var primaries, fallbacks []netip.AddrPort
	for _, a := range addrs {
		if a.Addr().Is4() == addrs[0].Addr().Is4() {
			primaries = append(primaries, a)
		} else {
			fallbacks = append(fallbacks, a)
		}
	}
	if len(fallbacks) == 0 {
		return d.dialSerial(ctx, primaries, o)
	}
	type result struct {
		c       *net.TCPConn
		err     error
		primary bool
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	results := make(chan result, 2)
	start := func(list []netip.AddrPort, primary bool) {
		go func() {
			c, err := d.dialSerial(ctx, list, o)
			results <- result{c, err, primary}
		}()
	}
	start(primaries, true)
	running, fallbackStarted := 1, false
	timer := time.NewTimer(fallbackDelay)
	defer timer.Stop()
	var firstErr error
	for running > 0 {
		select {
		case <-timer.C:
			if !fallbackStarted {
				fallbackStarted = true
				start(fallbacks, false)
				running++
			}
		case r := <-results:
			running--
			if r.err == nil {
				cancel()
				for ; running > 0; running-- {
					if o := <-results; o.c != nil {
						o.c.Close()
					}
				}
				return r.c, nil
			}
			if firstErr == nil || r.primary {
				firstErr = r.err
			}
			if !fallbackStarted {
				fallbackStarted = true
				start(fallbacks, false)
				running++
			}
		}
	}
	return nil, firstErr
}

// dialSerial tries addrs in turn, giving each an even share of the time
// left (at least minAttempt when there is that much).
func (d *Dialer) dialSerial(ctx context.Context, addrs []netip.AddrPort, o *Options) (*net.TCPConn, error) {
	var firstErr error
	for i, a := range addrs {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if dl, ok := ctx.Deadline(); ok && len(addrs)-i > 1 {
			left := time.Until(dl)
			share := left / time.Duration(len(addrs)-i)
			if share < minAttempt {
				share = min(minAttempt, left)
			}
			actx, cancel = context.WithTimeout(ctx, share)
		}
		c, err := d.dialOne(actx, a, o)
		cancel()
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

// dialOne connects to a, from the source o chooses.
func (d *Dialer) dialOne(ctx context.Context, a netip.AddrPort, o *Options) (*net.TCPConn, error) {
	if o == nil || o.Source == nil {
		c, err := d.nd.DialContext(ctx, "tcp", a.String())
		if err != nil {
			return nil, err
		}
		return c.(*net.TCPConn), nil
	}
	src := o.Source
	local, freebind := src.pick(a.Addr(), o.Key, o.Reached)
	nd := d.nd
	if local.IsValid() {
		nd.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
	}
	if freebind || src.device != "" {
		buffers, device, mark := d.buffers, src.device, d.mark
		nd.Control = func(network, _ string, rc syscall.RawConn) error {
			if buffers > 0 {
				if err := SetBuffers(rc, buffers); err != nil {
					return err
				}
			}
			if err := SetMark(rc, mark); err != nil {
				return err
			}
			if err := setEgress(rc, strings.HasSuffix(network, "6"), freebind, device); err != nil {
				return fmt.Errorf("dialer: source %s, interface %q: %w", local, device, err)
			}
			return nil
		}
	}
	c, err := nd.DialContext(ctx, "tcp", a.String())
	if err != nil {
		return nil, err
	}
	return c.(*net.TCPConn), nil
}

// SetBuffers sets SO_SNDBUF and SO_RCVBUF to n bytes on a socket.
func SetBuffers(rc syscall.RawConn, n int) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		if e := setsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF, n); e != nil {
			serr = e
			return
		}
		serr = setsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("dialer: set socket buffers to %d: %w", n, serr)
	}
	return nil
}
