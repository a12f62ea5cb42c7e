package route

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"
)

// cmdUDPAssociate is SOCKS5's UDP ASSOCIATE command (RFC 1928 section 4).
const cmdUDPAssociate = 0x03

// ErrNoUDP is the cause of an Associate on an http or https parent: HTTP
// proxies have no way to carry UDP.
var ErrNoUDP = errors.New("an HTTP proxy cannot carry UDP")

// Association is a UDP association rustle holds with a SOCKS5 parent
// (UDP ASSOCIATE): datagrams sent to Relay with the RFC 1928 UDP header
// in front of them (RSV FRAG ATYP DST.ADDR DST.PORT) are relayed by the
// parent to DST, and its answers come back from Relay behind a header
// naming their source. The parent keeps the association while Control is
// open.
type Association struct {
	// Control is the TCP control connection; closing it ends the
	// association at the parent.
	Control net.Conn
	// Relay is the parent's UDP relay address: the address its reply
	// named, or the parent's own address when it named the unspecified
	// one.
	Relay netip.AddrPort
}

// Associate asks a socks5 or socks5h parent for a UDP association:
// connect, greet, authenticate, UDP ASSOCIATE with the client address
// left unspecified (the parent learns it from the first datagram), all
// within the parent's connect timeout or earlier with ctx. A parent that
// answers UDP ASSOCIATE with a failure (Dante without a udpassociate
// rule, a proxy that does not implement it: 0x07 command not supported)
// is an *Error of kind Refused with the reply code, which does not count
// against its health. An http or https parent is refused without a dial
// (ErrNoUDP). self is the rustle asking (see Instance; nil = the
// process's default). The health and observer learn the outcome as for
// Dial.
// Errors are *Error.
func (p *Parent) Associate(ctx context.Context, d Dialer, self *Instance) (*Association, error) {
	if p.scheme.IsHTTP() {
		return nil, &Error{Parent: p.name, Kind: Refused, Err: ErrNoUDP}
	}
	t0 := time.Now()
	var relay netip.AddrPort
	c, err := p.dial(ctx, d, self, func(c net.Conn) error {
		var err error
		relay, err = p.udpAssociate(c)
		return err
	})
	p.observe(t0, err)
	if err != nil {
		return nil, err
	}
	return &Association{Control: c, Relay: relay}, nil
}

// udpAssociate logs in and sends UDP ASSOCIATE on c, returning the
// relay's address.
func (p *Parent) udpAssociate(c net.Conn) (netip.AddrPort, error) {
	if err := p.socksLogin(c); err != nil {
		return netip.AddrPort{}, err
	}
	req := []byte{socksVersion, cmdUDPAssociate, 0, atypIPv4, 0, 0, 0, 0, 0, 0}
	if _, err := c.Write(req); err != nil {
		return netip.AddrPort{}, fmt.Errorf("send SOCKS5 UDP ASSOCIATE: %w", err)
	}
	rep, bnd, err := readSOCKS5Reply(c)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Parent = p.name
		}
		return netip.AddrPort{}, err
	}
	if rep != 0 {
		return netip.AddrPort{}, &Error{Parent: p.name, Kind: Refused, Code: int(rep), Err: fmt.Errorf("SOCKS5 UDP ASSOCIATE: %s", socksReplyText(rep))}
	}
	if !bnd.IsValid() || bnd.Port() == 0 {
		return netip.AddrPort{}, &Error{Parent: p.name, Kind: Protocol, Err: errors.New("SOCKS5 UDP ASSOCIATE answered without a relay address and port")}
	}
	if bnd.Addr().IsUnspecified() {
		// The relay is at the address the parent was reached on.
		ra, ok := c.RemoteAddr().(*net.TCPAddr)
		if !ok {
			return netip.AddrPort{}, &Error{Parent: p.name, Kind: Protocol, Err: errors.New("SOCKS5 UDP ASSOCIATE: unspecified relay address")}
		}
		bnd = netip.AddrPortFrom(ra.AddrPort().Addr(), bnd.Port())
	}
	return netip.AddrPortFrom(bnd.Addr().Unmap(), bnd.Port()), nil
}
