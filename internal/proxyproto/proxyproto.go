// Package proxyproto parses the PROXY protocol header, versions 1 (text)
// and 2 (binary), that a load balancer sends first on a connection to
// pass on the client's address (HAProxy's proxy-protocol.txt).
//
// [Parse] reads a header from the start of a buffer; [Read] reads one from
// a stream without reading past it, so that what follows can be served as
// if the header had not been there. Both refuse a stream that does not
// start with a header ([ErrNoHeader]): on a listener configured for the
// PROXY protocol, a connection without one did not come through the load
// balancer and must be closed. [Header.Append] encodes a header, for
// tests and for clients that send one.
//
// The package only parses; a listener that wants the header reads it with
// a deadline, before anything else, and then uses [Header.Source] as the
// client's address when it is valid.
package proxyproto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/netip"
	"strconv"
)

// Errors returned by Parse and Read. Errors for a malformed header wrap
// ErrInvalid.
var (
	// ErrNoHeader means the data does not start with a PROXY protocol
	// header of either version.
	ErrNoHeader = errors.New("proxyproto: no PROXY protocol header")
	// ErrIncomplete means the data is the start of a header but not all
	// of it; Parse needs more bytes.
	ErrIncomplete = errors.New("proxyproto: incomplete header")
	// ErrInvalid is wrapped by the errors for a malformed header.
	ErrInvalid = errors.New("proxyproto: invalid header")
)

// Command is what a header announces.
type Command uint8

const (
	// CommandProxy announces a relayed connection: Source and Destination
	// are the client's and the address it connected to (when the family
	// is INET or INET6).
	CommandProxy Command = iota
	// CommandLocal announces a connection the balancer opened itself,
	// such as a health check: the connection's own addresses apply, and
	// a v2 header's addresses and TLVs are discarded. A v1 "PROXY
	// UNKNOWN" header parses as CommandLocal.
	CommandLocal
)

// TLV is a type-length-value extension of a v2 header.
type TLV struct {
	// Type is the TLV's type, such as TypeAuthority.
	Type byte
	// Value is the TLV's value. After Parse it shares the caller's
	// buffer; after Read it is the Header's own.
	Value []byte
}

// TLV types of the specification.
const (
	TypeALPN      byte = 0x01
	TypeAuthority byte = 0x02
	TypeCRC32C    byte = 0x03
	TypeNoop      byte = 0x04
	TypeUniqueID  byte = 0x05
	TypeSSL       byte = 0x20
	TypeNetNS     byte = 0x30
)

// Header is a parsed PROXY protocol header.
type Header struct {
	// Version is 1 or 2.
	Version int
	// Command is CommandProxy or CommandLocal.
	Command Command
	// Source is the client's address; invalid (the zero AddrPort) for
	// CommandLocal, for v1 UNKNOWN, and for v2 families other than INET
	// and INET6 (UNSPEC, UNIX), whose addresses rustle does not use.
	Source netip.AddrPort
	// Destination is the address the client connected to, valid when
	// Source is.
	Destination netip.AddrPort
	// Datagram is true for a v2 header whose transport is DGRAM (UDP).
	Datagram bool
	// TLVs are a v2 header's extensions, in order.
	TLVs []TLV
}

// TLV returns the value of the first TLV of type t, and whether there is
// one.
func (h *Header) TLV(t byte) ([]byte, bool) {
	for _, tlv := range h.TLVs {
		if tlv.Type == t {
			return tlv.Value, true
		}
	}
	return nil, false
}

// Limits of the two versions.
const (
	// MaxV1Bytes is the longest v1 header, CRLF included.
	MaxV1Bytes = 107
	// MaxV2Bytes is the longest v2 header Parse and Read accept: the
	// 16-byte fixed part and 4096 bytes of addresses and TLVs. The
	// format allows up to 65535; balancers send far less.
	MaxV2Bytes = 16 + 4096
	// minV1Bytes is the shortest v1 header, "PROXY UNKNOWN\r\n".
	minV1Bytes = 15
)

// v2Signature starts every v2 header.
var v2Signature = []byte("\r\n\r\n\x00\r\nQUIT\n")

var v1Prefix = []byte("PROXY ")

// Parse parses the header at the start of b and returns it with its
// length in bytes. It returns ErrIncomplete when b holds only the start
// of a header, ErrNoHeader when b does not start like one, and an error
// wrapping ErrInvalid for a malformed header.
func Parse(b []byte) (*Header, int, error) {
	switch {
	case hasPrefix(b, v2Signature):
		return parseV2(b)
	case hasPrefix(b, v1Prefix):
		return parseV1(b)
	}
	return nil, 0, ErrNoHeader
}

