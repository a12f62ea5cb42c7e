package httpproxy

import (
	"errors"
	"net"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
)

const crlf = "\r\n"

// buildRequestHead writes into cn.out the head forwarded upstream for
// cn.req: the request line in origin-form (absolute-form to an HTTP
// parent, cn.fwd, with the parent's Proxy-Authorization at the end), the
// client's header lines in their order and case less the hop-by-hop ones, Host set to the target's
// authority, the Forwarded and Via headers the configuration asks for (a
// Via naming this rustle to a parent, always), and a TRACE's or
// OPTIONS's Max-Forwards one less (cn.maxFwd).
func (cn *conn) buildRequestHead() {
	req := &cn.req
	b := req.Buf
	out := append(cn.out[:0], req.Method.Of(b)...)
	out = append(out, ' ')
	out = gate.AppendRequestTarget(out, cn.fwd, cn.tgt.authority, cn.tgt.path)
	out = append(out, " HTTP/1.1\r\n"...)
	// The client-address header rustle extends: every existing line of
	// it is left out here and its values are joined, in order, in front
	// of the client's address at the end.
	var fwdName string
	switch cn.p.cfg.Forwarded {
	case ForwardedRFC:
		fwdName = "forwarded"
	case ForwardedXFF:
		fwdName = "x-forwarded-for"
	}
	for i := range req.Fields {
		f := &req.Fields[i]
		if f.Drop {
			continue
		}
		name := f.Name.Of(b)
		if i == req.HostIdx {
			out = append(out, name...)
			out = append(out, ": "...)
			out = append(out, cn.tgt.authority...)
			out = append(out, crlf...)
			continue
		}
		if fwdName != "" && http1.EqualFold(name, fwdName) {
			continue
		}
		if cn.maxFwd >= 0 && len(name) == len("max-forwards") && http1.EqualFold(name, "max-forwards") {
			continue // replaced below
		}
		out = append(out, f.Line.Of(b)...)
		out = append(out, crlf...)
	}
	if req.HostIdx < 0 {
		out = append(out, "Host: "...)
		out = append(out, cn.tgt.authority...)
		out = append(out, crlf...)
	}
	if mode := cn.p.cfg.Forwarded; gate.ForwardedName(mode) != "" {
		out = append(out, gate.ForwardedName(mode)...)
		out = append(out, ": "...)
		out = req.AppendValues(out, fwdName)
		out = gate.AppendForwardedFor(out, mode, cn.sess.ClientIP())
		out = append(out, crlf...)
	}
	out = gate.AppendMaxForwards(out, cn.maxFwd)
	if cn.upgrade {
		out = append(out, "Connection: Upgrade\r\n"...)
	}
	switch {
	case cn.fwd != nil:
		// To a parent, always: a request that comes back names this
		// rustle (a loop).
		out = append(out, cn.sess.Policy().Instance.ViaLine(1)...)
	case cn.p.cfg.Via:
		out = append(out, "Via: 1.1 rustle\r\n"...)
	}
	out = gate.AppendParentAuthorization(out, cn.fwd) // the client's was dropped
	cn.out = append(out, crlf...)
}

// buildSwitchHead writes into cn.out the 101 Switching Protocols head of
// an accepted WebSocket handshake.
func (cn *conn) buildSwitchHead() {
	out := cn.appendStatusAndFields(cn.out[:0], false)
	out = append(out, "Connection: Upgrade\r\n"...)
	if cn.p.cfg.Via {
		out = append(out, "Via: 1.1 rustle\r\n"...)
	}
	cn.out = append(out, crlf...)
}

// buildResponseHead writes into cn.out the head of cn.resp as the client
// gets it.
func (cn *conn) buildResponseHead(keep bool, clientMinor int, dechunk bool) {
	out := cn.appendStatusAndFields(cn.out[:0], dechunk)
	if !keep {
		out = append(out, "Connection: close\r\n"...)
	} else if clientMinor == 0 {
		out = append(out, "Connection: keep-alive\r\n"...)
	}
	if cn.p.cfg.Via {
		out = append(out, "Via: 1.1 rustle\r\n"...)
	}
	cn.out = append(out, crlf...)
}

