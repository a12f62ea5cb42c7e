package route

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"

	"github.com/rustle-proxy/rustle/internal/dialer"
)

// maxReplyHead bounds an HTTP parent's answer to CONNECT.
const maxReplyHead = 8 << 10

// connectHTTP sends CONNECT for t with the parent's credentials, a Via
// field that ends with t.Self's element (after t.Via) and t.Header's
// field lines, and reads its answer. A parent that answers 508 (Loop
// Detected: a rustle that saw its own element) is an *Error of kind
// Looped.
func (p *Parent) connectHTTP(c net.Conn, t Target) error {
	host, err := p.hostOf(t)
	if err != nil {
		return err
	}
	hp := net.JoinHostPort(host, strconv.Itoa(int(t.Port)))
	req := make([]byte, 0, 160+len(hp)*2+len(p.auth)+len(t.Via)+len(t.Header))
	req = append(req, "CONNECT "...)
	req = append(req, hp...)
	req = append(req, " HTTP/1.1\r\nHost: "...)
	req = append(req, hp...)
	req = append(req, "\r\nVia: "...)
	if t.Via != "" {
		req = append(req, t.Via...)
		req = append(req, ", "...)
	}
	req = append(req, t.Self.ViaElement(1)...)
	if p.auth != "" {
		req = append(req, "\r\nProxy-Authorization: "...)
		req = append(req, p.auth...)
	}
	req = append(req, "\r\n"...)
	req = append(req, t.Header...)
	req = append(req, "\r\n"...)
	if _, err := c.Write(req); err != nil {
		return fmt.Errorf("send CONNECT: %w", err)
	}
	head, err := readHead(c, maxReplyHead)
	if err != nil {
		return fmt.Errorf("read CONNECT answer: %w", err)
	}
	status, err := ParseConnectReply(head)
	if err != nil {
		return &Error{Parent: p.name, Kind: Protocol, Err: err}
	}
	switch {
	case status/100 == 2:
		return nil
	case status == 407:
		return &Error{Parent: p.name, Kind: AuthFailed, Code: status, Err: errors.New("407 Proxy Authentication Required")}
	case status == 508:
		return &Error{Parent: p.name, Kind: Looped, Code: status, Err: fmt.Errorf("CONNECT %s answered 508 Loop Detected", hp)}
	}
	return &Error{Parent: p.name, Kind: Refused, Code: status, Err: fmt.Errorf("CONNECT %s answered %d", hp, status)}
}

// readHead reads an HTTP head from r up to its empty line and not a byte
// further, so that what the destination sends after the parent's answer
// stays in the connection. It reads a byte at a time (a CONNECT answer is
// a hundred bytes or so, once per tunnel).
func readHead(r io.Reader, limit int) ([]byte, error) {
	buf := make([]byte, 0, 256)
	var one [1]byte
	for len(buf) < limit {
		if _, err := io.ReadFull(r, one[:]); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		buf = append(buf, one[0])
		if one[0] == '\n' && (bytes.HasSuffix(buf, []byte("\r\n\r\n")) || bytes.HasSuffix(buf, []byte("\n\n"))) {
			return buf, nil
		}
	}
	return nil, fmt.Errorf("answer head longer than %d bytes", limit)
}

// ParseConnectReply parses an HTTP parent's answer head to CONNECT (up to
// and including its empty line) and returns its status code.
func ParseConnectReply(head []byte) (int, error) {
	line, _, ok := bytes.Cut(head, []byte("\n"))
	if !ok {
		return 0, errors.New("answer has no status line")
	}
	line = bytes.TrimSuffix(line, []byte("\r"))
	if !bytes.HasPrefix(line, []byte("HTTP/1.")) || len(line) < len("HTTP/1.x 200") || line[8] != ' ' {
		return 0, fmt.Errorf("answer %q is not an HTTP/1 status line", trimQuote(line))
	}
	if c := line[7]; c != '0' && c != '1' {
		return 0, fmt.Errorf("answer %q is not an HTTP/1 status line", trimQuote(line))
	}
	code := line[9:12]
	if len(line) > 12 && line[12] != ' ' {
		return 0, fmt.Errorf("answer %q has a malformed status", trimQuote(line))
	}
	n := 0
	for _, c := range code {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("answer %q has a malformed status", trimQuote(line))
		}
		n = n*10 + int(c-'0')
	}
	if n < 100 {
		return 0, fmt.Errorf("answer %q has a malformed status", trimQuote(line))
	}
	return n, nil
}

// trimQuote shortens b for an error message.
func trimQuote(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// SOCKS5 constants (RFC 1928, RFC 1929).
const (
	socksVersion    = 5
	methodNone      = 0x00
	methodUserPass  = 0x02
	methodNoAccept  = 0xff
	cmdConnect      = 0x01
	atypIPv4        = 0x01
	atypDomain      = 0x03
	atypIPv6        = 0x04
	userPassVersion = 0x01
)

// connectSOCKS5 greets the parent, authenticates with its user name and
// password when it has them, and asks it to CONNECT to t.
func (p *Parent) connectSOCKS5(c net.Conn, t Target) error {
	if err := p.socksLogin(c); err != nil {
		return err
	}
	req, err := p.socksRequest(t)
	if err != nil {
		return err
	}
	if _, err := c.Write(req); err != nil {
		return fmt.Errorf("send SOCKS5 CONNECT: %w", err)
	}
	rep, err := ReadSOCKS5Reply(c)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Parent = p.name
		}
		return err
	}
	if rep != 0 {
		return &Error{Parent: p.name, Kind: Refused, Code: int(rep), Err: fmt.Errorf("SOCKS5 CONNECT: %s", socksReplyText(rep))}
	}
	return nil
}

