// Package sni reads a TLS ClientHello from the first bytes a client sends
// into a tunnel, without changing or consuming them: the server_name it
// names (RFC 6066), whether it carries an encrypted_client_hello
// extension (ECH, whose outer server_name is the one seen here), and the
// ALPN protocols it offers. rustle's SNI check (see package gate) reads
// it before a tunnel is dialled; the bytes are then sent to the origin
// unchanged.
//
// [Parse] reads records as a TLS server does: a ClientHello may be split
// over many handshake records (down to one byte each), and the records
// over many reads; it is bounded by [MaxBytes] of records in all. What is
// not a ClientHello is told apart: not TLS at all ([ErrNotTLS]), an
// SSLv2-style hello ([ErrSSLv2]), a handshake that breaks the record or
// message syntax ([ErrMalformed]: another record type before the hello
// is whole, another handshake message, a server_name list with two host
// names, two server_name extensions, a name with a trailing dot or bytes
// no DNS name has), and one larger than the bound ([ErrTooLarge]).
//
// [Mode] is the SNI check's setting (off, log, match) as the
// configuration names it.
package sni

import (
	"errors"
	"fmt"
	"io"
)

// MaxBytes bounds the records a ClientHello may take, record headers
// included: 16 KiB, room for any hello a browser or a TLS library sends
// (a post-quantum key share and ECH take under 3 KiB) even fragmented
// into small records. A hello that needs more is [ErrTooLarge].
const MaxBytes = 16 << 10

// maxRecord is the largest plaintext record payload (RFC 8446 §5.1).
const maxRecord = 1 << 14

// TLS wire values.
const (
	recordHandshake   = 0x16 // ContentType handshake
	typeClientHello   = 1    // HandshakeType client_hello
	extServerName     = 0x0000
	extALPN           = 0x0010
	extECH            = 0xfe0d // encrypted_client_hello (RFC 9849)
	nameTypeHost      = 0
	maxHostNameLength = 255
)

// Errors of [Parse]. ErrSSLv2, ErrMalformed and ErrTooLarge say why bytes
// that began as a hello are none; each error Parse returns for them
// wraps one of these (errors.Is).
var (
	// ErrShort means the bytes end before the ClientHello does: read
	// more.
	ErrShort = errors.New("sni: ClientHello incomplete")
	// ErrNotTLS means the first bytes are not a TLS handshake record.
	ErrNotTLS = errors.New("sni: not a TLS handshake")
	// ErrSSLv2 means the first bytes are an SSLv2-style ClientHello
	// (a two-byte record header with the high bit set), which carries
	// no extensions and so no server_name; no current TLS server takes
	// one.
	ErrSSLv2 = errors.New("sni: an SSLv2-style ClientHello")
	// ErrMalformed means a TLS handshake record that does not hold a
	// well-formed ClientHello.
	ErrMalformed = errors.New("sni: malformed ClientHello")
	// ErrTooLarge means the ClientHello takes more than MaxBytes of
	// records.
	ErrTooLarge = errors.New("sni: ClientHello larger than the bound")
)

// Hello is what Parse read of a ClientHello.
type Hello struct {
	// ServerName is the host_name of the server_name extension, as
	// sent (ASCII, not lower-cased, no trailing dot); "" when the hello
	// has none. With ECH it is the outer hello's: the public name, not
	// the name the client means to reach.
	ServerName string
	// ECH says the hello carries an encrypted_client_hello extension.
	ECH bool
	// alpn is the ALPN extension's protocol_name_list, without its
	// length; nil when there is none.
	alpn []byte
}

// ALPN returns the protocols the hello offers in its ALPN extension, in
// its order; nil when it has none.
func (h *Hello) ALPN() []string {
	var protos []string
	for b := h.alpn; len(b) > 0; {
		n := int(b[0])
		protos = append(protos, string(b[1:1+n]))
		b = b[1+n:]
	}
	return protos
}

// Parse reads a ClientHello from b, the first bytes a client sent: TLS
// handshake records whose payloads, joined, begin with the ClientHello
// message. It returns the hello and n, the bytes of b up to the end of
// the record that completes it (bytes after it, such as 0-RTT data, are
// the client's too, and are not read). The error is ErrShort when b ends
// before the hello does (read more and call Parse again with all of it,
// or use a Scanner, which does not read the same records again), or one
// that wraps ErrNotTLS, ErrSSLv2, ErrMalformed or ErrTooLarge. Parse
// does not modify b; the returned ServerName does not alias it. It
// allocates only for a ServerName, and for the hello's bytes when it is
// split over records.
func Parse(b []byte) (h Hello, n int, err error) {
	var s Scanner
	return s.Scan(b)
}

// Scanner is Parse for bytes that arrive a few at a time: each Scan
// reads only the records that came since the last, so that a hello sent
// in many small records or reads costs the same as one sent whole. Its
// zero value is ready; it holds the handshake bytes of the records read
// so far (a copy, never b), at most MaxBytes.
type Scanner struct {
	off int    // the bytes of whole records read
	msg []byte // their handshake payloads, joined; nil while none
}