// hasPrefix reports whether b starts with p, or with as much of p as b
// holds: a short b that might still become p is a prefix too, so that
// Parse answers ErrIncomplete rather than ErrNoHeader.
func hasPrefix(b, p []byte) bool {
	n := min(len(b), len(p))
	return bytes.Equal(b[:n], p[:n])
}

// Read reads one header from r and returns it. It reads no byte past the
// header: the stream continues with what followed it. A v2 header takes
// two reads; a v1 header takes one read of 15 bytes and one read per byte
// after them, so give Read a *bufio.Reader (and keep reading from it) if
// v1 headers arrive at a high rate. An io.EOF before the first byte is
// returned as is; a stream that ends inside a header gives
// io.ErrUnexpectedEOF.
func Read(r io.Reader) (*Header, error) {
	buf := make([]byte, minV1Bytes, 64)
	if _, err := io.ReadFull(r, buf); err != nil {
		return nil, err
	}
	switch {
	case bytes.HasPrefix(buf, v2Signature):
		buf = append(buf, 0)
		if _, err := io.ReadFull(r, buf[minV1Bytes:]); err != nil {
			return nil, eof(err)
		}
		n := int(binary.BigEndian.Uint16(buf[14:16]))
		if 16+n > MaxV2Bytes {
			return nil, fmt.Errorf("%w: v2 header of %d bytes, longer than %d", ErrInvalid, 16+n, MaxV2Bytes)
		}
		buf = append(buf, make([]byte, n)...)
		if _, err := io.ReadFull(r, buf[16:]); err != nil {
			return nil, eof(err)
		}
	case bytes.HasPrefix(buf, v1Prefix):
		var one [1]byte
		for bytes.IndexByte(buf, '\n') < 0 {
			if len(buf) == MaxV1Bytes {
				return nil, fmt.Errorf("%w: v1 header longer than %d bytes", ErrInvalid, MaxV1Bytes)
			}
			if _, err := io.ReadFull(r, one[:]); err != nil {
				return nil, eof(err)
			}
			buf = append(buf, one[0])
		}
	default:
		return nil, ErrNoHeader
	}
	h, n, err := Parse(buf)
	if err != nil {
		return nil, err
	}
	if n != len(buf) {
		// Parse and Read agree on where a header ends; this guards it.
		return nil, fmt.Errorf("%w: header of %d bytes in %d read", ErrInvalid, n, len(buf))
	}
	return h, nil
}

func eof(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseV1 parses "PROXY TCP4|TCP6|UNKNOWN ...\r\n".
func parseV1(b []byte) (*Header, int, error) {
	end := bytes.IndexByte(b[:min(len(b), MaxV1Bytes)], '\n')
	if end < 0 {
		if len(b) >= MaxV1Bytes {
			return nil, 0, fmt.Errorf("%w: v1 header longer than %d bytes", ErrInvalid, MaxV1Bytes)
		}
		return nil, 0, ErrIncomplete
	}
	if end == 0 || b[end-1] != '\r' {
		return nil, 0, fmt.Errorf("%w: v1 header does not end in CRLF", ErrInvalid)
	}
	line := b[len(v1Prefix) : end-1]
	n := end + 1
	h := &Header{Version: 1}

	proto, rest, _ := bytes.Cut(line, []byte(" "))
	var want6 bool
	switch string(proto) {
	case "UNKNOWN":
		// The rest of the line, if any, is to be ignored.
		h.Command = CommandLocal
		return h, n, nil
	case "TCP4":
	case "TCP6":
		want6 = true
	default:
		return nil, 0, fmt.Errorf("%w: v1 protocol %q is not TCP4, TCP6 or UNKNOWN", ErrInvalid, proto)
	}
	fields := bytes.Split(rest, []byte(" "))
	if len(fields) != 4 {
		return nil, 0, fmt.Errorf("%w: v1 %s header has %d fields after the protocol, want 4", ErrInvalid, proto, len(fields))
	}
	var addrs [2]netip.Addr
	for i := range addrs {
		a, err := netip.ParseAddr(string(fields[i]))
		if err != nil || a.Is6() != want6 || a.Zone() != "" {
			return nil, 0, fmt.Errorf("%w: v1 %s address %q", ErrInvalid, proto, fields[i])
		}
		addrs[i] = a
	}
	var ports [2]uint16
	for i := range ports {
		p, err := parsePort(fields[2+i])
		if err != nil {
			return nil, 0, err
		}
		ports[i] = p
	}
	h.Source = netip.AddrPortFrom(addrs[0], ports[0])
	h.Destination = netip.AddrPortFrom(addrs[1], ports[1])
	return h, n, nil
}

// parsePort parses a decimal port from 0 to 65535 without a sign or
// leading zeros.
func parsePort(f []byte) (uint16, error) {
	if len(f) == 0 || len(f) > 5 || (f[0] == '0' && len(f) > 1) {
		return 0, fmt.Errorf("%w: v1 port %q", ErrInvalid, f)
	}
	for _, c := range f {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%w: v1 port %q", ErrInvalid, f)
		}
	}
	p, err := strconv.ParseUint(string(f), 10, 16)
	if err != nil {
		return 0, fmt.Errorf("%w: v1 port %q", ErrInvalid, f)
	}
	return uint16(p), nil
}

