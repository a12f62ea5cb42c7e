package h3

import (
	"errors"
	"io"
	"os"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"
)

// HTTP/3 frame types (RFC 9114 §7.2).
const (
	frameData        = 0x00
	frameHeaders     = 0x01
	frameCancelPush  = 0x03
	frameSettings    = 0x04
	framePushPromise = 0x05
	frameGoAway      = 0x07
	frameMaxPushID   = 0x0d
)

// Unidirectional stream types (RFC 9114 §6.2, RFC 9204 §4.2).
const (
	streamControl      = 0x00
	streamPush         = 0x01
	streamQPACKEncoder = 0x02
	streamQPACKDecoder = 0x03
)

// Settings (RFC 9114 §7.2.4.1, RFC 9204 §5, RFC 9220 §3, RFC 9297 §2.1.1).
const (
	settingMaxFieldSectionSize   = 0x06
	settingEnableConnectProtocol = 0x08
	settingH3Datagram            = 0x33
)

// HTTP/3 error codes (RFC 9114 §8.1, RFC 9204 §6, RFC 9297 §5.2).
const (
	errNoError                  = 0x100
	errInternal                 = 0x102
	errStreamCreation           = 0x103
	errClosedCriticalStream     = 0x104
	errFrameUnexpected          = 0x105
	errFrame                    = 0x106
	errExcessiveLoad            = 0x107
	errID                       = 0x108
	errSettings                 = 0x109
	errMissingSettings          = 0x10a
	errRequestRejected          = 0x10b
	errRequestIncomplete        = 0x10d
	errMessage                  = 0x10e
	errConnect                  = 0x10f
	errVersionFallback          = 0x110
	errQPACKDecompressionFailed = 0x200
	errDatagram                 = 0x33
)

// The codes as quic-go takes them.
const (
	codeNoError       = quic.ApplicationErrorCode(errNoError)
	codeExcessiveLoad = quic.ApplicationErrorCode(errExcessiveLoad)
)

// maxQuarterStreamID is the largest quarter stream ID of an HTTP Datagram
// (RFC 9297 §2.1): a stream ID is at most 2^62-1.
const maxQuarterStreamID = 1<<60 - 1

// maxSettingsSize bounds the SETTINGS frame rustle reads.
const maxSettingsSize = 8 << 10

// connError is an error of the whole connection (RFC 9114 §8): the
// connection is closed with code.
type connError struct {
	code uint64
	why  string
}

func (e *connError) Error() string { return "h3: connection error: " + e.why }

// errStreamError is a request stream's framing gone wrong: it is reset
// with errMessage.
var errMalformedBody = errors.New("h3: malformed request content")

// frameReader reads the frames of a stream: frame headers and small
// payloads from its buffer, bulk payload (DATA) straight into the
// caller's slice.
type frameReader struct {
	src  io.Reader
	buf  []byte // the buffered bytes are buf[r:w]
	r, w int
	err  error // what src's last read returned, io.EOF at the stream's end
}

// fill reads more of the stream into buf, moving what is buffered to its
// start. It returns an error only when it read nothing.
func (f *frameReader) fill() error {
	if f.r > 0 {
		f.w = copy(f.buf, f.buf[f.r:f.w])
		f.r = 0
	}
	if f.err != nil {
		return f.err
	}
	if f.w == len(f.buf) {
		return io.ErrShortBuffer
	}
	n, err := f.src.Read(f.buf[f.w:])
	f.w += n
	if err != nil && !isTimeout(err) {
		f.err = err
	}
	if n > 0 {
		return nil
	}
	if err == nil {
		return io.ErrNoProgress
	}
	return err
}

