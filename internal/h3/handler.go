package h3

import (
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
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

// protoConnectUDP is the :protocol of a CONNECT-UDP request (RFC 9298 §3).
const protoConnectUDP = "connect-udp"

// request is what rustle makes of one request stream's head.
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

// classify says what r asks for. quic-go has checked the head (pseudo
// fields, connection-specific fields, RFC 9114 §4.3).
func (s *Server) classify(r *http.Request) request {
	var q request
	switch {
	case r.Method == http.MethodConnect && r.Proto == protoConnectUDP:
		host, port, err := s.tmpl.Match(r.URL.EscapedPath() + queryOf(r))
		if err != nil {
			return local(404, "not a CONNECT-UDP target: the path does not match "+strconv.Quote(s.tmpl.String()))
		}
		q.kind, q.host, q.port = kindConnectUDP, host, int(port)
		return q
	case r.Method == http.MethodConnect && r.Proto != "HTTP/3.0":
		return local(501, "unsupported :protocol "+strconv.Quote(r.Proto))
	case r.Method == http.MethodConnect:
		var err error
		if q.host, q.port, q.ipv6, err = gate.ParseAuthority(r.Host, 0); err != nil {
			return local(400, "invalid CONNECT target "+strconv.Quote(r.Host))
		}
		q.kind = kindConnect
		return q
	case r.URL.Scheme != "http":
		return local(400, "not a proxy request: rustle forwards :scheme http only; use CONNECT for "+strconv.Quote(r.URL.Scheme))
	}
	var err error
	if q.host, q.port, q.ipv6, err = gate.ParseAuthority(r.Host, 80); err != nil {
		return local(400, "invalid :authority "+strconv.Quote(r.Host))
	}
	q.kind = kindForward
	return q
}

func local(status int, why string) request { return request{kind: kindLocal, status: status, why: why} }

func queryOf(r *http.Request) string {
	if r.URL.RawQuery == "" {
		return ""
	}
	return "?" + r.URL.RawQuery
}

// serveHTTP serves one request stream.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	cs, _ := r.Context().Value(connKey{}).(*connState)
	if cs == nil {
		w.WriteHeader(http.StatusInternalServerError) // a connection ServeConn did not start
		return
	}
	cs.active.Add(1)
	defer func() {
		if cs.active.Add(-1) == 0 && cs.draining.Load() {
			cs.closeDrained()
		}
	}()
	q := s.classify(r)
	g := new(gate.Grant)
	defer g.Finish(0, 0) // a no-op unless a path left it open
	switch k := s.authorize(cs.sess, r, &q, g); k {
	case gate.OK:
	case gate.NeedAuth:
		if ch := cs.sess.Policy().Challenge(); ch != "" {
			w.Header().Set("Proxy-Authenticate", ch)
		}
		answer(w, g, 407, k.Reason())
		return
	case gate.CoolingDown:
		secs := int64((g.RetryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		answer(w, g, 429, k.Reason())
		// As HTTP/2's GOAWAY ENHANCE_YOUR_CALM: the connection closes once
		// its requests in progress (tunnels, flows) have ended.
		cs.draining.Store(true)
		return
	default: // gate.UserLimit: 429; gate.Denied: 403
		answer(w, g, k.Status(), k.Reason())
		return
	}
	if q.kind == kindLocal {
		reason := accesslog.ReasonBadRequest
		if q.status == 501 || q.status == 404 {
			reason = accesslog.ReasonProtocol
		}
		g.SetReason(reason)
		answer(w, g, q.status, q.why)
		return
	}
	if q.kind == kindForward && origin.HopLimited(r.Method) && hopLimit(w, r, &q, g) {
		return
	}
	if k := g.Hold(); k != gate.OK {
		answer(w, g, k.Status(), k.Reason())
		return
	}
	switch q.kind {
	case kindConnect:
		s.connect(w, r, g)
	case kindConnectUDP:
		s.connectUDP(w, r, cs, &q, g)
	default:
		s.forward(w, r, cs, &q, g)
	}
}

// authorize asks the session's policy about r. A request rustle answers
// itself is asked about too: it needs credentials like any other.
func (s *Server) authorize(sess *gate.Session, r *http.Request, q *request, g *gate.Grant) gate.Kind {
	proto := acl.HTTP
	method := r.Method
	var target []byte
	path := ""
	switch {
	case r.Method == http.MethodConnect && r.Proto == protoConnectUDP:
		proto, method = acl.UDP, "CONNECT-UDP"
		if q.kind == kindConnectUDP {
			target = gate.AppendHostPort([]byte("udp://"), q.host, q.port, q.ipv6 || isIPv6(q.host))
		} else {
			target = []byte(r.URL.Path)
		}
	case r.Method == http.MethodConnect:
		proto = acl.Connect
		target = []byte(r.Host)
	default:
		path = r.URL.RequestURI()
		target = []byte(r.URL.Scheme + "://" + r.Host + path)
	}
	if q.kind == kindLocal {
		target = gate.LoggableTarget(target)
	}
	var authz []byte
	if v, ok := r.Header["Proxy-Authorization"]; ok && len(v) > 0 {
		authz = []byte(v[0])
	}
	// Checked for rustle's own element (a loop); a tunnel's go on to an
	// HTTP parent.
	var via []byte
	if v := r.Header["Via"]; len(v) > 0 {
		via = []byte(strings.Join(v, ", "))
	}
	return sess.Authorize(&gate.Request{
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
func isIPv6(host string) bool {
	for i := 0; i < len(host); i++ {
		if host[i] == ':' {
			return true
		}
	}
	return false
}

// answer sends rustle's own answer: status with a one-line text body,
// and finishes g with it.
func answer(w http.ResponseWriter, g *gate.Grant, status int, reason string) {
	body := "rustle: " + reason + "\n"
	h := w.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write([]byte(body))
	g.Answer(status, 0)
	g.Finish(0, 0)
}

// hopLimit applies a TRACE's or OPTIONS's Max-Forwards (see
// origin.MaxForwards): a malformed one is answered 400; at 0 rustle answers
// the request itself (an echo of a TRACE without its credentials, the
// methods it serves for OPTIONS); otherwise the forwarded request carries
// one less (q.limitHops, q.maxFwd). It reports whether it answered.
func hopLimit(w http.ResponseWriter, r *http.Request, q *request, g *gate.Grant) bool {
	v := r.Header["Max-Forwards"]
	first := ""
	if len(v) > 0 {
		first = v[0]
	}
	next, here, ok := origin.MaxForwards(first, len(v) > 0)
	switch {
	case !ok:
		g.SetReason(accesslog.ReasonBadRequest)
		answer(w, g, 400, "malformed Max-Forwards")
		return true
	case !here:
		q.limitHops, q.maxFwd = len(v) > 0, next
		return false
	}
	var body []byte
	h := w.Header()
	if r.Method == http.MethodTrace {
		body = origin.AppendTraceLine(body, r.Method, r.URL.Scheme+"://"+r.Host+r.URL.RequestURI(), "HTTP/3")
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for name := range r.Header {
				if !yield(name) {
					return
				}
			}
		}) {
			for _, value := range r.Header[name] {
				body = origin.AppendTraceField(body, name, value)
			}
		}
		body = append(body, "\r\n"...)
		h.Set("Content-Type", origin.TraceContentType)
	} else {
		h.Set("Allow", origin.ProxyAllow)
	}
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(200)
	w.Write(body)
	g.Answer(200, 0)
	g.Finish(0, 0) // rustle's own answer: no bytes down
	return true
}
