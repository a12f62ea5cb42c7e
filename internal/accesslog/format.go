package accesslog

import (
	"net/netip"
	"strconv"
	"time"
	"unicode/utf8"
)

// timeLayout is the time format of both line formats: UTC, milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// appendText appends r as one line of [FormatText].
func appendText(b []byte, r *Record) []byte {
	b = r.Time.UTC().AppendFormat(b, timeLayout)
	b = append(b, ' ')
	b = appendTextField(b, r.Listener)
	b = append(b, ' ')
	b = appendTextAddr(b, r.Client)
	b = append(b, ' ')
	b = appendTextField(b, r.User)
	b = append(b, ' ')
	b = append(b, r.Protocol.String()...)
	b = append(b, ' ')
	b = appendTextField(b, r.Method)
	b = append(b, ' ')
	b = appendTextField(b, r.Target)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.BytesUp, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.BytesDown, 10)
	b = append(b, ' ')
	b = appendMillis(b, r.Duration)
	b = append(b, ' ')
	b = appendTextAddr(b, r.Upstream)
	b = append(b, ' ')
	b = appendTextField(b, r.Rule)
	// The optional last fields: each one written forces those before
	// it, as "-" when unset.
	tail := 0
	switch {
	case r.Original.IsValid():
		tail = 7
	case r.Intercepted:
		tail = 6
	case r.SNI != "":
		tail = 5
	case r.WouldDeny != "":
		tail = 4
	case r.Route != "" || r.Parent != "":
		tail = 3
	case r.Source.IsValid():
		tail = 2
	case r.Reason != "":
		tail = 1
	}
	if tail >= 1 {
		b = append(b, ' ')
		b = appendTextField(b, r.Reason)
	}
	if tail >= 2 {
		b = append(b, ' ')
		b = appendTextAddr(b, r.Source)
	}
	if tail >= 3 {
		b = append(b, ' ')
		b = appendTextField(b, r.Route)
		b = append(b, ' ')
		b = appendTextField(b, r.Parent)
	}
	if tail >= 4 {
		b = append(b, ' ')
		b = appendTextField(b, r.WouldDeny)
	}
	if tail >= 5 {
		b = append(b, ' ')
		b = appendTextField(b, r.SNI)
	}
	if tail >= 6 {
		if r.Intercepted {
			b = append(b, " intercepted"...)
		} else {
			b = append(b, " -"...)
		}
	}
	if tail >= 7 {
		b = append(b, ' ')
		b = appendTextAddr(b, r.Original)
	}
	return append(b, '\n')
}

const hexDigits = "0123456789abcdef"

// escapes is a set of bytes a format writes escaped.
type escapes [256]bool

// escapeSet returns the set of the bytes outside '!'..'~' and those of
// extra.
func escapeSet(extra string) *escapes {
	var e escapes
	for c := range 256 {
		e[c] = c < '!' || c > '~'
	}
	for i := 0; i < len(extra); i++ {
		e[extra[i]] = true
	}
	return &e
}

var (
	// escText is what the text format escapes: '\' and the bytes
	// outside '!'..'~'.
	escText = escapeSet(`\`)
	// escQuoted adds '"', for values that may stand between quotes
	// (common and combined, templates).
	escQuoted = escapeSet(`\"`)
	// escCLFUser adds '[' and ']' to escQuoted for the user of common and
	// combined lines, whose parsers look for the '[' of the time after it.
	escCLFUser = escapeSet(`\"[]`)
)

// appendTextField appends s with every byte outside '!'..'~', and '\',
// escaped as \xHH; "" becomes "-" and "-" becomes \x2d.
func appendTextField(b []byte, s string) []byte {
	return appendEscaped(b, s, escText)
}

// appendEscaped appends s with every byte of esc escaped as \xHH; ""
// becomes "-" and "-" becomes \x2d.
func appendEscaped(b []byte, s string, esc *escapes) []byte {
	switch s {
	case "":
		return append(b, '-')
	case "-":
		return append(b, `\x2d`...)
	}
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; esc[c] {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
			start = i + 1
		}
	}
	return append(b, s[start:]...)
}

