package masque

import (
	"errors"
	"fmt"
)

// ContextUDP is the context ID of a datagram that carries a UDP payload
// (RFC 9298 §4): the only one rustle sends or takes.
const ContextUDP = 0

// maxVarint is the largest QUIC variable-length integer (RFC 9000 §16).
const maxVarint = 1<<62 - 1

// ErrTruncated is returned for a varint cut short.
var ErrTruncated = errors.New("masque: truncated variable-length integer")

// ParseVarint reads a QUIC variable-length integer (RFC 9000 §16) from the
// start of b and returns it and its length in bytes.
func ParseVarint(b []byte) (v uint64, n int, err error) {
	if len(b) == 0 {
		return 0, 0, ErrTruncated
	}
	n = 1 << (b[0] >> 6)
	if len(b) < n {
		return 0, 0, ErrTruncated
	}
	v = uint64(b[0] & 0x3f)
	for i := 1; i < n; i++ {
		v = v<<8 | uint64(b[i])
	}
	return v, n, nil
}

// AppendVarint appends v as a QUIC variable-length integer in its
// shortest form; v must not exceed 2^62-1.
func AppendVarint(b []byte, v uint64) []byte {
	switch {
	case v < 1<<6:
		return append(b, byte(v))
	case v < 1<<14:
		return append(b, byte(v>>8)|0x40, byte(v))
	case v < 1<<30:
		return append(b, byte(v>>24)|0x80, byte(v>>16), byte(v>>8), byte(v))
	}
	return append(b, byte(v>>56)|0xc0, byte(v>>48), byte(v>>40), byte(v>>32),
		byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}

// ParseDatagram splits an HTTP Datagram payload of a CONNECT-UDP flow
// (RFC 9298 §4) into its context ID and the rest: for ContextUDP, the UDP
// payload. payload aliases b.
func ParseDatagram(b []byte) (context uint64, payload []byte, err error) {
	v, n, err := ParseVarint(b)
	if err != nil {
		return 0, nil, fmt.Errorf("masque: datagram context ID: %w", err)
	}
	return v, b[n:], nil
}