// Scan is Parse of b, which holds the bytes of the earlier calls' b
// (the same bytes, perhaps moved) and more. After a result other than
// ErrShort, Scan must not be called again.
func (s *Scanner) Scan(b []byte) (h Hello, n int, err error) {
	if len(b) == 0 {
		return Hello{}, 0, ErrShort
	}
	if b[0] != recordHandshake {
		if sslv2(b) {
			return Hello{}, 0, ErrSSLv2
		}
		return Hello{}, 0, ErrNotTLS
	}
	for {
		off := s.off
		if off+5 > MaxBytes {
			return Hello{}, 0, ErrTooLarge
		}
		if off+5 > len(b) {
			return Hello{}, 0, ErrShort
		}
		hdr := b[off : off+5]
		switch {
		case hdr[0] != recordHandshake:
			return Hello{}, 0, fmt.Errorf("%w: a record of type %d before the hello is whole", ErrMalformed, hdr[0])
		case hdr[1] != 3:
			if off == 0 {
				return Hello{}, 0, ErrNotTLS
			}
			return Hello{}, 0, fmt.Errorf("%w: record version %d.%d", ErrMalformed, hdr[1], hdr[2])
		}
		rl := int(hdr[3])<<8 | int(hdr[4])
		switch {
		case rl == 0:
			return Hello{}, 0, fmt.Errorf("%w: an empty handshake record", ErrMalformed)
		case rl > maxRecord:
			return Hello{}, 0, fmt.Errorf("%w: a record of %d bytes", ErrMalformed, rl)
		case off+5+rl > MaxBytes:
			return Hello{}, 0, ErrTooLarge
		case off+5+rl > len(b):
			return Hello{}, 0, ErrShort
		}
		p := b[off+5 : off+5+rl]
		s.off += 5 + rl
		msg := p // the hello whole in its first record: read in place
		if s.msg != nil || s.off == 5+rl && rl < 4 {
			s.msg = append(s.msg, p...)
			msg = s.msg
		}
		if len(msg) < 4 {
			continue
		}
		if msg[0] != typeClientHello {
			return Hello{}, 0, fmt.Errorf("%w: handshake message type %d, not a ClientHello", ErrMalformed, msg[0])
		}
		ml := int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3])
		switch {
		case ml+4 > MaxBytes:
			return Hello{}, 0, ErrTooLarge
		case len(msg) < 4+ml:
			if s.msg == nil {
				s.msg = append(make([]byte, 0, ml+4), p...)
			}
			continue
		case len(msg) > 4+ml:
			return Hello{}, 0, fmt.Errorf("%w: bytes after the ClientHello in its record", ErrMalformed)
		}
		h, err := parseBody(msg[4:])
		if err != nil {
			return Hello{}, 0, err
		}
		return h, s.off, nil
	}
}

// sslv2 reports whether b begins as an SSLv2-style ClientHello: a
// two-byte record header with the high bit set, then the message type 1
// (CLIENT-HELLO) and a version whose major is 0 (SSL 2.0) or 3 (the
// compatible hello of SSL 3.0 and TLS 1.0 clients).
func sslv2(b []byte) bool {
	return len(b) >= 4 && b[0]&0x80 != 0 && b[2] == 1 && (b[3] == 0 || b[3] == 3)
}

// reader reads the fields of a message, each length-prefixed read
// checked against what is left.
type reader struct {
	b   []byte
	bad bool
}

