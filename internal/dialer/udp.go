package dialer

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
)

// DialUDP makes a UDP socket connected to host:port (host a name or an IP
// literal without brackets) for a flow of datagrams: it resolves host
// within the dial timeout, drops every address that p or the guard
// refuses, and connects to the first address left. When nothing is left
// it returns an [*Error] with Forbidden set. Errors are always *Error.
// The socket sends to that one address only: what passes through it is
// checked at the dial, and a front-end that wants every datagram checked
// again asks [Dialer.Check].
func (d *Dialer) DialUDP(ctx context.Context, host string, port uint16, p Permitter) (*net.UDPConn, error) {
	addr := net.JoinHostPort(host, strconv.Itoa(int(port)))
	// Only a lookup waits on the network, and only it has a timeout: a
	// UDP socket's connect does not wait, and it is made under a context
	// with no Done channel. ctx is a stream's for a CONNECT-UDP flow, and
	// lives as long as the flow: a child of it (a timeout's, or the net
	// package's wait for ctx) would leave it the Done channel and the
	// children's map it makes for the first child, and a stopped timer
	// stays in the runtime's timer heap, with its context, until the heap
	// is next cleaned.
	if err := ctx.Err(); err != nil {
		return nil, dialError(addr, err)
	}
	var ips []netip.Addr
	if ip, ok, err := ParseHost(host); err != nil {
		return nil, &Error{Addr: addr, Forbidden: true, Err: err}
	} else if ok {
		ips = []netip.Addr{ip}
	} else {
		lctx, lcancel := context.WithTimeout(ctx, d.timeout)
		ips, err = d.resolver.LookupNetIP(lctx, "ip", host)
		lcancel()
		if err != nil {
			return nil, dialError(addr, err)
		}
	}
	var refused error
	for _, ip := range ips {
		ap := netip.AddrPortFrom(ip.Unmap(), port)
		if err := d.check(ap, p); err != nil {
			if refused == nil {
				refused = fmt.Errorf("%w (%s)", err, ap.Addr())
			}
			continue
		}
		nd := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error { return SetMark(rc, d.mark) }}
		c, err := nd.DialContext(context.WithoutCancel(ctx), "udp", ap.String())
		if err != nil {
			return nil, dialError(addr, err)
		}
		return c.(*net.UDPConn), nil
	}
	if refused == nil {
		return nil, &Error{Addr: addr, Err: &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}}
	}
	return nil, &Error{Addr: addr, Forbidden: true, Err: refused}
}
