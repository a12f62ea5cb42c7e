package h2

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Header blocks (a HEADERS frame and its CONTINUATION frames) are decoded
// here rather than by x/net/http2's Framer with ReadMetaHeaders set, which
// allocates about nine times per block (the frame, its field slice, the
// decoder's emit closure and the variables it captures). blockDecoder
// keeps all of that framer's checks, in the same order and with the same
// errors (FuzzHeaderBlock compares the two), and decodes the fragments
// straight out of the connection's read buffer: a request's fields land
// in a pooled fieldBuf, which its stream takes and gives back.

// fieldBuf holds the fields of a decoded header block.
type fieldBuf struct{ f []hpack.HeaderField }

// fieldBufKeep is the most fields a fieldBuf may hold room for and go
// back to fieldPool: a client's one huge header list does not stay
// pooled.
const fieldBufKeep = 64

// fieldPool holds *fieldBuf, empty.
var fieldPool = sync.Pool{New: func() any { return &fieldBuf{f: make([]hpack.HeaderField, 0, 16)} }}

// putFieldBuf gives b back to fieldPool, dropping its fields' strings.
func putFieldBuf(b *fieldBuf) {
	if cap(b.f) > fieldBufKeep {
		return
	}
	clear(b.f)
	b.f = b.f[:0]
	fieldPool.Put(b)
}

// payloadReader hands out the payload of the frame whose header was just
// read, and then of the frames after it.
type payloadReader interface {
	// next returns between 1 and n of the next bytes, which are valid
	// until the next call.
	next(n int) ([]byte, error)
}

// errPseudoAfterRegular is a pseudo-header field after a regular one
// (RFC 9113 §8.3).
var errPseudoAfterRegular = errors.New("h2: pseudo-header field after a regular one")

// blockDecoder decodes the client's header blocks with the connection's
// HPACK decoder. It is owned by the connection's reader.
type blockDecoder struct {
	dec *hpack.Decoder
	max uint32 // the largest header list allowed (SETTINGS_MAX_HEADER_LIST_SIZE)

	// The block last read.
	id        uint32
	flags     http2.Flags // of its HEADERS frame
	priority  http2.PriorityParam
	buf       *fieldBuf // its fields; nil once a stream has taken them (take)
	truncated bool      // fields were dropped: the header list is over max

	// The budgets and state of the emit function while decoding.
	headersLeft, trailersLeft uint32
	sawRegular                bool
	invalid                   error // the first invalid field
}

// newBlockDecoder returns a decoder for header lists of up to max bytes
// (0: 16 MiB, x/net/http2's default).
func newBlockDecoder(max uint32) *blockDecoder {
	if max == 0 {
		max = 16 << 20
	}
	d := &blockDecoder{max: max}
	d.dec = hpack.NewDecoder(4096, d.emit)
	if int(max) > 0 {
		d.dec.SetMaxStringLength(int(max))
	}
	return d
}

// fields returns the fields of the block last read.
func (d *blockDecoder) fields() []hpack.HeaderField {
	if d.buf == nil {
		return nil
	}
	return d.buf.f
}

// take hands the buffer of the block's fields to the caller, which gives
// it back with putFieldBuf once it no longer reads them.
func (d *blockDecoder) take() *fieldBuf {
	b := d.buf
	d.buf = nil
	return b
}

// release gives back the buffer of the block last read, if no stream took
// it, so that an idle connection holds none.
func (d *blockDecoder) release() {
	if d.buf != nil {
		putFieldBuf(d.buf)
		d.buf = nil
	}
}

