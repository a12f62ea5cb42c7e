package authz

import (
	"net/netip"
	"strconv"
	"unicode/utf8"
)

// AppendDocument appends to b the document sent about in, as the service
// reads it (see the package documentation), and the cache keys it:
// {"input":{...}}, every field present, in a fixed order; host is Host,
// or Addr when Host is "". Strings are
// escaped as JSON needs, invalid UTF-8 replaced by U+FFFD. It allocates
// nothing beyond b's growth.
func (in *Input) AppendDocument(b []byte) []byte {
	b = append(b, `{"input":{"listener":`...)
	b = appendString(b, in.Listener)
	b = append(b, `,"user":`...)
	b = appendString(b, in.User)
	b = append(b, `,"groups":[`...)
	for i, g := range in.Groups {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, g)
	}
	b = append(b, `],"client":`...)
	b = appendAddr(b, in.Client)
	b = append(b, `,"host":`...)
	if in.Host == "" && in.Addr.IsValid() {
		b = appendAddr(b, in.Addr)
	} else {
		b = appendString(b, in.Host)
	}
	b = append(b, `,"port":`...)
	b = strconv.AppendUint(b, uint64(in.Port), 10)
	b = append(b, `,"method":`...)
	b = appendString(b, in.Method)
	b = append(b, `,"protocol":`...)
	b = appendString(b, in.Protocol)
	b = append(b, `,"sni":`...)
	b = appendString(b, in.SNI)
	return append(b, "}}"...)
}

// appendAddr appends a as a JSON string, "" for the zero Addr.
func appendAddr(b []byte, a netip.Addr) []byte {
	b = append(b, '"')
	if a.IsValid() {
		b = a.WithZone("").AppendTo(b)
	}
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
