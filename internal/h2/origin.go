package h2

import (
	"io"
	"net"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/http1"
)

// origin is the HTTP/1.1 side of a forwarded stream, read with the same
// client as the plain port's (internal/http1): the upstream connection's
// read buffer, the response head parsed in place in it, and the framing
// state of its body. origins are pooled: their field slices and trailer
// buffer grow once.
type origin struct {
	up       http1.Conn
	head     http1.Head
	trailer  http1.Head // the trailer section of a chunked body
	cs       http1.ChunkedScanner
	trailers []byte // the trailer section's bytes

	// rw arms the wait for the response head while the request body is
	// sent (see http1.ResponseWait); bodyPending: readResponse waits
	// through it.
	rw          http1.ResponseWait
	bodyPending bool
	interim     bool // a 1xx answer went to the client

	// reqHead is the buffer the request head is built in.
	reqHead []byte
	// vals are field values of earlier responses, reused by
	// responseFields for a value that repeats (content-type,
	// content-length, date within its second...) so that it allocates
	// no string for it.
	vals valueCache
}

var originPool = sync.Pool{New: func() any { return new(origin) }}

func getOrigin() *origin { return originPool.Get().(*origin) }

// putOrigin gives o's buffer back and o to the pool.
func putOrigin(o *origin) {
	o.up.Release()
	o.up.C, o.up.TCP = nil, nil
	o.head.Buf, o.trailer.Buf = nil, nil
	o.interim = false
	if cap(o.trailers) > 4<<10 {
		o.trailers = nil
	}
	if cap(o.reqHead) > 4<<10 {
		o.reqHead = nil
	}
	originPool.Put(o)
}

// attach makes up the connection o reads, with an empty buffer.
func (o *origin) attach(up net.Conn) {
	o.up.Release()
	o.up.Attach(up, &http1.UpstreamBufs)
}

// keepAlive reports whether the connection may serve another request
// after the response to method (RFC 9112 §9.3): the origin keeps it open
// and the response's end is known without its close.
func (o *origin) keepAlive(method string) bool {
	h := &o.head
	return !h.ConnClose && (h.Minor >= 1 || h.ConnKeepAlive) &&
		(noBody(h, method) || h.Chunked || h.ContentLength >= 0 && !h.TEOther)
}

// readResponse reads the final response head into o.head, passing
// informational (1xx) answers on to the client. upgrade accepts a 101.
// The wait for each head is bounded by the response-header timeout, its
// size by MaxHeaderBytes; while o.bodyPending, the timeout starts once the
// request body is sent, and the wait ends when the body fails on the
// client's side (o.rw).
func (s *stream) readResponse(o *origin, method string, upgrade bool) error {
	c := s.c
	up := &o.up
	h := &o.head
	for {
		var n int
		var err error
		if o.bodyPending {
			o.rw.Arm()
			n, err = up.ReadHead(c.cfg.MaxHeaderBytes, c.cfg.ResponseHeaderTimeout)
			o.rw.End()
		} else {
			up.ArmReadDeadline(http1.MonoNow(), c.cfg.ResponseHeaderTimeout)
			n, err = up.ReadHead(c.cfg.MaxHeaderBytes, c.cfg.ResponseHeaderTimeout)
		}
		switch {
		case err == http1.ErrIdle:
			return errUpstreamClosed
		case err == http1.ErrHeadTooLarge:
			return errHeadTooLarge
		case err != nil:
			return err
		}
		if err := h.ParseResponse(up.Buf[up.R : up.R+n]); err != nil {
			return err
		}
		up.R += n
		switch {
		case h.Status == 101 && !upgrade:
			return errUnexpected101
		case h.Status < 200 && h.Status != 101:
			fields := responseFields(make([]hpack.HeaderField, 0, 4), h.Status, h, false, "", &o.vals)
			o.interim = true
			if err := s.sendHeaders(fields, false); err != nil {
				return err
			}
			continue
		}
		if h.TEOther {
			// HTTP/2 has no transfer codings: one in another is
			// refused, body or not, as on every front-end.
			return http1.ErrTransferCoding
		}
		return nil
	}
}