// pseudo returns the value of the pseudo-header field name (":method")
// of the block last read, "" when it has none.
func (d *blockDecoder) pseudo(name string) string {
	for _, f := range d.fields() {
		if !strings.HasPrefix(f.Name, ":") {
			break
		}
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// endStream reports whether the block's HEADERS frame ended its stream.
func (d *blockDecoder) endStream() bool { return d.flags.Has(http2.FlagHeadersEndStream) }

// emit is the HPACK decoder's emit function: it checks each field as
// x/net/http2's Framer does and keeps it while the header list is within
// its budget.
func (d *blockDecoder) emit(f hpack.HeaderField) {
	if !httpguts.ValidHeaderFieldValue(f.Value) {
		// The value is not in the error: it may be sensitive.
		d.invalid = errMalformed("invalid value of field " + f.Name)
	}
	if strings.HasPrefix(f.Name, ":") {
		if d.sawRegular {
			d.invalid = errPseudoAfterRegular
		}
	} else {
		d.sawRegular = true
		if !validFieldName(f.Name) {
			d.invalid = errMalformed("invalid field name " + strconv.Quote(f.Name))
		}
	}
	if d.invalid != nil {
		d.dec.SetEmitEnabled(false)
		return
	}
	left := &d.headersLeft
	var size uint32
	if f.Name == "trailer" {
		// As x/net/http2 counts it: each trailer it names costs a
		// field's overhead.
		left = &d.trailersLeft
		n := strings.Count(f.Value, ",") + 1
		size = uint32(len(f.Value)-n+1) + uint32(n)*hpack.HeaderField{}.Size()
	} else {
		size = f.Size()
	}
	if size > *left {
		d.dec.SetEmitEnabled(false)
		d.truncated = true
		d.headersLeft, d.trailersLeft = 0, 0
		return
	}
	*left -= size
	d.buf.f = append(d.buf.f, f)
}

// blockConnError is a connection error found in a header block.
func blockConnError(code http2.ErrCode, why string) error {
	return fmt.Errorf("h2: reading a header block: %s: %w", why, http2.ConnectionError(code))
}

// read reads and decodes the header block whose HEADERS frame header fh
// was just read: the frame's payload from src, then its CONTINUATION
// frames, their headers from fr (which checks their size and order) and
// their payloads from src. It keeps the checks of x/net/http2's Framer
// with ReadMetaHeaders set: a HEADERS frame on stream 0 or with more
// padding than payload, a fragment far over the header list's budget, a
// fragment after an invalid field and an HPACK error end the connection;
// invalid fields and pseudo-header fields (out of order, unknown,
// repeated, of a request and a response) reset the stream; a header
// list over the budget is decoded to its end, its fields past the budget
// dropped, and marked truncated. A padded or prioritised frame too short
// for its fields is io.ErrUnexpectedEOF.
func (d *blockDecoder) read(fh http2.FrameHeader, fr *http2.Framer, src payloadReader) error {
	d.id, d.flags, d.priority = fh.StreamID, fh.Flags, http2.PriorityParam{}
	d.truncated, d.sawRegular, d.invalid = false, false, nil
	d.headersLeft, d.trailersLeft = d.max, d.max
	d.dec.SetEmitEnabled(true) // emit may have turned it off in the block before
	if d.buf == nil {
		d.buf = fieldPool.Get().(*fieldBuf)
	} else {
		clear(d.buf.f)
		d.buf.f = d.buf.f[:0]
	}

	// The HEADERS frame's own fields: pad length, priority.
	n := int(fh.Length)
	var pre [6]byte
	k := 0
	if fh.Flags.Has(http2.FlagHeadersPadded) {
		k = 1
	}
	if fh.Flags.Has(http2.FlagHeadersPriority) {
		k += 5
	}
	if fh.StreamID == 0 || n < k {
		// The framer reads the payload before it looks at it.
		if err := skip(src, n); err != nil {
			return err
		}
		if fh.StreamID == 0 {
			return blockConnError(http2.ErrCodeProtocol, "HEADERS frame with stream ID 0")
		}
		return io.ErrUnexpectedEOF
	}
	if err := readFull(src, pre[:k]); err != nil {
		return err
	}
	pad := 0
	p := pre[:k]
	if fh.Flags.Has(http2.FlagHeadersPadded) {
		pad, p = int(p[0]), p[1:]
	}
	if fh.Flags.Has(http2.FlagHeadersPriority) {
		v := binary.BigEndian.Uint32(p)
		d.priority.StreamDep = v & 0x7fffffff
		d.priority.Exclusive = v != d.priority.StreamDep
		d.priority.Weight = p[4]
	}
	frag := n - k - pad
	if frag < 0 {
		if err := skip(src, n-k); err != nil {
			return err
		}
		return http2.StreamError{StreamID: fh.StreamID, Code: http2.ErrCodeProtocol}
	}

	for {
		// Too much: any fragment once the budget is spent, or one of
		// more than twice what is left of it (CVE-2023-45288).
		if int64(frag) > 2*int64(d.headersLeft+d.trailersLeft) {
			return blockConnError(http2.ErrCodeProtocol, "header list too large")
		}
		// Field sizes are not followed past an invalid field.
		if d.invalid != nil {
			return blockConnError(http2.ErrCodeProtocol, "fragment after an invalid field")
		}
		for frag > 0 {
			b, err := src.next(frag)
			if err != nil {
				return err
			}
			frag -= len(b)
			if _, err := d.dec.Write(b); err != nil {
				return blockConnError(http2.ErrCodeCompression, err.Error())
			}
		}
		if err := skip(src, pad); err != nil {
			return err
		}
		if fh.Flags.Has(http2.FlagHeadersEndHeaders) { // CONTINUATION's END_HEADERS is the same bit
			break
		}
		var err error
		if fh, err = fr.ReadFrameHeader(); err != nil {
			return err
		}
		// The framer's order check has made it a CONTINUATION of
		// this stream.
		if fh.StreamID == 0 {
			return blockConnError(http2.ErrCodeProtocol, "CONTINUATION frame with stream ID 0")
		}
		frag, pad = int(fh.Length), 0
	}
	if err := d.dec.Close(); err != nil {
		return blockConnError(http2.ErrCodeCompression, err.Error())
	}
	if d.invalid != nil {
		return http2.StreamError{StreamID: d.id, Code: http2.ErrCodeProtocol, Cause: d.invalid}
	}
	if err := checkPseudos(d.buf.f); err != nil {
		return http2.StreamError{StreamID: d.id, Code: http2.ErrCodeProtocol, Cause: err}
	}
	return nil
}

// checkPseudos checks the pseudo-header fields that lead fields as
// x/net/http2's Framer does: known names only, none twice, not those of
// a request and a response together.
func checkPseudos(fields []hpack.HeaderField) error {
	var request, response bool
	for i, f := range fields {
		if !strings.HasPrefix(f.Name, ":") {
			break
		}
		switch f.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			request = true
		case ":status":
			response = true
		default:
			return errMalformed("pseudo-header field " + strconv.Quote(f.Name))
		}
		for _, g := range fields[:i] {
			if f.Name == g.Name {
				return errMalformed("repeated " + f.Name)
			}
		}
	}
	if request && response {
		return errMalformed("pseudo-header fields of a request and a response")
	}
	return nil
}

// readFull fills p from src.
func readFull(src payloadReader, p []byte) error {
	for len(p) > 0 {
		b, err := src.next(len(p))
		if err != nil {
			return err
		}
		p = p[copy(p, b):]
	}
	return nil
}

// skip reads n bytes from src and drops them.
func skip(src payloadReader, n int) error {
	for n > 0 {
		b, err := src.next(n)
		if err != nil {
			return err
		}
		n -= len(b)
	}
	return nil
}
