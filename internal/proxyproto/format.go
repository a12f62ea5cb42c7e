package proxyproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"
)

// Append appends h, encoded as a header of h.Version, to b. A
// CommandLocal header is "PROXY UNKNOWN\r\n" in v1 and carries no address
// or TLV in v2. A CommandProxy header needs a valid Source and
// Destination of one family in v1; in v2 an invalid Source gives the
// UNSPEC family. A v2 CRC32C TLV, if present, is filled in.
func (h *Header) Append(b []byte) ([]byte, error) {
	switch h.Version {
	case 1:
		return h.appendV1(b)
	case 2:
		return h.appendV2(b)
	}
	return b, fmt.Errorf("proxyproto: cannot encode version %d", h.Version)
}

func (h *Header) appendV1(b []byte) ([]byte, error) {
	if h.Command == CommandLocal {
		return append(b, "PROXY UNKNOWN\r\n"...), nil
	}
	src, dst := h.Source, h.Destination
	if !src.IsValid() || !dst.IsValid() || src.Addr().Is4() != dst.Addr().Is4() ||
		src.Addr().Zone() != "" || dst.Addr().Zone() != "" {
		return b, errors.New("proxyproto: a v1 PROXY header needs a source and a destination of one family, without zones")
	}
	if h.Datagram || len(h.TLVs) > 0 {
		return b, errors.New("proxyproto: a v1 header has no datagram transport and no TLVs")
	}
	if src.Addr().Is4() {
		b = append(b, "PROXY TCP4 "...)
	} else {
		b = append(b, "PROXY TCP6 "...)
	}
	b = src.Addr().AppendTo(b)
	b = append(b, ' ')
	b = dst.Addr().AppendTo(b)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(src.Port()), 10)
	b = append(b, ' ')
	b = strconv.AppendUint(b, uint64(dst.Port()), 10)
	return append(b, "\r\n"...), nil
}

func (h *Header) appendV2(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, v2Signature...)
	if h.Command == CommandLocal {
		return append(b, 0x20, 0x00, 0, 0), nil
	}
	if h.Command != CommandProxy {
		return b[:start], fmt.Errorf("proxyproto: cannot encode command %d", h.Command)
	}
	var transport byte = 1
	if h.Datagram {
		transport = 2
	}
	src, dst := h.Source, h.Destination
	var fam byte
	switch {
	case !src.IsValid():
		transport = 0
		if h.Datagram {
			transport = 2
		}
	case src.Addr().Is4() && dst.Addr().Is4():
		fam = 1
	case src.Addr().Is6() && dst.Addr().Is6():
		fam = 2
	default:
		return b[:start], errors.New("proxyproto: source and destination of different families")
	}
	b = append(b, 0x21, fam<<4|transport, 0, 0)
	switch fam {
	case 1:
		s, d := src.Addr().As4(), dst.Addr().As4()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
		b = binary.BigEndian.AppendUint16(b, src.Port())
		b = binary.BigEndian.AppendUint16(b, dst.Port())
	case 2:
		s, d := src.Addr().As16(), dst.Addr().As16()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
		b = binary.BigEndian.AppendUint16(b, src.Port())
		b = binary.BigEndian.AppendUint16(b, dst.Port())
	}
	crcAt := -1
	for _, t := range h.TLVs {
		if len(t.Value) > 0xffff {
			return b[:start], fmt.Errorf("proxyproto: TLV of type %#02x longer than 65535 bytes", t.Type)
		}
		b = append(b, t.Type)
		b = binary.BigEndian.AppendUint16(b, uint16(len(t.Value)))
		if t.Type == TypeCRC32C {
			if len(t.Value) != 4 {
				return b[:start], errors.New("proxyproto: a CRC32C TLV has 4 bytes")
			}
			crcAt = len(b) - start
			b = append(b, 0, 0, 0, 0)
			continue
		}
		b = append(b, t.Value...)
	}
	n := len(b) - start
	if n > MaxV2Bytes {
		return b[:start], fmt.Errorf("proxyproto: v2 header of %d bytes, longer than %d", n, MaxV2Bytes)
	}
	binary.BigEndian.PutUint16(b[start+14:], uint16(n-16))
	if crcAt >= 0 {
		binary.BigEndian.PutUint32(b[start+crcAt:], crc32.Checksum(b[start:], castagnoli))
	}
	return b, nil
}