func appendTextAddr(b []byte, a netip.AddrPort) []byte {
	if !a.IsValid() {
		return append(b, '-')
	}
	return appendAddr(b, a)
}

// appendAddr appends a valid address as host:port, an IPv4-mapped IPv6
// address as IPv4.
func appendAddr(b []byte, a netip.AddrPort) []byte {
	if a.Addr().Is4In6() {
		a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	}
	return a.AppendTo(b)
}

// appendMillis appends d in milliseconds with three decimals; a negative
// d is written as 0.000.
func appendMillis(b []byte, d time.Duration) []byte {
	us := max(d.Microseconds(), 0)
	b = strconv.AppendInt(b, us/1000, 10)
	frac := us % 1000
	return append(b, '.', byte('0'+frac/100), byte('0'+frac/10%10), byte('0'+frac%10))
}

// appendJSON appends r as one line of [FormatJSON].
func appendJSON(b []byte, r *Record) []byte {
	b = append(b, `{"time":"`...)
	b = r.Time.UTC().AppendFormat(b, timeLayout)
	b = append(b, `","listener":`...)
	b = AppendJSONString(b, r.Listener)
	b = append(b, `,"client":`...)
	b = appendJSONAddr(b, r.Client)
	b = append(b, `,"user":`...)
	b = AppendJSONString(b, r.User)
	b = append(b, `,"protocol":`...)
	if r.Protocol.String() == "-" {
		b = append(b, `""`...)
	} else {
		b = append(b, '"')
		b = append(b, r.Protocol.String()...)
		b = append(b, '"')
	}
	b = append(b, `,"method":`...)
	b = AppendJSONString(b, r.Method)
	b = append(b, `,"target":`...)
	b = AppendJSONString(b, r.Target)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(r.Status), 10)
	b = append(b, `,"bytes_up":`...)
	b = strconv.AppendInt(b, r.BytesUp, 10)
	b = append(b, `,"bytes_down":`...)
	b = strconv.AppendInt(b, r.BytesDown, 10)
	b = append(b, `,"duration_ms":`...)
	b = appendMillis(b, r.Duration)
	b = append(b, `,"upstream":`...)
	b = appendJSONAddr(b, r.Upstream)
	b = append(b, `,"rule":`...)
	b = AppendJSONString(b, r.Rule)
	if r.Reason != "" {
		b = append(b, `,"reason":`...)
		b = AppendJSONString(b, r.Reason)
	}
	if r.Source.IsValid() {
		b = append(b, `,"source":"`...)
		b = appendAddr(b, r.Source)
		b = append(b, '"')
	}
	if r.Route != "" {
		b = append(b, `,"route":`...)
		b = AppendJSONString(b, r.Route)
	}
	if r.Parent != "" {
		b = append(b, `,"parent":`...)
		b = AppendJSONString(b, r.Parent)
	}
	if r.WouldDeny != "" {
		b = append(b, `,"would_deny":`...)
		b = AppendJSONString(b, r.WouldDeny)
	}
	if r.SNI != "" {
		b = append(b, `,"sni":`...)
		b = AppendJSONString(b, r.SNI)
	}
	if r.Intercepted {
		b = append(b, `,"intercepted":true`...)
	}
	if r.Original.IsValid() {
		b = append(b, `,"orig_dst":"`...)
		b = appendAddr(b, r.Original)
		b = append(b, '"')
	}
	return append(b, "}\n"...)
}

func appendJSONAddr(b []byte, a netip.AddrPort) []byte {
	if !a.IsValid() {
		return append(b, `""`...)
	}
	b = append(b, '"')
	b = appendAddr(b, a)
	return append(b, '"')
}

// AppendJSONString appends s as a JSON string, escaping as encoding/json
// does except for '<', '>' and '&', which are kept: '"', '\' and control
// characters are escaped, invalid UTF-8 becomes U+FFFD, and U+2028 and
// U+2029 are escaped.
func AppendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
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
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
