package origin

import (
	"io"

	"github.com/rustle-proxy/rustle/internal/http1"
)

// bodyReader is the framing state of a response body read by NextBody.
type bodyReader struct {
	started bool
	done    bool
	chunked bool
	left    int64 // bytes of a body of known length still to come; -1 = up to the close
	cs      http1.ChunkedScanner
	// trailers holds a chunked body's trailer section ("\r\n" alone when
	// it has none); Trailer is parsed from it at the body's end.
	trailers []byte
}

// NextBody returns the next run of the response body's content, for a
// front-end that relays content rather than HTTP/1.1 framing (HTTP/2,
// HTTP/3): from Up's buffer, a chunked body's data runs gathered in
// place, more read when the buffer holds none (each wait bounded by
// WriteTimeout). The run is valid until the next call; last reports that
// the body ends with it (then, for a chunked body, see Trailer). A body
// delimited by the connection's close ends at the close; a body of known
// length, or a chunked one, that the upstream cuts short is an error
// (io.ErrUnexpectedEOF), as is malformed chunked framing. A response
// without a body (NoBody) is at its end at once.
func (x *Exchange) NextBody() (data []byte, last bool, err error) {
	b := &x.body
	if !b.started {
		*b = bodyReader{started: true, trailers: b.trailers[:0]}
		h := &x.Resp
		switch {
		case x.NoBody():
			b.done = true
		case h.Chunked:
			b.chunked = true
		case h.ContentLength >= 0 && !h.TEOther:
			b.left = h.ContentLength
		default:
			b.left = -1
		}
	}
	up := &x.Up
	for !b.done {
		if b.chunked {
			if data, err := x.nextChunks(); err != nil || len(data) > 0 || b.done {
				return data, b.done, err
			}
		} else {
			data := up.Buffered()
			if b.left >= 0 && int64(len(data)) > b.left {
				data = data[:b.left]
			}
			if len(data) > 0 {
				up.R += len(data)
				if b.left > 0 {
					b.left -= int64(len(data))
					b.done = b.left == 0
				}
				return data, b.done, nil
			}
			if b.left == 0 {
				b.done = true
				break
			}
		}
		up.ArmReadDeadline(http1.MonoNow(), x.c.cfg.WriteTimeout)
		if err := up.Fill(len(up.Buf)); err != nil {
			if err == io.EOF {
				if !b.chunked && b.left < 0 {
					b.done = true
					break
				}
				err = io.ErrUnexpectedEOF
			}
			return nil, false, err
		}
	}
	return nil, true, nil
}

// nextChunks gathers the data runs of the chunked framing in Up's buffer
// in place, consumes the framing, and returns the data; at the body's
// end it parses the trailer section into Trailer.
func (x *Exchange) nextChunks() ([]byte, error) {
	b := &x.body
	up := &x.Up
	avail := up.Buffered()
	w, m := 0, 0
	for m < len(avail) && !b.cs.Done() {
		t0 := b.cs.TrailerBytes()
		k, isData, err := b.cs.Step(avail[m:])
		if err != nil {
			return nil, err
		}
		if isData {
			w += copy(avail[w:], avail[m:m+k])
		} else if t := b.cs.TrailerBytes() - t0; t > 0 {
			// The trailer section ends the framing runs.
			b.trailers = append(b.trailers, avail[m+k-t:m+k]...)
		}
		m += k
	}
	up.R += m
	if b.cs.Done() {
		b.done = true
		if err := x.Trailer.ParseTrailers(b.trailers); err != nil {
			return nil, err
		}
	}
	return avail[:w], nil
}

// HasTrailer reports whether the chunked body NextBody read to its end
// had trailer fields.
func (x *Exchange) HasTrailer() bool { return x.body.done && len(x.body.trailers) > 2 }
