package h3

import (
	"context"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/quic-go/quic-go"

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
	rs  *reqStream
	x   origin.Exchange
	ctx context.Context // the stream's: done when the client resets it
	req origin.FieldRequest
	buf []byte // the request body's copy buffer
}

// reset ends e's exchange (its upstream, if any, is closed) and drops
// what refers to the request.
func (e *exchange) reset() {
	e.x.Close()
	e.ctx, e.rs = nil, nil
	e.req = origin.FieldRequest{}
}

// AppendHead appends the request head (see origin.AppendFieldHead). It is
// part of exchange's origin.Request.
func (e *exchange) AppendHead(dst []byte, parent *route.Parent) []byte {
	dst, _ = e.x.Client().AppendFieldHead(dst, &e.req, parent, e.x.Headers())
	return dst
}

// DialContext is the stream's context: a reset of the stream cancels the
// dial. It is part of exchange's origin.Request.
func (e *exchange) DialContext() (context.Context, func()) { return e.ctx, nil }

// Attach accepts the upstream unless the client has gone. It is part of
// exchange's origin.Request.
func (e *exchange) Attach(net.Conn) bool { return e.ctx.Err() == nil }

// Interim drops an informational answer: rustle relays none of an
// upstream's over HTTP/3. It is part of exchange's origin.Request.
func (e *exchange) Interim(*origin.Exchange) (bool, error) { return false, nil }

// forward serves a request for an HTTP/1.1 origin through the exchange
// every HTTP front-end shares (origin.Exchange): the request goes out on
// a pooled or new upstream (or to the route's http parent), without its
// hop-by-hop fields, with the configured Forwarded and Via; the response
// comes back without its own, with its trailers, and the upstream goes
// back to the pool when both messages were complete and the upstream
// keeps it.
func (rs *reqStream) forward(q *request) {
	s := rs.c.s
	g := &rs.g
	e := exchangePool.Get().(*exchange)
	e.rs, rs.x = rs, e
	e.ctx = rs.stream().Context()
	x := &e.x
	if err := x.Begin(s.cfg.Origin, g, rs.req.Method, origin.Plain); err != nil {
		rs.answerFailure(err, x, "")
		return
	}
	body, first := e.request(q)
	var upBytes int64 // request body bytes written upstream
	_, err := x.Send(e, origin.Body{Buffered: first, Done: body == nil, Empty: body == nil && len(first) == 0})
	if err == nil && len(first) > 0 {
		upBytes = 1 // the first byte, in a chunk of its own
	}
	var done chan bodyEnd // the body writer's result; nil when there is none
	if err == nil && body != nil {
		ch := make(chan bodyEnd, 1)
		done = ch
		x.StartBody()
		up := x.Up.C
		go func() { ch <- e.sendBody(g, up, body, e.ctx) }()
		err = x.ReadResponse(e)
		x.EndBody()
		if cut := x.WasCut(); cut || err != nil {
			upBytes += stopBody(done, up, &rs.body).n
			done = nil
			if cut {
				g.SetReason(accesslog.ReasonBadRequest)
				rs.answer(400, "request body incomplete", nil)
				return
			}
		}
	}
	if err != nil {
		rs.answerFailure(err, x, "")
		return
	}
	if refused, reuse := x.RetryOverHTTP11(); refused {
		// An answer only an HTTP/1.1 client connection can carry on
		// (NTLM, Negotiate): the client is asked to retry over it.
		if done != nil {
			upBytes += stopBody(done, x.Up.C, &rs.body).n
		}
		x.Release(reuse && done == nil)
		rs.refuseForHTTP11()
		g.Finish(upBytes, 0)
		return
	}
	// The client reset the stream: the upstream's reads end. The function
	// runs in a goroutine of its own, maybe after forward has returned and
	// the exchange has been reset: it holds the connection, not x (a
	// connection it cuts is not kept: stop reports false). A response
	// read whole already (a small one: see origin's awaitSmallBody) has
	// no read left to cut.
	up := x.Up.C
	stop := noStop
	if !bodyBuffered(x) {
		stop = context.AfterFunc(e.ctx, func() { up.SetDeadline(time.Unix(1, 0)) })
	}
	rs.responseHead(x)
	g.Answer(x.Resp.Status, 0)
	down, complete := rs.relayBody(x)
	bodySent := true
	if done != nil {
		end := bodyResult(done, up, &rs.body)
		upBytes += end.n
		bodySent = end.whole
	}
	kept := stop() // before the FIN, which ends the stream's context
	// The upstream goes back to the pool before the FIN: a client that
	// sends its next request once it has this answer whole finds it
	// there (TestForwardPooled saw a second connection dialed).
	x.Release(kept && complete && bodySent && x.KeepAlive())
	if complete {
		rs.stream().Close()
	}
	if body == nil {
		rs.stopReading()
	}
	g.Finish(upBytes, down)
}

// refuseForHTTP11 resets the stream with H3_VERSION_FALLBACK (RFC 9114
// §8.1): the client is to retry the request over HTTP/1.1 (see
// origin.Exchange.RetryOverHTTP11).
func (rs *reqStream) refuseForHTTP11() {
	rs.stream().CancelRead(quic.StreamErrorCode(errVersionFallback))
	rs.stream().CancelWrite(quic.StreamErrorCode(errVersionFallback))
}

