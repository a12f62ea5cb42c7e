package h3

import (
	"strconv"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/fieldreq"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/origin"
)

// requestKind says how a request is served.
type requestKind uint8

const (
	kindForward    requestKind = iota // :scheme http: forwarded to an HTTP/1.1 origin
	kindConnect                       // CONNECT: a TCP tunnel
	kindConnectUDP                    // extended CONNECT connect-udp: a UDP flow
	kindLocal                         // answered by rustle itself
)

// request is what rustle makes of a request head (rs.req, checked by
// fieldreq.Parse): how it is served and where to.
type request struct {
	kind   requestKind
	host   string // the target, bare (no brackets)
	port   int
	ipv6   bool
	status int    // for kindLocal: the answer
	why    string // for kindLocal: its text
	// limitHops says the request is a TRACE or OPTIONS whose forwarded
	// Max-Forwards is maxFwd (see hopLimit).
	limitHops bool
	maxFwd    int
}

// classify says how rs's request is served: a CONNECT-UDP target is
// matched against the URI template (404 when it does not match), and a
// WebSocket over HTTP/3 (RFC 9220) is not served (501).
func (rs *reqStream) classify() request {
	r := &rs.req
	switch r.Kind {
	case fieldreq.ConnectUDP:
		t := rs.c.s.tmpl
		host, port, err := t.Match(r.Path)
		if err != nil {
			return local(404, "not a CONNECT-UDP target: the path does not match "+strconv.Quote(t.String()))
		}
		// The flow keeps its target's host for its life (in its grant):
		// a copy, not the whole :path it was cut from.
		return request{kind: kindConnectUDP, host: strings.Clone(host), port: int(port)}
	case fieldreq.Connect:
		return request{kind: kindConnect, host: r.Host, port: r.Port, ipv6: r.IPv6}
	case fieldreq.WebSocket:
		return local(501, "unsupported :protocol "+strconv.Quote(r.Protocol))
	case fieldreq.Local:
		status, why := r.LocalStatus()
		return local(status, why)
	}
	return request{kind: kindForward, host: r.Host, port: r.Port, ipv6: r.IPv6}
}

func local(status int, why string) request { return request{kind: kindLocal, status: status, why: why} }

// serve serves the request: authorized first, whatever it is, then
// forwarded, tunnelled, relayed as a flow, or answered by rustle. It
// returns a flow whose goroutine is to go on with the stream's service
// (see connectUDP); nil for any other request.
func (rs *reqStream) serve() (handoff *flow) {
	c := rs.c
	q := rs.classify()
	g := &rs.g
	defer func() {
		if handoff == nil {
			g.Finish(0, 0) // a no-op unless a path left it open
		}
	}()
	switch k := rs.authorize(&q, g); k {
	case gate.OK:
	case gate.NeedAuth:
		var extra []string
		if ch := c.sess.Policy().Challenge(); ch != "" {
			extra = []string{"proxy-authenticate", ch}
		}
		rs.answer(407, k.Reason(), extra)
		return
	case gate.CoolingDown:
		secs := int64((g.RetryAfter + time.Second - 1) / time.Second)
		rs.answer(429, k.Reason(), []string{"retry-after", strconv.FormatInt(secs, 10)})
		// As HTTP/2's GOAWAY ENHANCE_YOUR_CALM: the connection closes once
		// its requests in progress (tunnels, flows) have ended.
		c.drain(false)
		return
	default: // gate.UserLimit: 429; gate.Denied: 403
		rs.answer(k.Status(), k.Reason(), nil)
		return
	}
	if q.kind == kindLocal {
		reason := accesslog.ReasonBadRequest
		if q.status == 501 || q.status == 404 {
			reason = accesslog.ReasonProtocol
		}
		g.SetReason(reason)
		rs.answer(q.status, q.why, nil)
		return
	}
	if q.kind == kindForward && origin.HopLimited(rs.req.Method) && rs.hopLimit(&q) {
		return
	}
	if k := g.Hold(); k != gate.OK {
		rs.answer(k.Status(), k.Reason(), nil)
		return
	}
	switch q.kind {
	case kindConnect:
		rs.connect()
	case kindConnectUDP:
		return rs.connectUDP(&q)
	default:
		rs.forward(&q)
	}
	return nil
}

