package h2

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/route"
)

// exchange is the HTTP/2 side of a forwarded stream's exchange with its
// upstream (origin.Exchange, the same as the plain port's): what the
// exchange asks of the request (origin.Request), and the relay of the
// response as HEADERS and DATA. exchanges are pooled: their buffers and
// field slices grow once.
type exchange struct {
	x origin.Exchange
	s *stream
	// req is the request as the upstream head is built from it.
	req origin.FieldRequest
	// vals are field values of earlier responses, reused by
	// responseFields for a value that repeats (content-type,
	// content-length, date within its second...) so that it allocates
	// no string for it.
	vals valueCache
}

var exchangePool = sync.Pool{New: func() any { return new(exchange) }}

// getExchange returns an exchange for s's request.
func (s *stream) getExchange() *exchange {
	e := exchangePool.Get().(*exchange)
	e.s = s
	e.req = s.req.fieldRequest(s.c.clientAddr)
	e.req.Instance = s.c.sess.Policy().Instance
	e.req.MaxForwards = -1
	if s.limitHops {
		e.req.MaxForwards = s.maxFwd
	}
	return e
}

// fieldRequest returns r as the exchange builds its upstream head from
// it; clientAddr is the client's address.
func (r *request) fieldRequest(clientAddr netip.Addr) origin.FieldRequest {
	return origin.FieldRequest{
		Method:        r.method,
		Authority:     r.authority,
		Path:          r.path,
		Fields:        r.fields,
		ContentLength: r.contentLength,
		HasBody:       !r.endStream,
		ClientAddr:    clientAddr,
		Via:           "2 rustle",
		Major:         2,
		MaxForwards:   -1,
	}
}

// putExchange ends e's exchange (its upstream, if any, is closed) and
// gives e back to the pool.
func putExchange(e *exchange) {
	e.x.Close()
	e.s = nil
	e.req = origin.FieldRequest{}
	exchangePool.Put(e)
}

// AppendHead appends the request head (see origin.AppendFieldHead). It is
// part of exchange's origin.Request.
func (e *exchange) AppendHead(dst []byte, parent *route.Parent) []byte {
	dst, _ = e.s.c.cfg.Origin.AppendFieldHead(dst, &e.req, parent, e.x.Headers())
	return dst
}

// chunked reports whether the request body goes upstream chunked: its
// length is unknown.
func (e *exchange) chunked() bool {
	return e.req.HasBody && e.req.ContentLength < 0 && e.req.WebSocketKey == ""
}

// DialContext returns a context that a reset of the stream cancels. It
// is part of exchange's origin.Request.
func (e *exchange) DialContext() (context.Context, func()) {
	s := e.s
	c := s.c
	ctx, cancel := context.WithCancel(context.Background())
	c.mu.Lock()
	if s.reset {
		c.mu.Unlock()
		cancel()
		return ctx, nil
	}
	s.cancel = cancel
	c.mu.Unlock()
	return ctx, func() {
		c.mu.Lock()
		s.cancel = nil
		c.mu.Unlock()
		cancel()
	}
}

// Attach makes up the stream's upstream, which a reset interrupts; false
// when the stream is gone already. It is part of exchange's
// origin.Request.
func (e *exchange) Attach(up net.Conn) bool {
	c := e.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.s.reset {
		return false
	}
	e.s.up = up
	return true
}

// Interim passes an informational answer on to the client. It is part of
// exchange's origin.Request.
func (e *exchange) Interim(x *origin.Exchange) (bool, error) {
	fields := responseFields(make([]hpack.HeaderField, 0, 4), x.Resp.Status, &x.Resp, false, "", &e.vals)
	return true, e.s.sendHeaders(fields, false)
}

// release ends the stream's use of its upstream: back to the pool when
// reuse is set and the stream was not reset (see origin.Exchange.Release).
func (s *stream) release(x *origin.Exchange, reuse bool) {
	c := s.c
	c.mu.Lock()
	s.up = nil
	reuse = reuse && !s.reset
	c.mu.Unlock()
	x.Release(reuse)
}

// relayResponse sends the response the exchange read (head, body,
// trailers) on the stream and reports whether all of it was sent. The
// body's content goes out as it arrives: a body of known length from the
// read buffer, a chunked one decoded in place, one delimited by the
// connection's close until its end (see origin.Exchange.NextBody).
func (s *stream) relayResponse(e *exchange) bool {
	c := s.c
	x := &e.x
	h := &x.Resp
	none := x.NoBody()
	fields := responseFields(make([]hpack.HeaderField, 0, 16), h.Status, h, c.cfg.Origin.Config().Via, "", &e.vals)
	fields = appendRuleFields(fields, x.Headers())
	// When body bytes are here already, the head goes out with them.
	if s.queueHeaders(fields, none, len(x.Up.Buffered()) == 0) != nil {
		return false
	}
	s.answered(h.Status)
	if none {
		return true
	}
	s.relaying = true
	for {
		data, last, err := x.NextBody()
		if err != nil {
			s.resetStream(http2.ErrCodeInternal)
			return false
		}
		// The last data carries END_STREAM unless trailers follow.
		end := last && !x.HasTrailer()
		if len(data) > 0 || end {
			s.pace(len(data))
			if s.sendData(data, end) != nil {
				return false
			}
		}
		if end {
			return true
		}
		if last {
			break
		}
	}
	if tf := responseFields(fields[:0], 0, &x.Trailer, false, "", nil); len(tf) > 0 {
		return s.sendHeaders(tf, true) == nil
	}
	return s.sendData(nil, true) == nil
}

