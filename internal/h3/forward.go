package h3

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/route"
)

// exchange is the HTTP/3 side of a forwarded request's exchange with its
// upstream (origin.Exchange, the same as the other front-ends'): what the
// exchange asks of the request (origin.Request). exchanges are pooled:
// their buffers grow once.
type exchange struct {
	x      origin.Exchange
	ctx    context.Context // the request's: done when the client resets the stream
	req    origin.FieldRequest
	fields []hpack.HeaderField // req.Fields' backing array
	buf    []byte              // the request body's copy buffer
}

var exchangePool = sync.Pool{New: func() any { return new(exchange) }}

// putExchange ends e's exchange (its upstream, if any, is closed) and
// gives e back to the pool.
func putExchange(e *exchange) {
	e.x.Close()
	e.ctx = nil
	clear(e.fields)
	e.fields = e.fields[:0]
	e.req = origin.FieldRequest{}
	exchangePool.Put(e)
}

// AppendHead appends the request head (see origin.AppendFieldHead). It is
// part of exchange's origin.Request.
func (e *exchange) AppendHead(dst []byte, parent *route.Parent) []byte {
	dst, _ = e.x.Client().AppendFieldHead(dst, &e.req, parent, e.x.Headers())
	return dst
}

// DialContext is the request's context: a reset of the stream cancels
// the dial. It is part of exchange's origin.Request.
func (e *exchange) DialContext() (context.Context, func()) { return e.ctx, nil }

// Attach accepts the upstream unless the client has gone. It is part of
// exchange's origin.Request.
func (e *exchange) Attach(net.Conn) bool { return e.ctx.Err() == nil }

// Interim drops an informational answer: quic-go's response writer sends
// none of an upstream's. It is part of exchange's origin.Request.
func (e *exchange) Interim(*origin.Exchange) (bool, error) { return false, nil }

// forward serves a request for an HTTP/1.1 origin through the exchange
// every HTTP front-end shares (origin.Exchange): the request goes out on
// a pooled or new upstream (or to the route's http parent), without its
// hop-by-hop fields, with the configured Forwarded and Via; the response
// comes back without its own, with its trailers, and the upstream goes
// back to the pool when both messages were complete and the upstream
// keeps it.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, cs *connState, q *request, g *gate.Grant) {
	e := exchangePool.Get().(*exchange)
	defer putExchange(e)
	e.ctx = r.Context()
	x := &e.x
	if err := x.Begin(s.cfg.Origin, g, r.Method, origin.Plain); err != nil {
		s.answerFailure(w, g, err, x, "")
		return
	}
	body, first := e.request(r, cs, q)
	var upBytes int64 // request body bytes written upstream
	_, err := x.Send(e, origin.Body{Buffered: first, Done: body == nil, Empty: body == nil && len(first) == 0})
	if err == nil && len(first) > 0 {
		upBytes = 1 // the first byte, in a chunk of its own
	}
	var done chan bodyEnd // the body writer's result; nil when there is none
	if err == nil && body != nil {
		done = make(chan bodyEnd, 1)
		x.StartBody()
		up := x.Up.C
		go func() { done <- e.sendBody(g, up, body, r.Context()) }()
		err = x.ReadResponse(e)
		x.EndBody()
		if cut := x.WasCut(); cut || err != nil {
			upBytes += stopBody(done, up, r.Body).n
			done = nil
			if cut {
				g.SetReason(accesslog.ReasonBadRequest)
				answer(w, g, 400, "request body incomplete")
				return
			}
		}
	}
	if err != nil {
		s.answerFailure(w, g, err, x, "")
		return
	}
	stop := context.AfterFunc(r.Context(), func() { x.Up.C.SetDeadline(time.Unix(1, 0)) }) // the client reset the stream
	s.responseHead(w.Header(), x)
	w.WriteHeader(x.Resp.Status)
	g.Answer(x.Resp.Status, 0)
	down, complete := s.relayBody(w, g, r.Context(), x)
	bodySent := true
	if done != nil {
		end := bodyResult(done, x.Up.C, r.Body)
		upBytes += end.n
		bodySent = end.whole
	}
	x.Release(stop() && complete && bodySent && x.KeepAlive())
	g.Finish(upBytes, down)
}

