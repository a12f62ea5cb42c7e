package h3

import (
	"errors"
	"io"
	"strconv"

	"github.com/quic-go/qpack"
	"golang.org/x/net/http2/hpack"
)

// Field sections are decoded with quic-go's QPACK decoder (static table
// only: rustle advertises no dynamic table, so a block that needs one is
// an error) and encoded here, into the stream's write buffer, without
// the Huffman code and without allocating: rustle's answers and the
// responses it relays name their fields with literals, and :status with
// the static table (RFC 9204 §4.5).

// decoder decodes field sections; it holds no state.
var decoder = qpack.NewDecoder()

// errFieldsTooLarge is a field section larger than the bound its reader
// gave: the request is answered 431.
var errFieldsTooLarge = errors.New("h3: field section too large")

// decodeFields appends the fields of the encoded section block to dst,
// bounding their size as RFC 9114 §4.2.2 counts it (name and value plus
// 32 bytes each) to max bytes. A QPACK error is a connection error
// (RFC 9204 §2.2.3); a section over max returns errFieldsTooLarge.
func decodeFields(dst []hpack.HeaderField, block []byte, max int) ([]hpack.HeaderField, error) {
	next := decoder.Decode(block)
	size := 0
	for {
		f, err := next()
		if err != nil {
			if err == io.EOF {
				return dst, nil
			}
			return dst, &connError{code: errQPACKDecompressionFailed, why: "QPACK: " + err.Error()}
		}
		if size += len(f.Name) + len(f.Value) + 32; size > max {
			return dst, errFieldsTooLarge
		}
		dst = append(dst, hpack.HeaderField{Name: f.Name, Value: f.Value})
	}
}

// appendSectionPrefix appends an encoded field section's prefix: no
// dynamic table reference (Required Insert Count 0, Base 0).
func appendSectionPrefix(b []byte) []byte { return append(b, 0, 0) }

// staticStatus returns the static table's index of :status status, 0
// when it has none (RFC 9204 Appendix A).
func staticStatus(status int) uint64 {
	switch status {
	case 103:
		return 24
	case 200:
		return 25
	case 304:
		return 26
	case 404:
		return 27
	case 503:
		return 28
	case 100:
		return 63
	case 204:
		return 64
	case 206:
		return 65
	case 302:
		return 66
	case 400:
		return 67
	case 403:
		return 68
	case 421:
		return 69
	case 425:
		return 70
	case 500:
		return 71
	}
	return 0
}

// appendStatus appends the :status field line of status: an indexed one
// when the static table has it, else a literal with the static table's
// :status name.
func appendStatus(b []byte, status int) []byte {
	if i := staticStatus(status); i != 0 {
		return appendPrefixInt(b, 0xc0, 6, i) // 11 (static) + index
	}
	b = appendPrefixInt(b, 0x50, 4, 24) // 0101: literal, static name reference
	var digits [20]byte
	v := strconv.AppendInt(digits[:0], int64(status), 10)
	b = appendPrefixInt(b, 0, 7, uint64(len(v)))
	return append(b, v...)
}

// appendField appends a field line with a literal name, which it writes
// in lower case, and a literal value (RFC 9204 §4.5.6), without Huffman
// coding.
func appendField[N, V string | []byte](b []byte, name N, value V) []byte {
	b = appendPrefixInt(b, 0x20, 3, uint64(len(name))) // 001, N=0, H=0
	for i := 0; i < len(name); i++ {
		c := name[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b = append(b, c)
	}
	b = appendPrefixInt(b, 0, 7, uint64(len(value))) // H=0
	return append(b, value...)
}

// appendPrefixInt appends v as an integer with an n-bit prefix (RFC 7541
// §5.1) whose first byte carries the bits of first above the prefix.
func appendPrefixInt(b []byte, first byte, n uint, v uint64) []byte {
	max := uint64(1)<<n - 1
	if v < max {
		return append(b, first|byte(v))
	}
	b = append(b, first|byte(max))
	v -= max
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// itoa appends the decimal form of n to b.
func itoa(b []byte, n int) []byte { return strconv.AppendInt(b, int64(n), 10) }