// buildInterimHead writes into cn.out a 1xx response head.
func (cn *conn) buildInterimHead() {
	cn.out = append(cn.appendStatusAndFields(cn.out[:0], false), crlf...)
}

func (cn *conn) appendStatusAndFields(out []byte, dechunk bool) []byte {
	resp := &cn.resp
	b := resp.Buf
	out = append(out, "HTTP/1.1 "...)
	out = append(out, b[9:12]...)
	if !resp.Reason.Empty() {
		out = append(out, ' ')
		out = append(out, resp.Reason.Of(b)...)
	} else {
		out = append(out, ' ')
	}
	out = append(out, crlf...)
	for i := range resp.Fields {
		f := &resp.Fields[i]
		if f.Drop || dechunk && http1.EqualFold(f.Name.Of(b), "transfer-encoding") {
			continue
		}
		out = append(out, f.Line.Of(b)...)
		out = append(out, crlf...)
	}
	return out
}

// statusText holds the reason phrases of the answers rustle makes itself.
var statusText = map[int]string{
	400: "Bad Request",
	403: "Forbidden",
	405: "Method Not Allowed",
	407: "Proxy Authentication Required",
	408: "Request Timeout",
	429: "Too Many Requests",
	431: "Request Header Fields Too Large",
	501: "Not Implemented",
	502: "Bad Gateway",
	504: "Gateway Timeout",
	505: "HTTP Version Not Supported",
	508: "Loop Detected",
}

// writeError answers the client with status and a one-line reason. keep
// leaves the connection open for another request.
func (cn *conn) writeError(status int, reason string, keep bool) {
	cn.g.Answer(status, 0)
	out := append(cn.out[:0], "HTTP/1.1 "...)
	out = appendInt(out, int64(status))
	out = append(out, ' ')
	out = append(out, statusText[status]...)
	out = append(out, "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "...)
	out = appendInt(out, int64(len("rustle: \n")+len(reason)))
	out = append(out, crlf...)
	if status == 429 && cn.g.RetryAfter > 0 {
		out = append(out, "Retry-After: "...)
		out = appendInt(out, int64((cn.g.RetryAfter+time.Second-1)/time.Second))
		out = append(out, crlf...)
		cn.g.RetryAfter = 0
	}
	if status == 407 {
		if ch := cn.sess.Policy().Challenge(); ch != "" {
			out = append(out, "Proxy-Authenticate: "...)
			out = append(out, ch...)
			out = append(out, crlf...)
		}
	}
	if keep {
		if cn.req.Minor == 0 {
			out = append(out, "Connection: keep-alive\r\n"...)
		}
	} else {
		out = append(out, "Connection: close\r\n"...)
	}
	out = append(out, crlf...)
	if !cn.isHead {
		out = append(out, "rustle: "...)
		out = append(out, reason...)
		out = append(out, '\n')
	}
	cn.out = out
	cn.client.ArmWriteDeadline(http1.MonoNow(), cn.p.cfg.WriteTimeout)
	cn.client.C.Write(out)
}

// writeDialError answers a failed upstream dial: 403 for a destination
// refused, 504 on a timeout, 508 for a parent that answered 508 (a loop),
// 502 otherwise.
func (cn *conn) writeDialError(err error) {
	var de *dialer.Error
	if errors.As(err, &de) {
		status := 502
		switch {
		case de.Forbidden:
			status = 403
		case de.Timeout:
			status = 504
		case gate.DialKind(err) == gate.Loop:
			status = 508
		}
		cn.writeError(status, de.Reason(), false)
		return
	}
	cn.writeError(502, "cannot connect to upstream", false)
}