// bodyEnd is how a request body's writer ended: the bytes it wrote, and
// whether they were the whole body.
type bodyEnd struct {
	n     int64
	whole bool
}

// bodyResult waits for the request body's writer once the response has
// been relayed. When the origin has answered without taking the whole
// body, the writer is given a moment and then cut off (see stopBody).
func bodyResult(done <-chan bodyEnd, up net.Conn, body io.Closer) bodyEnd {
	select {
	case end := <-done:
		return end
	default:
	}
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case end := <-done:
		return end
	case <-t.C:
	}
	end := stopBody(done, up, body)
	end.whole = false
	return end
}

// stopBody cuts the request body's writer short wherever it waits: for
// the upstream (a deadline in the past, set again until the writer has
// returned, as it re-arms its own before each write) or for the client
// (the body closed, which quic-go answers with STOP_SENDING). It returns
// what the writer did.
func stopBody(done <-chan bodyEnd, up net.Conn, body io.Closer) bodyEnd {
	body.Close()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		up.SetDeadline(time.Unix(1, 0))
		select {
		case end := <-done:
			return end
		case <-tick.C:
		}
	}
}

// request readies e's request from r (q): its fields as the exchange builds
// the upstream head from them, and its body. It returns the body still to
// be read (nil when none) and, for a body of unknown length, its first
// byte framed as a chunk: read already to learn whether it has any (a
// request whose HEADERS ended the stream reads EOF at once, and goes
// without chunked framing).
func (e *exchange) request(r *http.Request, cs *connState, q *request) (io.Reader, []byte) {
	for name, vs := range r.Header {
		lname := lowerName(name)
		for _, v := range vs {
			e.fields = append(e.fields, hpack.HeaderField{Name: lname, Value: v})
		}
	}
	e.req = origin.FieldRequest{
		Method:        r.Method,
		Authority:     r.Host,
		Path:          r.RequestURI,
		Fields:        e.fields,
		ContentLength: r.ContentLength,
		ClientAddr:    cs.sess.ClientIP(),
		Via:           "3 rustle",
		Major:         3,
		Instance:      cs.sess.Policy().Instance,
		MaxForwards:   -1,
	}
	if q.limitHops {
		e.req.MaxForwards = q.maxFwd
	}
	switch {
	case r.ContentLength == 0:
		return nil, nil
	case r.ContentLength > 0:
		e.req.HasBody = true
		return r.Body, nil
	}
	if cap(e.buf) == 0 {
		e.buf = make([]byte, 16<<10)
	}
	n, err := r.Body.Read(e.buf[:1])
	if n == 0 && err == io.EOF {
		e.req.ContentLength = 0
		return nil, nil
	}
	e.req.HasBody = true
	first := make([]byte, 0, 8+n+2)
	first = strconv.AppendInt(first, int64(n), 16)
	first = append(first, "\r\n"...)
	first = append(first, e.buf[:n]...)
	first = append(first, "\r\n"...)
	if err != nil {
		return errReader{err}, first
	}
	return r.Body, first
}

