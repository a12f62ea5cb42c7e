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
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	var ips []netip.Addr
	if ip, ok, err := ParseHost(host); err != nil {
		return nil, &Error{Addr: addr, Forbidden: true, Err: err}
	} else if ok {
		ips = []netip.Addr{ip}
	} else {
		ips, err = d.resolver.LookupNetIP(ctx, "ip", host)
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
		c, err := nd.DialContext(ctx, "udp", ap.String())
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
