package gate

import (
	"net/netip"
	"strconv"
	"strings"
)

// destination is a request's destination as Authorize was given it
// (Request.Host or Request.Addr, and Request.Port), and the host:port the
// grant joins from it once, for what takes a string: the dialer, a
// parent, the errors and log lines that name it (see Grant.dest); a
// CONNECT-UDP flow's socket is made for host and port as they are
// (DialUDP).
type destination struct {
	host string     // Request.Host; "" when the destination is addr
	addr netip.Addr // Request.Addr
	port uint16

	joined   bool   // hostPort and name are this request's
	hostPort string // the join (AppendDest's); kept from request to request, and reused while it is the same
	name     string // hostPort's host, without brackets: a substring of hostPort
	buf      []byte // where the join is made; kept from request to request
}

// AppendDest appends to dst the request's destination as host:port, the
// way the grant dials it, checks it, sends it to a parent and the shared
// pool keys its connections: [AppendHostPort] of Request.Host and
// Request.Port (an IPv6 literal in brackets, a name in lower case, an
// IPv4 address in dotted decimal), or, for a destination given as
// Request.Addr, that address and port. It allocates nothing beyond dst's
// growth. It is valid once Authorize granted the request.
func (g *Grant) AppendDest(dst []byte) []byte {
	dst, _, _ = g.dst.appendTo(dst)
	return dst
}

// appendTo appends the join of d to dst, and returns where its host,
// without brackets, lies in the result.
func (d *destination) appendTo(dst []byte) (b []byte, start, end int) {
	if d.host == "" && d.addr.IsValid() {
		b = dst
		if d.addr.Is6() {
			b = append(b, '[')
		}
		start = len(b)
		b = d.addr.AppendTo(b)
		end = len(b)
		if d.addr.Is6() {
			b = append(b, ']')
		}
	} else {
		b, start, end = appendHost(dst, d.host, strings.IndexByte(d.host, ':') >= 0)
	}
	b = append(b, ':')
	return strconv.AppendUint(b, uint64(d.port), 10), start, end
}

// dest returns the request's destination as AppendDest spells it, and
// its host without brackets: the name a route picks a parent by and a
// parent is sent. The strings are made once per request, and not at all
// when the destination is the previous request's.
func (g *Grant) dest() (hostPort, host string) {
	d := &g.dst
	if !d.joined {
		b, start, end := d.appendTo(d.buf[:0])
		d.buf = b
		if string(b) != d.hostPort {
			d.hostPort = string(b)
		}
		d.name = d.hostPort[start:end]
		d.joined = true
	}
	return d.hostPort, d.name
}

// setDest notes r's destination for the grant's dials.
func (g *Grant) setDest(r *Request) {
	d := &g.dst
	d.host, d.addr, d.port, d.joined = r.Host, r.Addr, r.Port, false
	if o := r.Original; o.IsValid() {
		// A transparent request goes where its client was going, never
		// where a name it gave leads.
		g.original = netip.AddrPortFrom(o.Addr().Unmap(), o.Port())
		d.host, d.addr, d.port = "", g.original.Addr(), o.Port()
	}
}

// keep returns d as reset keeps it for the grant's next request: the
// join and its buffer, for reuse.
func (d *destination) keep() destination {
	return destination{hostPort: d.hostPort, buf: d.buf[:0]}
}