// lowerName returns a canonical header name in lower case, as HTTP/3
// names fields.
func lowerName(name string) string {
	for i := 0; i < len(name); i++ {
		if c := name[i]; 'A' <= c && c <= 'Z' {
			b := []byte(name)
			for j := i; j < len(b); j++ {
				if c := b[j]; 'A' <= c && c <= 'Z' {
					b[j] = c + 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return name
}

// errReader is a body whose first read failed.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// sendBody writes the rest of the request body from body to the
// upstream, chunked when its length is unknown, pacing a paced user's
// bytes, and tells the exchange how it ended: sent (or failed upstream:
// the origin may answer all the same), or cut on the client's side. It
// returns the body's bytes written and whether that was all of it.
func (e *exchange) sendBody(g *gate.Grant, up net.Conn, body io.Reader, ctx context.Context) bodyEnd {
	x := &e.x
	chunked := e.req.ContentLength < 0
	timeout := x.Client().Config().WriteTimeout
	if cap(e.buf) == 0 {
		e.buf = make([]byte, 16<<10)
	}
	var written int64
	var hdr [20]byte
	for {
		n, rerr := body.Read(e.buf[:cap(e.buf)])
		if n > 0 {
			g.Pace(ctx, n)
			up.SetWriteDeadline(gate.Deadline(time.Now(), timeout))
			var werr error
			if chunked {
				h := strconv.AppendInt(hdr[:0], int64(n), 16)
				h = append(h, "\r\n"...)
				bufs := net.Buffers{h, e.buf[:n], []byte("\r\n")}
				var w int64
				w, werr = bufs.WriteTo(up)
				written += min(max(w-int64(len(h)), 0), int64(n))
			} else {
				var w int
				w, werr = up.Write(e.buf[:n])
				written += int64(w)
			}
			if werr != nil {
				x.BodySent() // failed upstream: the origin may answer
				return bodyEnd{written, false}
			}
		}
		switch {
		case rerr == io.EOF:
			whole := true
			if chunked {
				up.SetWriteDeadline(gate.Deadline(time.Now(), timeout))
				_, werr := up.Write([]byte("0\r\n\r\n"))
				whole = werr == nil
			}
			x.BodySent()
			return bodyEnd{written, whole}
		case rerr != nil:
			x.BodyCut()
			return bodyEnd{written, false}
		}
	}
}

// responseHead sets h to the fields of the response the exchange read,
// less the hop-by-hop ones (those origin.HopByHop names, those its
// Connection field lists, and those the parser or the header rules
// dropped), with the header rules' fields and rustle's Via when the
// configuration asks for it.
func (s *Server) responseHead(h http.Header, x *origin.Exchange) {
	resp := &x.Resp
	for i := range resp.Fields {
		f := &resp.Fields[i]
		name := f.Name.Of(resp.Buf)
		if f.Drop || origin.HopByHop(string(name)) || resp.ConnectionLists(name) {
			continue
		}
		key := http.CanonicalHeaderKey(string(name))
		h[key] = append(h[key], string(f.Value.Of(resp.Buf)))
	}
	for _, f := range x.Headers().ResponseFields() {
		key := http.CanonicalHeaderKey(f.Name)
		h[key] = append(h[key], f.Value)
	}
	if s.cfg.Origin.Config().Via {
		h.Add("Via", "1.1 rustle")
	}
}

// relayBody writes the response body the exchange reads to w, pacing a
// paced user's bytes, then its trailers. It returns the bytes written
// and whether the whole body was.
func (s *Server) relayBody(w http.ResponseWriter, g *gate.Grant, ctx context.Context, x *origin.Exchange) (int64, bool) {
	var down int64
	for {
		data, last, err := x.NextBody()
		if err != nil {
			g.SetReason(accesslog.ReasonUpstreamFailed)
			return down, false
		}
		if len(data) > 0 {
			g.Pace(ctx, len(data))
			m, werr := w.Write(data)
			down += int64(m)
			if werr != nil {
				return down, false
			}
		}
		if last {
			break
		}
	}
	if x.HasTrailer() {
		t := &x.Trailer
		h := w.Header()
		for i := range t.Fields {
			f := &t.Fields[i]
			h.Add(http.TrailerPrefix+string(f.Name.Of(t.Buf)), string(f.Value.Of(t.Buf)))
		}
	}
	return down, true
}

// answerFailure answers a request whose upstream failed before any of
// the response was sent (see origin.Failure): x is the exchange of a
// forwarded request, nil for a tunnel or a flow to target.
func (s *Server) answerFailure(w http.ResponseWriter, g *gate.Grant, err error, x *origin.Exchange, target string) {
	var status int
	var reason, text string
	if x != nil {
		status, reason, text = x.Failure(err)
	} else {
		status, reason, text = origin.Failure(err, target)
	}
	if reason != "" {
		g.SetReason(reason)
	}
	answer(w, g, status, text)
}