// responseFields appends the HTTP/2 fields of a response head (or of a
// chunked body's trailers): :status (unless status is 0), then h's fields
// in their order, names in lower case, less the connection-specific ones
// (RFC 9113 §8.2.2), those its Connection field names, the ones the parser
// dropped as duplicates or framing (a Content-Length beside
// Transfer-Encoding) and skip (a lower-case name, or ""). vc, when not
// nil, supplies the strings of values it has seen before.
func responseFields(dst []hpack.HeaderField, status int, h *http1.Head, via bool, skip string, vc *valueCache) []hpack.HeaderField {
	if status != 0 {
		dst = append(dst, hpack.HeaderField{Name: ":status", Value: statusString(status)})
	}
	var lower [64]byte
	for i := range h.Fields {
		f := &h.Fields[i]
		name := f.Name.Of(h.Buf)
		var lname []byte
		if len(name) <= len(lower) {
			lname = lower[:len(name)]
		} else {
			lname = make([]byte, len(name))
		}
		for j, ch := range name {
			if 'A' <= ch && ch <= 'Z' {
				ch += 'a' - 'A'
			}
			lname[j] = ch
		}
		switch string(lname) {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade", "te", "http2-settings":
			continue
		case "trailer":
			// Hop-by-hop for the parser, which serves a proxy speaking
			// HTTP/1.1 on both sides; an HTTP/2 client is told of the
			// trailers the stream ends with. (An origin's
			// Proxy-Authenticate is meant for rustle, not the client,
			// and dropped as on the HTTP/1.1 path.)
		default:
			if f.Drop {
				continue
			}
		}
		if skip != "" && string(lname) == skip || h.ConnectionLists(name) {
			continue
		}
		n, ok := commonFields[string(lname)]
		if !ok {
			n = string(lname)
		}
		dst = append(dst, hpack.HeaderField{Name: n, Value: vc.str(n, ok, f.Value.Of(h.Buf))})
	}
	if via {
		dst = append(dst, hpack.HeaderField{Name: "via", Value: "1.1 rustle"})
	}
	return dst
}

// appendRuleFields appends the header rules' response fields (see
// origin.Exchange.Headers; nil = none), names in lower case.
func appendRuleFields(dst []hpack.HeaderField, rules *origin.Headers) []hpack.HeaderField {
	for _, f := range rules.ResponseFields() {
		dst = append(dst, hpack.HeaderField{Name: f.Lower, Value: f.Value})
	}
	return dst
}

// valueCache holds the values of response fields seen lately, one per
// field name, so that a value repeated from one response to the next
// costs no string.
type valueCache struct {
	e    [12]struct{ name, value string }
	next int // the entry a new name replaces
}

// maxCachedValue bounds the values a valueCache keeps.
const maxCachedValue = 64

// str returns b as a string: the one cached for name when it holds b's
// bytes. Only the values of common field names (common set), short ones,
// are cached, and never a set-cookie value.
func (vc *valueCache) str(name string, common bool, b []byte) string {
	if vc == nil || !common || len(b) > maxCachedValue || name == "set-cookie" {
		return string(b)
	}
	slot := -1
	for i := range vc.e {
		e := &vc.e[i]
		if e.name != name {
			continue
		}
		if e.value == string(b) {
			return e.value
		}
		slot = i
		break
	}
	if slot < 0 {
		slot = vc.next
		vc.next = (vc.next + 1) % len(vc.e)
	}
	v := string(b)
	vc.e[slot].name, vc.e[slot].value = name, v
	return v
}

// commonFields interns the names of the response fields most origins
// send, so that mapping them to HTTP/2 allocates nothing.
var commonFields = func() map[string]string {
	m := make(map[string]string)
	for _, n := range strings.Fields(`accept-ranges access-control-allow-credentials
		access-control-allow-headers access-control-allow-methods
		access-control-allow-origin access-control-expose-headers age alt-svc
		cache-control content-disposition content-encoding content-language
		content-length content-location content-range content-security-policy
		content-type date etag expires last-modified link location pragma
		proxy-authenticate referrer-policy retry-after server set-cookie
		strict-transport-security trailer vary via www-authenticate
		x-cache x-content-type-options x-frame-options x-powered-by
		x-request-id x-xss-protection`) {
		m[n] = n
	}
	return m
}()

// statusString returns status in decimal, without allocating for the
// common ones.
func statusString(status int) string {
	switch status {
	case 200:
		return "200"
	case 204:
		return "204"
	case 206:
		return "206"
	case 301:
		return "301"
	case 302:
		return "302"
	case 304:
		return "304"
	case 404:
		return "404"
	}
	return strconv.Itoa(status)
}
