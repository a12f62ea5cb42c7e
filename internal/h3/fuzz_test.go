package h3

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/fieldreq"
)

// FuzzRequestHead feeds arbitrary request streams to the parsing of a
// request's head as readHead does it (headBlock, decodeFields,
// fieldreq.Parse), read whole and in pieces of sizes the input chooses,
// through a read buffer smaller than a stream's. It checks that nothing
// panics; that the pieces change nothing; that a decoded section stays
// within its bound; that an error is one readHead knows; that a decoded
// section encodes back, with rustle's encoder, to the same fields with
// names in lower case; and that an accepted request has a method and
// regular fields in lower case.
func FuzzRequestHead(f *testing.F) {
	head := func(fields ...string) []byte {
		b := appendSectionPrefix(nil)
		for i := 0; i+1 < len(fields); i += 2 {
			b = appendField(b, fields[i], fields[i+1])
		}
		return append(appendFrameHeader(nil, frameHeaders, len(b)), b...)
	}
	get := head(":method", "GET", ":scheme", "http", ":authority", "example.com", ":path", "/")
	f.Add(uint8(3), get)
	f.Add(uint8(1), append(appendFrameHeader(nil, 0x21, 3), append([]byte("abc"), get...)...)) // a reserved frame type first
	f.Add(uint8(7), head(":method", "CONNECT", ":authority", "example.com:443"))
	f.Add(uint8(2), head(":method", "CONNECT", ":protocol", "connect-udp", ":scheme", "https", ":authority", "proxy:443", ":path", "/.well-known/masque/udp/192.0.2.1/53/"))
	f.Add(uint8(5), head(":method", "POST", ":scheme", "http", ":authority", "a", ":path", "/", "content-length", "3", "Proxy-Authorization", "Basic eDp5"))
	f.Add(uint8(4), append(appendFrameHeader(nil, frameData, 1), 'x'))
	f.Add(uint8(1), get[:len(get)-2])
	f.Add(uint8(9), []byte{0x01, 0x40, 0x20})
	const max = 1 << 10
	self := netip.MustParseAddrPort("192.0.2.2:443")
	f.Fuzz(func(t *testing.T, step uint8, stream []byte) {
		plain := frameReader{src: bytes.NewReader(stream), buf: make([]byte, 256)}
		wantBlock, wantErr := headBlock(&plain, max)

		pieces := &pieceReader{src: stream, step: int(step%16) + 1}
		fr := frameReader{src: pieces, buf: make([]byte, 256)}
		block, err := headBlock(&fr, max)
		if !bytes.Equal(block, wantBlock) || errText(err) != errText(wantErr) {
			t.Fatalf("read in pieces of %d: %q, %v; read whole: %q, %v", pieces.step, block, err, wantBlock, wantErr)
		}
		var ce *connError
		switch {
		case err == nil, err == errIncomplete, err == errFieldsTooLarge, errors.As(err, &ce):
		default:
			t.Fatalf("headBlock: unexpected error %v", err)
		}
		if err != nil {
			return
		}
		fields, err := decodeFields(nil, block, max)
		if err != nil {
			if err != errFieldsTooLarge && !errors.As(err, &ce) {
				t.Fatalf("decodeFields: unexpected error %v", err)
			}
			return
		}
		size := 0
		for _, f := range fields {
			size += len(f.Name) + len(f.Value) + 32
		}
		if size > max {
			t.Fatalf("decodeFields returned %d bytes of fields, over its bound %d", size, max)
		}
		enc := appendSectionPrefix(nil)
		for _, f := range fields {
			enc = appendField(enc, f.Name, f.Value)
		}
		again, err := decodeFields(nil, enc, max)
		if err != nil {
			t.Fatalf("decoding rustle's encoding of %v: %v", fields, err)
		}
		if len(again) != len(fields) {
			t.Fatalf("re-encoded %v decodes to %v", fields, again)
		}
		for i := range fields {
			if again[i].Name != asciiLower(fields[i].Name) || again[i].Value != fields[i].Value {
				t.Fatalf("re-encoded field %d: %q: %q, want %q: %q", i, again[i].Name, again[i].Value, asciiLower(fields[i].Name), fields[i].Value)
			}
		}
		req, err := fieldreq.Parse(fields, true, self)
		if err != nil {
			var m fieldreq.ErrMalformed
			if !errors.As(err, &m) {
				t.Fatalf("fieldreq.Parse: an error %T (%v), not ErrMalformed", err, err)
			}
			return
		}
		if req.Method == "" {
			t.Fatalf("fieldreq.Parse accepted %v without a method", fields)
		}
		for _, f := range req.Fields {
			if f.Name != asciiLower(f.Name) || strings.HasPrefix(f.Name, ":") {
				t.Fatalf("fieldreq.Parse kept the field %q: want regular fields in lower case", f.Name)
			}
		}
	})
}

// pieceReader reads src in pieces of step bytes at most, as a
// quic.Stream hands over its STREAM frames' data.
type pieceReader struct {
	src  []byte
	step int
}

func (r *pieceReader) Read(p []byte) (int, error) {
	if len(r.src) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.src[:min(r.step, len(r.src))])
	r.src = r.src[n:]
	return n, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// asciiLower is name with its ASCII capitals in lower case, as
// appendField writes it.
func asciiLower(name string) string {
	b := []byte(name)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