// socksLogin greets the parent and authenticates with its user name and
// password when it has them.
func (p *Parent) socksLogin(c net.Conn) error {
	method := byte(methodNone)
	if p.user != "" {
		method = methodUserPass
	}
	if _, err := c.Write([]byte{socksVersion, 1, method}); err != nil {
		return fmt.Errorf("send SOCKS5 greeting: %w", err)
	}
	var two [2]byte
	if _, err := io.ReadFull(c, two[:]); err != nil {
		return fmt.Errorf("read SOCKS5 method: %w", err)
	}
	if two[0] != socksVersion {
		return &Error{Parent: p.name, Kind: Protocol, Err: fmt.Errorf("SOCKS version %d in the method answer", two[0])}
	}
	if two[1] != method {
		return &Error{Parent: p.name, Kind: AuthFailed, Err: fmt.Errorf("SOCKS5 parent accepts none of the offered methods (offered %#x, got %#x)", method, two[1])}
	}
	if method == methodUserPass {
		msg := make([]byte, 0, 3+len(p.user)+len(p.pass))
		msg = append(msg, userPassVersion, byte(len(p.user)))
		msg = append(msg, p.user...)
		msg = append(msg, byte(len(p.pass)))
		msg = append(msg, p.pass...)
		if _, err := c.Write(msg); err != nil {
			return fmt.Errorf("send SOCKS5 credentials: %w", err)
		}
		if _, err := io.ReadFull(c, two[:]); err != nil {
			return fmt.Errorf("read SOCKS5 authentication status: %w", err)
		}
		if two[1] != 0 {
			return &Error{Parent: p.name, Kind: AuthFailed, Code: int(two[1]), Err: fmt.Errorf("SOCKS5 username/password refused (status %d)", two[1])}
		}
	}
	return nil
}

// socksRequest returns the CONNECT request for t: the address for a
// socks5 parent, the name for socks5h.
func (p *Parent) socksRequest(t Target) ([]byte, error) {
	host, err := p.hostOf(t)
	if err != nil {
		return nil, err
	}
	req := make([]byte, 0, 7+len(host))
	req = append(req, socksVersion, cmdConnect, 0)
	if ip, ok, _ := dialer.ParseHost(host); ok {
		ip = ip.Unmap()
		if ip.Is4() {
			req = append(req, atypIPv4)
		} else {
			req = append(req, atypIPv6)
		}
		req = append(req, ip.AsSlice()...)
	} else {
		if len(host) > 255 {
			return nil, fmt.Errorf("route: parent %s: host name longer than 255 bytes", p.name)
		}
		req = append(req, atypDomain, byte(len(host)))
		req = append(req, host...)
	}
	return append(req, byte(t.Port>>8), byte(t.Port)), nil
}

// ReadSOCKS5Reply reads a SOCKS5 reply (RFC 1928 section 6) from r, its
// bound address included and not a byte further, and returns its reply
// code (0 = succeeded). A reply that is not SOCKS5 is an *Error of kind
// Protocol (with no Parent set).
func ReadSOCKS5Reply(r io.Reader) (byte, error) {
	rep, _, err := readSOCKS5Reply(r)
	return rep, err
}

// readSOCKS5Reply is ReadSOCKS5Reply returning the bound address too (the
// zero AddrPort when the reply names a host).
func readSOCKS5Reply(r io.Reader) (byte, netip.AddrPort, error) {
	var bnd netip.AddrPort
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, bnd, fmt.Errorf("read SOCKS5 reply: %w", err)
	}
	if h[0] != socksVersion {
		return 0, bnd, &Error{Kind: Protocol, Err: fmt.Errorf("SOCKS version %d in the reply", h[0])}
	}
	var n int
	switch h[3] {
	case atypIPv4:
		n = 4
	case atypIPv6:
		n = 16
	case atypDomain:
		var l [1]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return 0, bnd, fmt.Errorf("read SOCKS5 reply: %w", err)
		}
		n = int(l[0])
	default:
		return 0, bnd, &Error{Kind: Protocol, Err: fmt.Errorf("SOCKS5 reply address type %d", h[3])}
	}
	var rest [255 + 2]byte
	if _, err := io.ReadFull(r, rest[:n+2]); err != nil {
		return 0, bnd, fmt.Errorf("read SOCKS5 reply: %w", err)
	}
	switch h[3] {
	case atypIPv4:
		bnd = netip.AddrPortFrom(netip.AddrFrom4([4]byte(rest[:4])), uint16(rest[4])<<8|uint16(rest[5]))
	case atypIPv6:
		bnd = netip.AddrPortFrom(netip.AddrFrom16([16]byte(rest[:16])), uint16(rest[16])<<8|uint16(rest[17]))
	}
	return h[1], bnd, nil
}

// socksReplyText names a SOCKS5 reply code.
func socksReplyText(rep byte) string {
	switch rep {
	case 1:
		return "general failure"
	case 2:
		return "connection not allowed by ruleset"
	case 3:
		return "network unreachable"
	case 4:
		return "host unreachable"
	case 5:
		return "connection refused"
	case 6:
		return "TTL expired"
	case 7:
		return "command not supported"
	case 8:
		return "address type not supported"
	}
	return "reply " + strconv.Itoa(int(rep))
}