func (r *reader) bytes(n int) []byte {
	if r.bad || n > len(r.b) {
		r.bad = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() int {
	v := r.bytes(1)
	if v == nil {
		return 0
	}
	return int(v[0])
}

func (r *reader) u16() int {
	v := r.bytes(2)
	if v == nil {
		return 0
	}
	return int(v[0])<<8 | int(v[1])
}

// vec8 and vec16 read a vector with a one- or two-byte length.
func (r *reader) vec8() []byte  { return r.bytes(r.u8()) }
func (r *reader) vec16() []byte { return r.bytes(r.u16()) }

// parseBody parses a ClientHello's body (RFC 8446 §4.1.2; RFC 5246
// §7.4.1.2, whose hello may end before its extensions).
func parseBody(b []byte) (Hello, error) {
	r := reader{b: b}
	r.bytes(2 + 32) // legacy_version, random
	if sid := r.vec8(); len(sid) > 32 {
		return Hello{}, fmt.Errorf("%w: a session id of %d bytes", ErrMalformed, len(sid))
	}
	if cs := r.vec16(); len(cs) < 2 || len(cs)%2 != 0 {
		if !r.bad {
			return Hello{}, fmt.Errorf("%w: cipher suites of %d bytes", ErrMalformed, len(cs))
		}
	}
	if cm := r.vec8(); len(cm) == 0 && !r.bad {
		return Hello{}, fmt.Errorf("%w: no compression method", ErrMalformed)
	}
	if r.bad {
		return Hello{}, fmt.Errorf("%w: truncated", ErrMalformed)
	}
	var h Hello
	if len(r.b) == 0 {
		return h, nil // no extensions (TLS 1.2 and older)
	}
	exts := r.vec16()
	if r.bad || len(r.b) != 0 {
		return Hello{}, fmt.Errorf("%w: the extensions' length", ErrMalformed)
	}
	var sawName, sawALPN bool
	for e := (reader{b: exts}); len(e.b) > 0; {
		typ := e.u16()
		data := e.vec16()
		if e.bad {
			return Hello{}, fmt.Errorf("%w: an extension's length", ErrMalformed)
		}
		switch typ {
		case extServerName:
			if sawName {
				return Hello{}, fmt.Errorf("%w: two server_name extensions", ErrMalformed)
			}
			sawName = true
			name, err := serverName(data)
			if err != nil {
				return Hello{}, err
			}
			h.ServerName = name
		case extALPN:
			if sawALPN {
				return Hello{}, fmt.Errorf("%w: two ALPN extensions", ErrMalformed)
			}
			sawALPN = true
			list, err := alpnList(data)
			if err != nil {
				return Hello{}, err
			}
			h.alpn = list
		case extECH:
			if h.ECH {
				return Hello{}, fmt.Errorf("%w: two encrypted_client_hello extensions", ErrMalformed)
			}
			h.ECH = true
		}
	}
	return h, nil
}

// serverName returns the host_name of a server_name extension's data
// (RFC 6066 §3): a list of at least one entry, at most one of each name
// type, the host name ASCII without a trailing dot. Entries of other
// name types are skipped.
func serverName(data []byte) (string, error) {
	r := reader{b: data}
	list := r.vec16()
	if r.bad || len(r.b) != 0 || len(list) == 0 {
		return "", fmt.Errorf("%w: the server_name list's length", ErrMalformed)
	}
	var host []byte
	for l := (reader{b: list}); len(l.b) > 0; {
		typ := l.u8()
		name := l.vec16()
		if l.bad {
			return "", fmt.Errorf("%w: a server_name entry's length", ErrMalformed)
		}
		if typ != nameTypeHost {
			continue
		}
		if host != nil {
			return "", fmt.Errorf("%w: two host names in server_name", ErrMalformed)
		}
		if !hostName(name) {
			return "", fmt.Errorf("%w: server_name %q is not a host name", ErrMalformed, name)
		}
		host = name
	}
	return string(host), nil
}

// hostName reports whether b is a host name as server_name carries it:
// 1 to 255 bytes of letters, digits, '-', '_' and '.', no empty label and
// no trailing dot.
func hostName(b []byte) bool {
	if len(b) == 0 || len(b) > maxHostNameLength || b[0] == '.' || b[len(b)-1] == '.' {
		return false
	}
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_':
		case c == '.':
			if b[i-1] == '.' {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// alpnList checks an ALPN extension's data (RFC 7301 §3.1): a list of
// non-empty protocol names, at least one. It returns the list without
// its length.
func alpnList(data []byte) ([]byte, error) {
	r := reader{b: data}
	list := r.vec16()
	if r.bad || len(r.b) != 0 || len(list) == 0 {
		return nil, fmt.Errorf("%w: the ALPN list's length", ErrMalformed)
	}
	for l := (reader{b: list}); len(l.b) > 0; {
		if p := l.vec8(); l.bad || len(p) == 0 {
			return nil, fmt.Errorf("%w: an ALPN protocol's length", ErrMalformed)
		}
	}
	return list, nil
}

// Read reads from r, behind the bytes buf holds already, until buf holds
// a whole ClientHello or shows that it cannot become one, and returns buf
// with what was read (grown as needed, never past MaxBytes) and Parse's
// result on it. A read that fails first returns its error (io.EOF, a
// timeout the caller's deadline set) with the bytes read until then.
// Every byte read is in the returned buffer, for the caller to send on.
func Read(r io.Reader, buf []byte) ([]byte, Hello, error) {
	var s Scanner
	for {
		h, _, err := s.Scan(buf)
		if err != ErrShort {
			return buf, h, err
		}
		if len(buf) >= MaxBytes {
			return buf, Hello{}, ErrTooLarge // Parse says so first; kept for a caller's odd buffer
		}
		if len(buf) == cap(buf) {
			nb := make([]byte, len(buf), min(max(2*cap(buf), 2<<10), MaxBytes))
			copy(nb, buf)
			buf = nb
		}
		n, rerr := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if rerr != nil && n == 0 {
			if rerr == io.EOF {
				rerr = io.ErrUnexpectedEOF
			}
			return buf, Hello{}, rerr
		}
	}
}
