package httpproxy

import (
	"net"
	"net/netip"
	"strconv"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
)

// errTransparentConnect refuses a CONNECT on a transparent connection:
// its client believes it talks to the origin, and a proxy request there
// is a client that knows of a proxy, which it should then name.
var errTransparentConnect = http1.NewParseError(400, "CONNECT on a transparent connection: this is not a proxy port")

// ServeTransparent serves a connection that a transparent listener took
// and whose first bytes, still unread, begin an HTTP/1.x request, its
// client knowing of no proxy: each request, in
// origin-form ("GET /path"; absolute-form is taken too), is forwarded
// to orig, the connection's original destination, whatever its Host
// field names. The Host field's host is the name the rules, the routes
// and the access log see (see gate.Request.Original), and it goes to the
// origin as the client wrote it; the access log's target is the URL the
// Host and the path make. The exchange with the origin is the one every
// forwarded request has (package origin). c, sess and the ownership of
// c are as for ServeConn.
func (p *Proxy) ServeTransparent(c net.Conn, sess *gate.Session, orig netip.AddrPort) {
	p.serve(c, sess, nil, netip.AddrPortFrom(orig.Addr().Unmap(), orig.Port()), nil)
}

// transparentTarget fills r and cn.tgt for a request on a transparent
// connection: the destination is cn.orig, the name the Host field's
// host (or an absolute-form target's), the log's target the URL they
// make.
func (cn *conn) transparentTarget(r *gate.Request, isConnect bool) error {
	req := &cn.req
	r.Protocol, r.Log = acl.Transparent, accesslog.ProtoTransparent
	r.Original = cn.orig
	r.HelloRead, r.SNI = true, "" // plain HTTP: no ClientHello
	if isConnect {
		return errTransparentConnect
	}
	tgt := req.Target.Of(req.Buf)
	var authority []byte
	path := tgt
	if len(tgt) > 0 && tgt[0] != '/' && tgt[0] != '*' {
		if err := parseAbsoluteTarget(tgt, &cn.tgt); err != nil {
			return err
		}
		authority, path = cn.tgt.authority, cn.tgt.path
	} else if req.HostIdx >= 0 {
		authority = req.Fields[req.HostIdx].Value.Of(req.Buf)
	}
	name := ""
	if len(authority) > 0 {
		host, _, _, err := gate.ParseAuthority(authority, 80)
		if err != nil {
			return errBadAuthority
		}
		name = cn.internName(host)
	}
	// What is dialled, and what a parent is sent, is the original
	// destination; the Host field goes on as the client wrote it.
	cn.origBuf = cn.orig.AppendTo(cn.origBuf[:0])
	cn.tgt = target{authority: cn.origBuf, host: cn.origBuf[:len(cn.origBuf)-len(strconv.Itoa(int(cn.orig.Port())))-1],
		port: int(cn.orig.Port()), ipv6: cn.orig.Addr().Is6(), path: path}
	if cn.tgt.ipv6 {
		cn.tgt.host = cn.tgt.host[1 : len(cn.tgt.host)-1]
	}
	if len(authority) == 0 {
		authority = cn.origBuf
	}
	lt := append(cn.logTarget[:0], "http://"...)
	lt = append(lt, authority...)
	if len(path) > 0 && path[0] == '/' {
		lt = append(lt, path...)
	} else {
		lt = append(lt, '/')
	}
	cn.logTarget = lt
	r.Target = lt
	r.Host = name
	r.Addr, r.Port = cn.orig.Addr(), cn.orig.Port()
	return nil
}

// internName returns host as a string, reusing the last one while it
// repeats.
func (cn *conn) internName(host []byte) string {
	if string(host) != cn.hostStr {
		cn.hostStr = string(host)
	}
	return cn.hostStr
}