// need buffers at least n bytes; io.EOF when the stream ended before the
// first of them, io.ErrUnexpectedEOF within them.
func (f *frameReader) need(n int) error {
	for f.w-f.r < n {
		had := f.w - f.r
		if err := f.fill(); err != nil {
			if err == io.EOF && had > 0 {
				return io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// varint reads one QUIC variable-length integer (RFC 9000 §16).
func (f *frameReader) varint() (uint64, error) {
	if err := f.need(1); err != nil {
		return 0, err
	}
	n := 1 << (f.buf[f.r] >> 6)
	if err := f.need(n); err != nil {
		return 0, noEOF(err)
	}
	v, _, err := quicvarint.Parse(f.buf[f.r : f.r+n])
	f.r += n
	return v, err
}

// header reads a frame's type and length; io.EOF when the stream ended
// before it. It consumes nothing unless it returns them both, so that a
// read cut by a deadline can be tried again.
func (f *frameReader) header() (typ, length uint64, err error) {
	if err := f.need(1); err != nil {
		return 0, 0, err
	}
	nt := 1 << (f.buf[f.r] >> 6)
	if err := f.need(nt + 1); err != nil {
		return 0, 0, noEOF(err)
	}
	nl := 1 << (f.buf[f.r+nt] >> 6)
	if err := f.need(nt + nl); err != nil {
		return 0, 0, noEOF(err)
	}
	typ, _, _ = quicvarint.Parse(f.buf[f.r : f.r+nt])
	length, _, _ = quicvarint.Parse(f.buf[f.r+nt : f.r+nt+nl])
	f.r += nt + nl
	return typ, length, nil
}

// payload returns the next n bytes whole, in buf when they fit and in a
// new slice otherwise; they are valid until the next read.
func (f *frameReader) payload(n int) ([]byte, error) {
	if n <= len(f.buf) {
		if err := f.need(n); err != nil {
			return nil, noEOF(err)
		}
		p := f.buf[f.r : f.r+n]
		f.r += n
		return p, nil
	}
	p := make([]byte, n)
	k := copy(p, f.buf[f.r:f.w])
	f.r += k
	if _, err := io.ReadFull(readerFunc(f.read), p[k:]); err != nil {
		return nil, noEOF(err)
	}
	return p, nil
}

// skip discards the next n bytes.
func (f *frameReader) skip(n uint64) error {
	for n > 0 {
		if f.r == f.w {
			if err := f.fill(); err != nil {
				return noEOF(err)
			}
		}
		k := min(n, uint64(f.w-f.r))
		f.r += int(k)
		n -= k
	}
	return nil
}

// read reads into p what is buffered, or else straight from the stream.
func (f *frameReader) read(p []byte) (int, error) {
	if f.r < f.w {
		n := copy(p, f.buf[f.r:f.w])
		f.r += n
		return n, nil
	}
	if f.err != nil {
		return 0, f.err
	}
	n, err := f.src.Read(p)
	if err != nil && !isTimeout(err) {
		f.err = err
		if n > 0 {
			err = nil
		}
	}
	return n, err
}

// isTimeout reports whether err is a read cut by a deadline, after which
// the stream may be read again.
func isTimeout(err error) bool {
	return err != io.EOF && errors.Is(err, os.ErrDeadlineExceeded)
}

// atEOF reports whether the stream has ended with nothing left buffered.
func (f *frameReader) atEOF() bool { return f.r == f.w && f.err == io.EOF }

// readerFunc is a function as an io.Reader.
type readerFunc func([]byte) (int, error)

func (r readerFunc) Read(p []byte) (int, error) { return r(p) }

// noEOF turns an end of the stream within a frame into
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// forbiddenOnRequest reports whether a frame of type typ may not appear on
// a request stream: the control stream's frames, PUSH_PROMISE (which a
// client never sends), and HTTP/2's frame types that HTTP/3 reserves
// (RFC 9114 §7.2.8).
func forbiddenOnRequest(typ uint64) bool {
	switch typ {
	case frameCancelPush, frameSettings, framePushPromise, frameGoAway, frameMaxPushID,
		0x02, 0x06, 0x08, 0x09:
		return true
	}
	return false
}

// appendFrameHeader appends a frame's type and length.
func appendFrameHeader(b []byte, typ uint64, length int) []byte {
	b = quicvarint.Append(b, typ)
	return quicvarint.Append(b, uint64(length))
}
