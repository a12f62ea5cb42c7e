package h3

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/quic-go/quic-go"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/fieldreq"
	"github.com/rustle-proxy/rustle/internal/gate"
)

// readBufSize is a request stream's read buffer while its head is read:
// the HEADERS frame of most requests fits. A tunnel or a flow that
// parks keeps a small one instead (see park).
const readBufSize = 4 << 10

// reqStream is one request stream (RFC 9114 §4.1): the request's head,
// its content, rustle's answer, and the grant and exchange that serve
// it. reqStreams are pooled: their buffers grow once.
type reqStream struct {
	c *conn

	// The head's state, from headPool; nil once a tunnel or a flow has
	// parked (see park), as nothing reads it then.
	*reqHead

	fr    frameReader // its src is the stream (see stream)
	small [64]byte    // fr's buffer once parked
	body  bodyReader
	wbuf  []byte // frames being written

	g gate.Grant
	x *exchange // a forwarded request's exchange with its upstream; nil for others
}

// stream returns the request stream rs serves: its frame reader's
// source, which it does not keep twice (an idle flow or tunnel keeps its
// reqStream, in the 1152-byte size class).
func (rs *reqStream) stream() *quic.Stream { return rs.fr.src.(*quic.Stream) }

// reqHead is what a request stream needs while its head is read and
// answered, apart from its reqStream: a tunnel or a flow gives it back
// to headPool when it parks, so that an idle one keeps neither it nor
// its buffers.
type reqHead struct {
	rbuf   []byte // fr's buffer while the head is read
	fields []hpack.HeaderField
	req    fieldreq.Request
	sec    []byte // a field section being encoded
	scr    []byte // scratch: the target, credentials and Via as the gate takes them
}

var streamPool = sync.Pool{New: func() any { return new(reqStream) }}

var headPool = sync.Pool{New: func() any { return new(reqHead) }}

// putHead gives h back to headPool, dropping what refers to the request.
func putHead(h *reqHead) {
	clear(h.fields)
	h.fields = h.fields[:0]
	h.req = fieldreq.Request{}
	headPool.Put(h)
}

// exchangePool holds the exchanges of forwarded requests, apart from
// their reqStreams: a tunnel's or a flow's needs none.
var exchangePool = sync.Pool{New: func() any { return new(exchange) }}

// getStream returns a pooled reqStream for str of c.
func getStream(c *conn, str *quic.Stream) *reqStream {
	rs := streamPool.Get().(*reqStream)
	rs.c = c
	rs.reqHead = headPool.Get().(*reqHead)
	if rs.rbuf == nil {
		rs.rbuf = make([]byte, readBufSize)
	}
	rs.fr = frameReader{src: str, buf: rs.rbuf}
	return rs
}

// release gives rs back to the pool, dropping what refers to the
// request.
func (rs *reqStream) release() {
	if rs.x != nil {
		rs.x.reset()
		exchangePool.Put(rs.x)
		rs.x = nil
	}
	if h := rs.reqHead; h != nil {
		rs.reqHead = nil
		putHead(h)
	}
	rs.body = bodyReader{}
	rs.fr = frameReader{}
	rs.c = nil
	if cap(rs.wbuf) > 64<<10 {
		rs.wbuf = nil
	}
	streamPool.Put(rs)
}

// run serves the stream on a worker: the head is read here, and a
// tunnel or a flow moves to a goroutine of its own (whose stack stays
// small while it parks); anything else is served here.
func (rs *reqStream) run() {
	if rs.readHead() {
		switch rs.req.Kind {
		case fieldreq.Connect, fieldreq.ConnectUDP:
			go rs.serveAndEnd()
			return
		}
		rs.end(rs.serve())
		return
	}
	rs.finish()
}

func (rs *reqStream) serveAndEnd() {
	rs.end(rs.serve())
}

// end ends the stream's service once serve has returned, or hands it to
// the flow serve returned (handoff): only then, since that flow's
// goroutine gives rs back to the pool when the flow ends.
func (rs *reqStream) end(handoff *flow) {
	if handoff != nil {
		go handoff.run()
		return
	}
	rs.finish()
}

