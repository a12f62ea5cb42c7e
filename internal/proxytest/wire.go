package proxytest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// maxHeadBytes bounds a head read by the origin or the client.
const maxHeadBytes = 1 << 20

// Field is one header field line as it was on the wire: Name keeps its
// case, Value is trimmed of the whitespace around it.
type Field struct {
	Name, Value string
}

// Header is the header (or trailer) section of a message: its fields in
// the order they were received.
type Header []Field

// Get returns the value of the first field named name (compared without
// regard to case), or "".
func (h Header) Get(name string) string {
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

// Values returns the values of every field named name, in order.
func (h Header) Values(name string) []string {
	var vs []string
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			vs = append(vs, f.Value)
		}
	}
	return vs
}

// Has reports whether a field named name is present.
func (h Header) Has(name string) bool {
	for _, f := range h {
		if strings.EqualFold(f.Name, name) {
			return true
		}
	}
	return false
}

// hasToken reports whether a comma-separated list in any field named name
// holds token (compared without regard to case).
func (h Header) hasToken(name, token string) bool {
	for _, v := range h.Values(name) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// ErrHeadTooLarge is returned when a head exceeds 1 MiB.
var ErrHeadTooLarge = errors.New("proxytest: message head over 1 MiB")

// ErrStrayEmptyLine is returned when a message starts with an empty line.
var ErrStrayEmptyLine = errors.New("proxytest: empty line where a message should start")

// readHead reads one message head, its first line through the empty line
// that ends it, exactly as received.
func readHead(br *bufio.Reader) ([]byte, error) {
	var head []byte
	for {
		line, err := br.ReadSlice('\n')
		head = append(head, line...)
		if err == bufio.ErrBufferFull {
			if len(head) > maxHeadBytes {
				return head, ErrHeadTooLarge
			}
			continue
		}
		if err != nil {
			if err == io.EOF && len(head) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return head, err
		}
		if len(head) > maxHeadBytes {
			return head, ErrHeadTooLarge
		}
		if bytes.Equal(line, []byte("\r\n")) || bytes.Equal(line, []byte("\n")) {
			if len(head) == len(line) {
				// Recipients may skip this (RFC 9112 §2.2), but rustle
				// never sends it: report it.
				return head, ErrStrayEmptyLine
			}
			return head, nil
		}
	}
}

// splitHead splits a head into its first line and its header fields.
func splitHead(head []byte) (first string, h Header, err error) {
	s := strings.TrimSuffix(string(head), "\r\n")
	lines := strings.Split(s, "\r\n")
	first = lines[0]
	for _, l := range lines[1:] {
		if l == "" {
			break
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return first, h, fmt.Errorf("proxytest: malformed header line %q", l)
		}
		h = append(h, Field{Name: name, Value: strings.Trim(value, " \t")})
	}
	return first, h, nil
}

// chunked reports whether a Transfer-Encoding field makes the body
// chunked (chunked is the final coding).
func chunked(h Header) bool {
	te := h.Values("Transfer-Encoding")
	if len(te) == 0 {
		return false
	}
	codings := strings.Split(te[len(te)-1], ",")
	return strings.EqualFold(strings.TrimSpace(codings[len(codings)-1]), "chunked")
}

// contentLength returns the Content-Length of h, or -1.
func contentLength(h Header) (int64, error) {
	v := h.Get("Content-Length")
	if v == "" && !h.Has("Content-Length") {
		return -1, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return -1, fmt.Errorf("proxytest: bad Content-Length %q", v)
	}
	return n, nil
}

// lengthReader reads exactly n bytes of a body from br, copying them to
// raw; a short body is io.ErrUnexpectedEOF.
type lengthReader struct {
	br  *bufio.Reader
	raw io.Writer
	n   int64
}

func (r *lengthReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.n {
		p = p[:r.n]
	}
	n, err := r.br.Read(p)
	r.n -= int64(n)
	r.raw.Write(p[:n])
	if err == io.EOF && r.n > 0 {
		err = io.ErrUnexpectedEOF
	}
	if err == nil && r.n == 0 {
		err = io.EOF
	}
	return n, err
}

// closeReader reads a body delimited by the end of the connection.
type closeReader struct {
	br  *bufio.Reader
	raw io.Writer
}

func (r *closeReader) Read(p []byte) (int, error) {
	n, err := r.br.Read(p)
	r.raw.Write(p[:n])
	return n, err
}

// chunkedReader decodes a chunked body (RFC 9112 §7.1) from br, copying
// every byte it consumes, framing and trailers included, to raw.
type chunkedReader struct {
	br      *bufio.Reader
	raw     io.Writer
	left    int64 // data bytes left in the current chunk
	started bool  // a chunk has been read: its CRLF comes next
	done    bool
	trailer Header
}

func (r *chunkedReader) line() (string, error) {
	l, err := r.br.ReadSlice('\n')
	r.raw.Write(l)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return "", fmt.Errorf("proxytest: read chunk framing: %w", err)
	}
	if len(l) < 2 || l[len(l)-2] != '\r' {
		return "", fmt.Errorf("proxytest: chunk line %q not ended by CRLF", l)
	}
	return string(l[:len(l)-2]), nil
}

func (r *chunkedReader) Read(p []byte) (int, error) {
	for r.left == 0 {
		if r.done {
			return 0, io.EOF
		}
		if r.started {
			if l, err := r.line(); err != nil {
				return 0, err
			} else if l != "" {
				return 0, fmt.Errorf("proxytest: %q after chunk data", l)
			}
		}
		l, err := r.line()
		if err != nil {
			return 0, err
		}
		size, _, _ := strings.Cut(l, ";")
		n, err := strconv.ParseInt(strings.TrimRight(size, " \t"), 16, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("proxytest: bad chunk size line %q", l)
		}
		r.started = true
		if n == 0 {
			for {
				l, err := r.line()
				if err != nil {
					return 0, err
				}
				if l == "" {
					break
				}
				name, value, ok := strings.Cut(l, ":")
				if !ok {
					return 0, fmt.Errorf("proxytest: malformed trailer %q", l)
				}
				r.trailer = append(r.trailer, Field{Name: name, Value: strings.Trim(value, " \t")})
			}
			r.done = true
			return 0, io.EOF
		}
		r.left = n
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.br.Read(p)
	r.left -= int64(n)
	r.raw.Write(p[:n])
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// appendChunk appends data as one chunk.
func appendChunk(dst, data []byte) []byte {
	dst = strconv.AppendInt(dst, int64(len(data)), 16)
	dst = append(dst, "\r\n"...)
	dst = append(dst, data...)
	return append(dst, "\r\n"...)
}

// Chunk encodes data as a chunked body: one chunk per element (empty
// elements are skipped), the last chunk, the trailer lines ("Name: value")
// and the final CRLF.
func Chunk(data []string, trailer ...string) string {
	var b []byte
	for _, d := range data {
		if d != "" {
			b = appendChunk(b, []byte(d))
		}
	}
	b = append(b, "0\r\n"...)
	for _, t := range trailer {
		b = append(b, t...)
		b = append(b, "\r\n"...)
	}
	return string(append(b, "\r\n"...))
}