// authorize asks the session's policy about the request. A request
// rustle answers itself is asked about too: it needs credentials like
// any other.
func (rs *reqStream) authorize(q *request, g *gate.Grant) gate.Kind {
	r := &rs.req
	proto := acl.HTTP
	method := r.Method
	b := rs.scr[:0]
	path := "" // a forwarded request's, which rules' paths match
	switch {
	case r.Method == "CONNECT" && r.Protocol == fieldreq.ProtoConnectUDP:
		proto, method = acl.UDP, "CONNECT-UDP"
		if q.kind == kindConnectUDP {
			b = gate.AppendHostPort(append(b, "udp://"...), q.host, q.port, q.ipv6 || isIPv6(q.host))
		} else {
			p, _, _ := strings.Cut(r.Path, "?")
			b = append(b, p...)
		}
	case r.Method == "CONNECT":
		proto = acl.Connect
		b = append(b, r.Authority...)
	default:
		b = append(append(append(append(b, r.Scheme...), "://"...), r.Authority...), r.Path...)
		path = r.Path
	}
	target := b
	if q.kind == kindLocal {
		target = gate.LoggableTarget(target)
	}
	var authz []byte
	if r.HasProxyAuth {
		b = append(b, r.ProxyAuth...)
		authz = b[len(b)-len(r.ProxyAuth):]
	}
	// Checked for rustle's own element (a loop); a tunnel's go on to an
	// HTTP parent.
	var via []byte
	start := len(b)
	for _, f := range r.Fields {
		if f.Name == "via" {
			if len(b) > start {
				b = append(b, ", "...)
			}
			b = append(b, f.Value...)
		}
	}
	if len(b) > start {
		via = b[start:]
	}
	rs.scr = b
	return rs.c.sess.Authorize(&gate.Request{
		Protocol:      proto,
		Log:           accesslog.ProtoH3,
		Method:        method,
		Host:          q.host,
		Port:          uint16(q.port),
		Target:        target,
		Path:          path,
		Authorization: authz,
		Via:           via,
	}, g)
}

// isIPv6 reports whether host is an IPv6 literal (it has a colon).
func isIPv6(host string) bool { return strings.IndexByte(host, ':') >= 0 }

// answer sends rustle's own answer (see sendAnswer) and finishes the
// grant with it.
func (rs *reqStream) answer(status int, reason string, extra []string) {
	rs.sendAnswer(status, reason, extra)
	rs.g.Answer(status, 0)
	rs.g.Finish(0, 0)
}

// hopLimit applies a TRACE's or OPTIONS's Max-Forwards (see
// origin.MaxForwards): a malformed one is answered 400; at 0 rustle answers
// the request itself (an echo of a TRACE without its credentials, its
// fields as they came, the methods it serves for OPTIONS); otherwise the
// forwarded request carries one less (q.limitHops, q.maxFwd). It reports
// whether it answered.
func (rs *reqStream) hopLimit(q *request) bool {
	r := &rs.req
	g := &rs.g
	v, present := "", false
	for _, f := range r.Fields {
		if f.Name == "max-forwards" {
			v, present = f.Value, true
			break
		}
	}
	next, here, ok := origin.MaxForwards(v, present)
	switch {
	case !ok:
		g.SetReason(accesslog.ReasonBadRequest)
		rs.answer(400, "malformed Max-Forwards", nil)
		return true
	case !here:
		q.limitHops, q.maxFwd = present, next
		return false
	}
	rs.startSection(200)
	var body []byte
	if r.Method == "TRACE" {
		body = origin.AppendTraceLine(body, r.Method, r.Scheme+"://"+r.Authority+r.Path, "HTTP/3")
		for _, f := range r.Fields {
			body = origin.AppendTraceField(body, f.Name, f.Value)
		}
		body = append(body, "\r\n"...)
		rs.sec = appendField(rs.sec, "content-type", origin.TraceContentType)
	} else {
		rs.sec = appendField(rs.sec, "allow", origin.ProxyAllow)
	}
	rs.sec = appendField(rs.sec, "content-length", itoa(nil, len(body)))
	rs.sendHead(body, true)
	rs.stopReading()
	g.Answer(200, 0)
	g.Finish(0, 0) // rustle's own answer: no bytes down
	return true
}