// finish ends the stream's service: the connection counts it, and rs
// goes back to the pool.
func (rs *reqStream) finish() {
	c := rs.c
	rs.release()
	c.end()
}

// readHead reads the request's HEADERS frame, skipping frames of unknown
// types before it (RFC 9114 §9), decodes and checks it, and reports
// whether the request is to be served; a stream or connection error is
// dealt with here.
func (rs *reqStream) readHead() bool {
	c := rs.c
	block, err := headBlock(&rs.fr, c.s.maxHeaderBytes)
	switch {
	case err == errIncomplete:
		rs.reset(errRequestIncomplete)
		return false
	case err == errFieldsTooLarge:
		rs.tooLarge()
		return false
	case err != nil:
		c.fail(err)
		return false
	}
	rs.fields, err = decodeFields(rs.fields[:0], block, c.s.maxHeaderBytes)
	if err == errFieldsTooLarge {
		rs.tooLarge()
		return false
	}
	if err != nil {
		c.fail(err)
		return false
	}
	rs.req, err = fieldreq.Parse(rs.fields, true, c.self)
	if err != nil {
		c.reject(pseudo(rs.fields, ":method"), err)
		rs.reset(errMessage)
		return false
	}
	rs.body = bodyReader{rs: rs, left: -1, length: rs.req.ContentLength}
	return true
}

// errIncomplete is a request stream that ended, or failed, within its
// head: the stream is reset with H3_REQUEST_INCOMPLETE.
var errIncomplete = errors.New("h3: request stream ended within its head")

// headBlock reads a request stream's frames up to its HEADERS frame,
// skipping frames of unknown types before it (RFC 9114 §9), and returns
// that frame's field section block, valid until fr's next read. Its
// errors: errIncomplete, errFieldsTooLarge for a block over max bytes, a
// *connError for a DATA frame or a frame a request stream may not carry
// before it (H3_FRAME_UNEXPECTED), or the stream's read error (a reset,
// say) other than its end.
func headBlock(fr *frameReader, max int) ([]byte, error) {
	for {
		typ, length, err := fr.header()
		if err != nil {
			if err == io.EOF || err == io.ErrUnexpectedEOF {
				return nil, errIncomplete
			}
			return nil, err
		}
		switch {
		case typ == frameHeaders:
			if length > uint64(max) {
				return nil, errFieldsTooLarge
			}
			block, err := fr.payload(int(length))
			if err != nil {
				return nil, errIncomplete
			}
			return block, nil
		case typ == frameData || forbiddenOnRequest(typ):
			return nil, &connError{code: errFrameUnexpected, why: fmt.Sprintf("frame type %#x before HEADERS on a request stream", typ)}
		default:
			if err := fr.skip(length); err != nil {
				if err == io.ErrUnexpectedEOF {
					return nil, errIncomplete
				}
				return nil, err
			}
		}
	}
}

