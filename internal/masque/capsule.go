package masque

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// CapsuleDatagram is the DATAGRAM capsule type (RFC 9297 §3.5), which
// carries an HTTP Datagram on the stream where no QUIC DATAGRAM frame
// can (HTTP/2).
const CapsuleDatagram = 0x00

// ErrCapsuleTooLarge is returned for a capsule longer than the reader's
// limit.
var ErrCapsuleTooLarge = errors.New("masque: capsule too large")

// CapsuleReader reads the capsules (RFC 9297 §3.2: type, length, value)
// of a request stream.
type CapsuleReader struct {
	r byteReader
	// Max bounds the value of a capsule that Next returns whole; a longer
	// DATAGRAM capsule is ErrCapsuleTooLarge, and a longer capsule of any
	// other type is skipped unread.
	Max int
	buf []byte
}

// byteReader is what a CapsuleReader reads: capsule headers a byte at
// a time, values whole.
type byteReader interface {
	io.Reader
	io.ByteReader
}

// NewCapsuleReader returns a CapsuleReader of r with limit max. An r
// that is an io.ByteReader (buffered already) is read directly; any
// other through a small buffer of the CapsuleReader's own.
func NewCapsuleReader(r io.Reader, max int) *CapsuleReader {
	br, ok := r.(byteReader)
	if !ok {
		br = bufio.NewReaderSize(r, 64)
	}
	return &CapsuleReader{r: br, Max: max}
}

// Next returns the next DATAGRAM capsule's value, skipping capsules of
// every other type (RFC 9297 §3.2: an unknown type is ignored). The value
// is valid until the next call. It returns io.EOF when the stream ends
// between capsules, io.ErrUnexpectedEOF within one, and another error
// for a malformed capsule.
func (c *CapsuleReader) Next() ([]byte, error) {
	for {
		typ, err := c.varint()
		if err != nil {
			return nil, err // io.EOF between capsules
		}
		length, err := c.varint()
		if err != nil {
			return nil, noEOF(err)
		}
		if typ != CapsuleDatagram || length > uint64(c.Max) {
			if typ == CapsuleDatagram {
				return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrCapsuleTooLarge, length, c.Max)
			}
			if _, err := io.CopyN(io.Discard, c.r, int64(length)); err != nil {
				return nil, noEOF(err)
			}
			continue
		}
		if cap(c.buf) < int(length) {
			c.buf = make([]byte, length)
		}
		b := c.buf[:length]
		if _, err := io.ReadFull(c.r, b); err != nil {
			return nil, noEOF(err)
		}
		return b, nil
	}
}

// Skip reads the next capsule, of any type, and discards its value
// unread: a reader that drops even DATAGRAM capsules (HTTP/3's travel in
// QUIC DATAGRAM frames) keeps no buffer for them, and returns after each
// capsule. Its errors are Next's: io.EOF when the stream ends between
// capsules, ErrCapsuleTooLarge for a DATAGRAM capsule longer than Max.
func (c *CapsuleReader) Skip() error {
	typ, err := c.varint()
	if err != nil {
		return err // io.EOF between capsules
	}
	length, err := c.varint()
	if err != nil {
		return noEOF(err)
	}
	if typ == CapsuleDatagram && length > uint64(c.Max) {
		return fmt.Errorf("%w: %d bytes, the limit is %d", ErrCapsuleTooLarge, length, c.Max)
	}
	if _, err := io.CopyN(io.Discard, c.r, int64(length)); err != nil {
		return noEOF(err)
	}
	return nil
}

// varint reads one QUIC variable-length integer.
func (c *CapsuleReader) varint() (uint64, error) {
	first, err := c.r.ReadByte()
	if err != nil {
		return 0, err
	}
	var b [8]byte
	b[0] = first
	n := 1 << (first >> 6)
	if _, err := io.ReadFull(c.r, b[1:n]); err != nil {
		return 0, noEOF(err)
	}
	v, _, _ := ParseVarint(b[:n])
	return v, nil
}

// noEOF turns an end of the stream within a capsule into
// io.ErrUnexpectedEOF.
func noEOF(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// AppendCapsule appends a capsule of type typ with value v.
func AppendCapsule(b []byte, typ uint64, v []byte) []byte {
	b = AppendVarint(b, typ)
	b = AppendVarint(b, uint64(len(v)))
	return append(b, v...)
}