// writeUpstreamError answers a request whose upstream exchange failed
// before any of the response reached the client.
func (cn *conn) writeUpstreamError(err error) {
	var ce *clientError
	if errors.As(err, &ce) {
		return // the client is gone
	}
	var ne net.Error
	var de *dialer.Error
	status, why := 502, ""
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		status, why = 504, "upstream "+cn.upKeyOrTarget()+" did not answer in time"
	case errors.Is(err, errUpstreamClosed):
		why = "upstream " + cn.upKeyOrTarget() + " closed the connection without a response"
	case errors.Is(err, errRespTooLarge):
		why = "upstream response head too large"
	case errors.Is(err, errUnexpected101):
		why = "upstream switched protocols without an upgrade request"
	case errors.Is(err, http1.ErrBadStatusLine), errors.Is(err, http1.ErrBadResponseHead):
		why = "malformed response from upstream " + cn.upKeyOrTarget()
	case errors.As(err, &de):
		cn.writeDialError(err) // the grant's Dial noted its reason
		return
	default:
		why = "upstream " + cn.upKeyOrTarget() + " failed: connection error"
	}
	if status == 504 {
		cn.g.SetReason(accesslog.ReasonTimedOut)
	} else {
		cn.g.SetReason(accesslog.ReasonUpstreamFailed)
	}
	cn.writeError(status, why, false)
}

func (cn *conn) upKeyOrTarget() string {
	if cn.fwd != nil {
		return "through parent proxy " + cn.fwd.Name() // its key holds its address
	}
	return string(cn.key)
}

// writeBodyError answers a request whose body failed on the client's
// side (err, a *readError) before any of the response reached the client:
// 400 for malformed framing or a body cut short, 408 for a body that
// stopped coming.
func (cn *conn) writeBodyError(err error) {
	var re *readError
	var ne net.Error
	switch {
	case errors.As(err, &re) && re.framing:
		cn.g.SetReason(accesslog.ReasonBadRequest)
		cn.writeError(400, "malformed chunked request body", false)
	case errors.As(err, &ne) && ne.Timeout():
		cn.g.SetReason(accesslog.ReasonBodyTimeout)
		cn.writeError(408, "request body not received in time", false)
	default:
		cn.g.SetReason(accesslog.ReasonBadRequest)
		cn.writeError(400, "request body incomplete", false)
	}
}

// hopLimit applies a TRACE's or OPTIONS's Max-Forwards (see
// gate.MaxForwards): a malformed one is answered 400; at 0 rustle answers
// the request itself (an echo of a TRACE without its credentials, the
// methods it serves for OPTIONS); otherwise cn.maxFwd is what the
// forwarded request carries. It reports whether the request was
// answered, and then whether the connection stays open (not after a
// request body, which is not read).
func (cn *conn) hopLimit(hasBody, clientKeep bool) (answered, keep bool) {
	req := &cn.req
	b := req.Buf
	var v []byte
	if req.MaxForwardsIdx >= 0 {
		v = req.Fields[req.MaxForwardsIdx].Value.Of(b)
	}
	next, here, ok := gate.MaxForwards(v, req.MaxForwardsIdx >= 0)
	switch {
	case !ok:
		cn.g.SetReason(accesslog.ReasonBadRequest)
		cn.writeError(400, "malformed Max-Forwards", false)
		return true, false
	case !here:
		cn.maxFwd = next
		return false, false
	}
	keep = clientKeep && !hasBody
	var body []byte
	out := append(cn.out[:0], "HTTP/1.1 200 OK\r\n"...)
	if string(req.Method.Of(b)) == "TRACE" {
		line := b
		for i := 0; i+1 < len(b); i++ {
			if b[i] == '\r' && b[i+1] == '\n' {
				line = b[:i]
				break
			}
		}
		body = append(body, line...)
		body = append(body, crlf...)
		for i := range req.Fields {
			f := &req.Fields[i]
			body = gate.AppendTraceField(body, f.Name.Of(b), f.Value.Of(b))
		}
		body = append(body, crlf...)
		out = append(out, "Content-Type: "+gate.TraceContentType+"\r\n"...)
	} else {
		out = append(out, "Allow: "+gate.ProxyAllow+"\r\n"...)
	}
	out = append(out, "Content-Length: "...)
	out = appendInt(out, int64(len(body)))
	out = append(out, crlf...)
	switch {
	case !keep:
		out = append(out, "Connection: close\r\n"...)
	case req.Minor == 0:
		out = append(out, "Connection: keep-alive\r\n"...)
	}
	cn.out = append(out, crlf...)
	cn.g.Answer(200, 0) // rustle's own answer: no bytes down
	cn.client.ArmWriteDeadline(http1.MonoNow(), cn.p.cfg.WriteTimeout)
	cn.vec.write(cn.client.C, cn.out, body)
	return true, keep
}