// pseudo returns the value of the pseudo-header field name, "" when
// fields lack it.
func pseudo(fields []hpack.HeaderField, name string) string {
	for _, f := range fields {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// tooLarge answers a request whose field section is over the limit 431,
// having asked the client to stop sending (RFC 9114 §4.2.2), and logs
// it.
func (rs *reqStream) tooLarge() {
	rs.stream().CancelRead(quic.StreamErrorCode(errExcessiveLoad))
	var g gate.Grant
	rs.c.sess.Reject(&gate.Request{Log: accesslog.ProtoH3}, &g, 431, accesslog.ReasonProtocol, errFieldsTooLarge)
	rs.sendAnswer(431, "request header fields too large", nil)
}

// reset ends the stream both ways with code.
func (rs *reqStream) reset(code uint64) {
	rs.stream().CancelRead(quic.StreamErrorCode(code))
	rs.stream().CancelWrite(quic.StreamErrorCode(code))
}

// park readies a tunnel's or a flow's stream to idle: its reads use its
// small buffer when what is buffered fits (64 bytes, not 4 KiB), and the
// head's state (the request's fields, the answer's buffers, and the read
// buffer when it is not in use) goes back to headPool (the grant has
// what the access log needs). Nothing reads rs.reqHead after it.
func (rs *reqStream) park() {
	fr := &rs.fr
	h := rs.reqHead
	if n := fr.w - fr.r; n <= len(rs.small) {
		copy(rs.small[:], fr.buf[fr.r:fr.w])
		fr.buf, fr.r, fr.w = rs.small[:], 0, n
	} else {
		h.rbuf = nil // fr reads it still: the next request's head makes another
	}
	rs.reqHead = nil
	putHead(h)
	if cap(rs.wbuf) > 2<<10 {
		rs.wbuf = nil
	}
}

// bodyReader reads a request's content: the payload of its DATA frames
// (RFC 9114 §4.1), skipping frames of unknown types, up to its trailers,
// which are read and dropped. A content length the DATA frames do not
// match is an error (§4.1.2). A read cut by a deadline can be tried
// again.
type bodyReader struct {
	rs     *reqStream
	left   int64 // bytes left in the current DATA frame; -1 between frames
	skip   uint64
	length int64 // the content-length, -1 when none
	read   int64 // content bytes read
	err    error // sticky: io.EOF once read whole
}

// errContentLength is content that does not match its content-length.
var errContentLength = errors.New("h3: request content does not match its content-length")

func (b *bodyReader) Read(p []byte) (int, error) {
	if err := b.inData(); err != nil {
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rs.fr.read(p)
	b.left -= int64(n)
	b.read += int64(n)
	if b.length >= 0 && b.read > b.length {
		b.err = errContentLength
		return n, b.err
	}
	if err != nil && !isTimeout(err) {
		b.err = noEOF(err) // the stream ended within a DATA frame
		return n, b.err
	}
	return n, err
}

// inData readies b to read content: its error once it has one, else
// the frames up to the next DATA frame's payload read past (a timeout
// returned, not kept: the read may be tried again).
func (b *bodyReader) inData() error {
	if b.err != nil {
		return b.err
	}
	for b.left <= 0 {
		if err := b.nextData(); err != nil {
			if !isTimeout(err) {
				b.err = err
			}
			return err
		}
	}
	return nil
}

// ReadByte reads one byte of the content, from the stream's buffer: a
// flow's capsule reader reads capsule headers so, with no buffer of its
// own.
func (b *bodyReader) ReadByte() (byte, error) {
	if err := b.inData(); err != nil {
		return 0, err
	}
	fr := &b.rs.fr
	if fr.r == fr.w {
		if err := fr.fill(); err != nil {
			if isTimeout(err) {
				return 0, err
			}
			b.err = noEOF(err) // the stream ended within a DATA frame
			return 0, b.err
		}
	}
	c := fr.buf[fr.r]
	fr.r++
	b.left--
	b.read++
	if b.length >= 0 && b.read > b.length {
		b.err = errContentLength
		return 0, b.err
	}
	return c, nil
}

// waitData waits until some of the stream is buffered or has come, or
// the stream has ended or failed (the read that follows returns why).
// A flow's goroutine parks here while the client sends no capsule, for
// the flow's life: quic-go's Peek beneath a shallow frame, where a Read
// beneath the capsule, content and frame readers would grow its stack
// from 2 to 4 KiB.
func (rs *reqStream) waitData() {
	fr := &rs.fr
	if fr.r < fr.w || fr.err != nil {
		return
	}
	var one [1]byte
	rs.stream().Peek(one[:])
}

// nextData reads frame headers up to the next DATA frame's, skipping the
// frames before it; io.EOF at the end of the content.
func (b *bodyReader) nextData() error {
	fr := &b.rs.fr
	for {
		for b.skip > 0 {
			if fr.r == fr.w {
				if err := fr.fill(); err != nil {
					return noEOF(err)
				}
			}
			k := min(b.skip, uint64(fr.w-fr.r))
			fr.r += int(k)
			b.skip -= k
		}
		typ, length, err := fr.header()
		switch {
		case err == io.EOF:
			if b.length >= 0 && b.read != b.length {
				return errContentLength
			}
			return io.EOF
		case err != nil:
			return err
		}
		switch {
		case typ == frameData:
			b.left = int64(length)
			if length > 0 {
				return nil
			}
		case typ == frameHeaders:
			// Trailers end the content: the stream must end behind them.
			if length > uint64(b.rs.c.s.maxHeaderBytes) {
				return errFieldsTooLarge
			}
			if err := fr.skip(length); err != nil {
				return err
			}
			if _, _, err := fr.header(); err != io.EOF {
				b.rs.c.close(errFrameUnexpected, "a frame after the trailers")
				return errMalformedBody
			}
			if b.length >= 0 && b.read != b.length {
				return errContentLength
			}
			return io.EOF
		case forbiddenOnRequest(typ):
			b.rs.c.close(errFrameUnexpected, fmt.Sprintf("frame type %#x on a request stream", typ))
			return errMalformedBody
		default:
			b.skip = length
		}
	}
}

// Close stops reading the content: the client is asked to stop sending
// (STOP_SENDING with H3_NO_ERROR, RFC 9114 §4.1.1), and a pending Read
// returns.
func (b *bodyReader) Close() error {
	b.rs.stream().CancelRead(quic.StreamErrorCode(errNoError))
	return nil
}

// sendHead writes the response's HEADERS frame, the field section in
// rs.sec, with the first content, body, when there is some, in the same
// write; end ends the stream after them.
func (rs *reqStream) sendHead(body []byte, end bool) error {
	b := appendFrameHeader(rs.wbuf[:0], frameHeaders, len(rs.sec))
	b = append(b, rs.sec...)
	if len(body) > 0 {
		b = appendFrameHeader(b, frameData, len(body))
		b = append(b, body...)
	}
	rs.wbuf = b
	_, err := rs.stream().Write(b)
	if end && err == nil {
		err = rs.stream().Close()
	}
	return err
}

// sendData writes p as a DATA frame.
func (rs *reqStream) sendData(p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if len(p) <= 1<<10 {
		// A small one in one write.
		b := appendFrameHeader(rs.wbuf[:0], frameData, len(p))
		b = append(b, p...)
		rs.wbuf = b
		_, err := rs.stream().Write(b)
		return err
	}
	var hdr [16]byte
	if _, err := rs.stream().Write(appendFrameHeader(hdr[:0], frameData, len(p))); err != nil {
		return err
	}
	_, err := rs.stream().Write(p)
	return err
}

// startSection begins the field section of a response of status in
// rs.sec; the caller appends its fields with appendField.
func (rs *reqStream) startSection(status int) {
	rs.sec = appendStatus(appendSectionPrefix(rs.sec[:0]), status)
}

// sendAnswer sends rustle's own answer: status with a one-line text body
// "rustle: reason" (its length alone to a HEAD), and the fields of extra
// (name, value pairs), and ends the stream.
func (rs *reqStream) sendAnswer(status int, reason string, extra []string) {
	rs.startSection(status)
	for i := 0; i+1 < len(extra); i += 2 {
		rs.sec = appendField(rs.sec, extra[i], extra[i+1])
	}
	body := append(append(append(rs.scr[:0], "rustle: "...), reason...), '\n')
	rs.scr = body
	rs.sec = appendField(rs.sec, "content-type", "text/plain; charset=utf-8")
	rs.sec = appendField(rs.sec, "content-length", itoa(rs.wbuf[:0], len(body)))
	if rs.req.Method == "HEAD" {
		body = nil // the answer to a HEAD has no content (RFC 9110 §9.3.2)
	}
	rs.sendHead(body, true)
	rs.stopReading()
}

// stopReading asks the client to stop sending the content rustle has not
// read, when there may be some: a request answered without it.
func (rs *reqStream) stopReading() {
	if !rs.fr.atEOF() {
		rs.stream().CancelRead(quic.StreamErrorCode(errNoError))
	}
}