// noStop is the stop function of no AfterFunc.
func noStop() bool { return true }

// bodyBuffered reports whether the response the exchange read is whole
// in its upstream's buffer: its relay reads nothing more.
func bodyBuffered(x *origin.Exchange) bool {
	h := &x.Resp
	return x.NoBody() || !h.Chunked && !h.TEOther && h.ContentLength >= 0 && int64(len(x.Up.Buffered())) >= h.ContentLength
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
// (the body closed: STOP_SENDING). It returns what the writer did.
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

// request readies e's request from the stream's head (q): its fields as
// the exchange builds the upstream head from them, and its body. It
// returns the body still to be read (nil when none) and, for a body of
// unknown length, its first byte framed as a chunk: read already to
// learn whether it has any (a request whose HEADERS ended the stream
// reads EOF at once, and goes without chunked framing).
func (e *exchange) request(q *request) (io.Reader, []byte) {
	rs := e.rs
	r := &rs.req
	e.req = origin.FieldRequest{
		Method:        r.Method,
		Authority:     r.Authority,
		Path:          r.Path,
		Fields:        r.Fields,
		ContentLength: r.ContentLength,
		ClientAddr:    rs.c.sess.ClientIP(),
		Via:           "3 rustle",
		Major:         3,
		Instance:      rs.c.sess.Policy().Instance,
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
		return &rs.body, nil
	}
	if cap(e.buf) == 0 {
		e.buf = make([]byte, 16<<10)
	}
	n, err := rs.body.Read(e.buf[:1])
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
	return &rs.body, first
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

// responseHead encodes the head of the response the exchange read into
// rs.sec: its status and fields less the hop-by-hop ones (those
// origin.HopByHop names, those its Connection field lists, and those the
// parser or the header rules dropped), names in lower case, with the
// header rules' fields and rustle's Via when the configuration asks for
// it.
func (rs *reqStream) responseHead(x *origin.Exchange) {
	resp := &x.Resp
	rs.startSection(resp.Status)
	for i := range resp.Fields {
		f := &resp.Fields[i]
		name := f.Name.Of(resp.Buf)
		if f.Drop || origin.HopByHop(string(name)) || resp.ConnectionLists(name) {
			continue
		}
		rs.sec = appendField(rs.sec, name, f.Value.Of(resp.Buf))
	}
	for _, f := range x.Headers().ResponseFields() {
		rs.sec = appendField(rs.sec, f.Name, f.Value)
	}
	if rs.c.s.cfg.Origin.Config().Via {
		rs.sec = appendField(rs.sec, "via", "1.1 rustle")
	}
}

// relayBody sends the response: its head (in rs.sec) with the first run
// of content when the upstream's buffer holds it, the rest of the
// content the exchange reads as DATA frames, pacing a paced user's
// bytes, then its trailers; the caller ends the stream. It returns the
// content bytes written and whether the whole body was; a body cut short
// resets the stream.
func (rs *reqStream) relayBody(x *origin.Exchange) (int64, bool) {
	g := &rs.g
	ctx := rs.x.ctx
	var down int64
	if x.NoBody() {
		return 0, rs.sendHead(nil, false) == nil
	}
	headDone := false
	if len(x.Up.Buffered()) == 0 {
		// Nothing of the body yet: the head goes out now.
		if rs.sendHead(nil, false) != nil {
			return 0, false
		}
		headDone = true
	}
	for {
		data, last, err := x.NextBody()
		if err != nil {
			g.SetReason(accesslog.ReasonUpstreamFailed)
			if !headDone {
				rs.sendHead(nil, false)
			}
			rs.stream().CancelWrite(quic.StreamErrorCode(errInternal))
			return down, false
		}
		if len(data) > 0 {
			g.Pace(ctx, len(data))
		}
		if !headDone {
			headDone = true
			if rs.sendHead(data, false) != nil {
				return down, false
			}
		} else if rs.sendData(data) != nil {
			return down, false
		}
		down += int64(len(data))
		if last {
			break
		}
	}
	if x.HasTrailer() {
		t := &x.Trailer
		rs.sec = appendSectionPrefix(rs.sec[:0])
		for i := range t.Fields {
			f := &t.Fields[i]
			rs.sec = appendField(rs.sec, f.Name.Of(t.Buf), f.Value.Of(t.Buf))
		}
		b := appendFrameHeader(rs.wbuf[:0], frameHeaders, len(rs.sec))
		b = append(b, rs.sec...)
		rs.wbuf = b
		if _, err := rs.stream().Write(b); err != nil {
			return down, false
		}
	}
	return down, true
}

// answerFailure answers a request whose upstream failed before any of
// the response was sent (see origin.Failure): x is the exchange of a
// forwarded request, nil for a tunnel or a flow to target.
func (rs *reqStream) answerFailure(err error, x *origin.Exchange, target string) {
	if x != nil && x.HTTP11Required(err) {
		// The origin reset its stream asking for HTTP/1.1: so is the
		// client asked.
		rs.refuseForHTTP11()
		rs.g.Finish(0, 0)
		return
	}
	var status int
	var reason, text string
	if x != nil {
		status, reason, text = x.Failure(err)
	} else {
		status, reason, text = origin.Failure(err, target)
	}
	if reason != "" {
		rs.g.SetReason(reason)
	}
	rs.answer(status, text, nil)
}