// noBody reports whether the response h to a request of method has no
// body.
func noBody(h *http1.Head, method string) bool {
	return method == "HEAD" || h.Status == 204 || h.Status == 304 || h.Status == 101 ||
		h.ContentLength == 0 && !h.Chunked && !h.TEOther
}

// relayResponse sends the response in o (head, body, trailers) on the
// stream and reports whether all of it was sent. A body of known length
// is sent from the read buffer as it arrives, a chunked one decoded in
// place, one delimited by the connection's close until its end.
func (s *stream) relayResponse(o *origin, method string) bool {
	c := s.c
	h := &o.head
	up := &o.up
	none := noBody(h, method)
	fields := responseFields(make([]hpack.HeaderField, 0, 16), h.Status, h, c.cfg.Via, "", &o.vals)
	// When body bytes are here already, the head goes out with them.
	if s.queueHeaders(fields, none, len(up.Buffered()) == 0) != nil {
		return false
	}
	s.answered(h.Status)
	if none {
		return true
	}
	s.relaying = true
	if h.Chunked {
		return s.relayChunked(o, fields[:0])
	}
	left := h.ContentLength // -1: up to the close
	for {
		b := up.Buffered()
		if left >= 0 && int64(len(b)) > left {
			b = b[:left]
		}
		if len(b) > 0 {
			if left >= 0 {
				left -= int64(len(b))
			}
			s.pace(len(b))
			// The last bytes of a body of known length carry END_STREAM.
			if s.sendData(b, left == 0) != nil {
				return false
			}
			up.R += len(b)
		}
		if left == 0 {
			return true
		}
		up.ArmReadDeadline(http1.MonoNow(), c.cfg.WriteTimeout)
		if err := up.Fill(len(up.Buf)); err != nil {
			if err == io.EOF && left < 0 {
				return s.sendData(nil, true) == nil
			}
			s.resetStream(http2.ErrCodeInternal)
			return false
		}
	}
}

// relayChunked sends a chunked body's data as DATA frames, each buffer's
// data runs gathered in place, and its trailer fields, if any, as a
// final HEADERS frame. fields is a slice to build the trailers in.
func (s *stream) relayChunked(o *origin, fields []hpack.HeaderField) bool {
	c := s.c
	up := &o.up
	cs := &o.cs
	*cs = http1.ChunkedScanner{}
	o.trailers = o.trailers[:0]
	for {
		avail := up.Buffered()
		w, m := 0, 0
		for m < len(avail) && !cs.Done() {
			t0 := cs.TrailerBytes()
			k, data, err := cs.Step(avail[m:])
			if err != nil {
				s.resetStream(http2.ErrCodeInternal)
				return false
			}
			if data {
				w += copy(avail[w:], avail[m:m+k])
			} else if t := cs.TrailerBytes() - t0; t > 0 {
				// The trailer section ends the framing runs.
				o.trailers = append(o.trailers, avail[m+k-t:m+k]...)
			}
			m += k
		}
		up.R += m
		// The last data carries END_STREAM unless trailers follow.
		end := cs.Done() && len(o.trailers) <= 2
		if w > 0 || end {
			s.pace(w)
			if s.sendData(avail[:w], end) != nil {
				return false
			}
		}
		if end {
			return true
		}
		if cs.Done() {
			break
		}
		up.ArmReadDeadline(http1.MonoNow(), c.cfg.WriteTimeout)
		if err := up.Fill(len(up.Buf)); err != nil {
			s.resetStream(http2.ErrCodeInternal)
			return false
		}
	}
	if err := o.trailer.ParseTrailers(o.trailers); err != nil {
		s.resetStream(http2.ErrCodeInternal)
		return false
	}
	if tf := responseFields(fields, 0, &o.trailer, false, "", nil); len(tf) > 0 {
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

// upgradesToWebSocket reports whether an Upgrade field of h lists the
// token "websocket".
func upgradesToWebSocket(h *http1.Head) bool {
	for i := range h.Fields {
		f := &h.Fields[i]
		if !http1.EqualFold(f.Name.Of(h.Buf), "upgrade") {
			continue
		}
		for _, tok := range strings.Split(string(f.Value.Of(h.Buf)), ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "websocket") {
				return true
			}
		}
	}
	return false
}