// Address block lengths of the v2 families.
const (
	inetLen  = 12
	inet6Len = 36
	unixLen  = 216
)

// parseV2 parses a binary header.
func parseV2(b []byte) (*Header, int, error) {
	if len(b) < 16 {
		return nil, 0, ErrIncomplete
	}
	verCmd, famProto := b[12], b[13]
	if verCmd>>4 != 2 {
		return nil, 0, fmt.Errorf("%w: v2 version nibble %d, want 2", ErrInvalid, verCmd>>4)
	}
	h := &Header{Version: 2}
	switch verCmd & 0xf {
	case 0:
		h.Command = CommandLocal
	case 1:
		h.Command = CommandProxy
	default:
		return nil, 0, fmt.Errorf("%w: v2 command %d", ErrInvalid, verCmd&0xf)
	}
	fam, transport := famProto>>4, famProto&0xf
	if fam > 3 || transport > 2 {
		return nil, 0, fmt.Errorf("%w: v2 family and transport %#02x", ErrInvalid, famProto)
	}
	h.Datagram = transport == 2
	length := int(binary.BigEndian.Uint16(b[14:16]))
	n := 16 + length
	if n > MaxV2Bytes {
		return nil, 0, fmt.Errorf("%w: v2 header of %d bytes, longer than %d", ErrInvalid, n, MaxV2Bytes)
	}
	if len(b) < n {
		return nil, 0, ErrIncomplete
	}
	body := b[16:n]
	if h.Command == CommandLocal {
		// The balancer's own connection: the addresses and extensions,
		// whatever their family, are to be discarded.
		h.Datagram = false
		return h, n, nil
	}

	var addrLen int
	switch fam {
	case 1:
		addrLen = inetLen
	case 2:
		addrLen = inet6Len
	case 3:
		addrLen = unixLen
	}
	if len(body) < addrLen {
		return nil, 0, fmt.Errorf("%w: v2 address block of %d bytes, want %d for family %d", ErrInvalid, len(body), addrLen, fam)
	}
	switch fam {
	case 1:
		h.Source = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[0:4])), binary.BigEndian.Uint16(body[8:10]))
		h.Destination = netip.AddrPortFrom(netip.AddrFrom4([4]byte(body[4:8])), binary.BigEndian.Uint16(body[10:12]))
	case 2:
		h.Source = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[0:16])), binary.BigEndian.Uint16(body[32:34]))
		h.Destination = netip.AddrPortFrom(netip.AddrFrom16([16]byte(body[16:32])), binary.BigEndian.Uint16(body[34:36]))
	}

	tlvs := body[addrLen:]
	crcAt := -1
	for len(tlvs) > 0 {
		if len(tlvs) < 3 {
			return nil, 0, fmt.Errorf("%w: v2 TLV truncated at %d bytes", ErrInvalid, len(tlvs))
		}
		l := int(binary.BigEndian.Uint16(tlvs[1:3]))
		if 3+l > len(tlvs) {
			return nil, 0, fmt.Errorf("%w: v2 TLV of type %#02x has %d bytes, %d left", ErrInvalid, tlvs[0], l, len(tlvs)-3)
		}
		if tlvs[0] == TypeCRC32C {
			if l != 4 {
				return nil, 0, fmt.Errorf("%w: v2 CRC32C TLV of %d bytes, want 4", ErrInvalid, l)
			}
			crcAt = n - len(tlvs) + 3
		}
		h.TLVs = append(h.TLVs, TLV{Type: tlvs[0], Value: tlvs[3 : 3+l : 3+l]})
		tlvs = tlvs[3+l:]
	}
	if crcAt >= 0 && !checksumOK(b[:n], crcAt) {
		return nil, 0, fmt.Errorf("%w: v2 CRC32C checksum mismatch", ErrInvalid)
	}
	return h, n, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// checksumOK verifies a CRC32C TLV whose value is at hdr[at:at+4]: the
// checksum of the whole header with that value taken as zero.
func checksumOK(hdr []byte, at int) bool {
	want := binary.BigEndian.Uint32(hdr[at : at+4])
	var zero [4]byte
	c := crc32.Update(0, castagnoli, hdr[:at])
	c = crc32.Update(c, castagnoli, zero[:])
	c = crc32.Update(c, castagnoli, hdr[at+4:])
	return c == want
}
