package httpproxy

import (
	"errors"
	"net"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/route"
)

const crlf = "\r\n"

// appendRequestHead appends to out the head forwarded upstream for
// cn.req: the request line in origin-form (absolute-form to an HTTP
// parent, with the parent's Proxy-Authorization at the end), the
// client's header lines in their order and case less the hop-by-hop
// ones and those the header rules drop, Host set to the target's
// authority, the Forwarded and Via headers the configuration asks for (a
// Via naming this rustle to a parent, always; no Forwarded element when
// the header rules name its field), a TRACE's or OPTIONS's Max-Forwards
// one less (cn.maxFwd), and the header rules' own fields (see
// origin.Exchange.Headers).
func (cn *conn) appendRequestHead(out []byte, parent *route.Parent) []byte {
	req := &cn.req
	b := req.Buf
	rules := cn.x.Headers() // nil = none
	out = append(out, req.Method.Of(b)...)
	out = append(out, ' ')
	out = origin.AppendRequestTarget(out, parent, cn.tgt.authority, cn.tgt.path)
	out = append(out, " HTTP/1.1\r\n"...)
	// The client-address header rustle extends: every existing line of
	// it is left out here and its values are joined, in order, in front
	// of the client's address at the end.
	var fwdName string
	switch cn.p.o.Forwarded {
	case origin.ForwardedRFC:
		fwdName = "forwarded"
	case origin.ForwardedXFF:
		fwdName = "x-forwarded-for"
	}
	for i := range req.Fields {
		f := &req.Fields[i]
		if f.Drop {
			continue
		}
		name := f.Name.Of(b)
		if rules != nil && rules.DropsRequest(name) {
			continue
		}
		if i == req.HostIdx && !cn.orig.IsValid() { // a transparent client's Host goes as it wrote it
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
	if mode := cn.p.o.Forwarded; origin.ForwardedName(mode) != "" && !rules.DropsRequestName(fwdName) {
		out = append(out, origin.ForwardedName(mode)...)
		out = append(out, ": "...)
		out = req.AppendValues(out, fwdName)
		out = origin.AppendForwardedFor(out, mode, cn.sess.ClientIP())
		out = append(out, crlf...)
	}
	out = origin.AppendMaxForwards(out, cn.maxFwd)
	out = rules.AppendRequest(out)
	if cn.upgrade {
		out = append(out, "Connection: Upgrade\r\n"...)
	}
	switch {
	case parent != nil:
		// To a parent, always: a request that comes back names this
		// rustle (a loop).
		out = append(out, cn.sess.Policy().Instance.ViaLine(1)...)
	case cn.p.o.Via:
		out = append(out, "Via: 1.1 rustle\r\n"...)
	}
	out = origin.AppendParentAuthorization(out, parent) // the client's was dropped
	return append(out, crlf...)
}

// buildSwitchHead writes into cn.out the 101 Switching Protocols head of
// an accepted WebSocket handshake, with the header rules' response
// fields.
func (cn *conn) buildSwitchHead() {
	out := cn.appendStatusAndFields(cn.out[:0], false)
	out = cn.x.Headers().AppendResponse(out)
	out = append(out, "Connection: Upgrade\r\n"...)
	if cn.p.o.Via {
		out = append(out, "Via: 1.1 rustle\r\n"...)
	}
	cn.out = append(out, crlf...)
}

// buildResponseHead writes into cn.out the head of cn.resp as the client
// gets it: its fields less those dropped (hop-by-hop, the header rules'),
// and the header rules' response fields.
func (cn *conn) buildResponseHead(keep bool, clientMinor int, dechunk bool) {
	out := cn.appendStatusAndFields(cn.out[:0], dechunk)
	out = cn.x.Headers().AppendResponse(out)
	if !keep {
		out = append(out, "Connection: close\r\n"...)
	} else if clientMinor == 0 {
		out = append(out, "Connection: keep-alive\r\n"...)
	}
	if cn.p.o.Via {
		out = append(out, "Via: 1.1 rustle\r\n"...)
	}
	cn.out = append(out, crlf...)
}

// buildInterimHead writes into cn.out a 1xx response head.
func (cn *conn) buildInterimHead() {
	cn.out = append(cn.appendStatusAndFields(cn.out[:0], false), crlf...)
}

func (cn *conn) appendStatusAndFields(out []byte, dechunk bool) []byte {
	resp := &cn.x.Resp
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
	cn.client.ArmWriteDeadline(http1.MonoNow(), cn.p.o.WriteTimeout)
	cn.client.C.Write(out)
}

// writeFailure answers a request whose exchange with its upstream failed
// before any of the response reached the client, as
// origin.Exchange.Failure says; a client that went away is not answered.
func (cn *conn) writeFailure(err error) {
	var ce *clientError
	if errors.As(err, &ce) {
		return // the client is gone
	}
	status, reason, text := cn.x.Failure(err)
	if reason != "" {
		cn.g.SetReason(reason)
	}
	cn.writeError(status, text, false)
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
// origin.MaxForwards): a malformed one is answered 400; at 0 rustle answers
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
	next, here, ok := origin.MaxForwards(v, req.MaxForwardsIdx >= 0)
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
			body = origin.AppendTraceField(body, f.Name.Of(b), f.Value.Of(b))
		}
		body = append(body, crlf...)
		out = append(out, "Content-Type: "+origin.TraceContentType+"\r\n"...)
	} else {
		out = append(out, "Allow: "+origin.ProxyAllow+"\r\n"...)
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
	cn.client.ArmWriteDeadline(http1.MonoNow(), cn.p.o.WriteTimeout)
	cn.vec.Write(cn.client.C, cn.out, body)
	return true, keep
}
