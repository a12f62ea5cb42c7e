package accesslog

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// field is a value a template can write.
type field uint8

// The fields of a template, in the order of TemplateFields.
const (
	fieldNone field = iota // a literal segment's end: no field
	fieldTime
	fieldTimeUnix
	fieldTimeEndUnix
	fieldTimeCLF
	fieldListener
	fieldClient
	fieldClientIP
	fieldUser
	fieldProtocol
	fieldMethod
	fieldTarget
	fieldRequestLine
	fieldStatus
	fieldHTTPStatus
	fieldBytesUp
	fieldBytesDown
	fieldDurationMS
	fieldUpstream
	fieldUpstreamIP
	fieldRule
	fieldReason
	fieldSource
	fieldSourceIP
	fieldRoute
	fieldParent
	fieldWouldDeny
	fieldSNI
	fieldIntercepted
	fieldOrigDst
	fieldSquidCode
	fieldSquidHierarchy
	fieldSquidError
	fieldSquid
	fieldCommon
	fieldCombined
	numFields
)

// fieldNames names the fields as a template writes them: the keys of
// the JSON format for the record's own fields.
var fieldNames = [numFields]string{
	fieldTime:           "time",
	fieldTimeUnix:       "time_unix",
	fieldTimeEndUnix:    "time_end_unix",
	fieldTimeCLF:        "time_clf",
	fieldListener:       "listener",
	fieldClient:         "client",
	fieldClientIP:       "client_ip",
	fieldUser:           "user",
	fieldProtocol:       "protocol",
	fieldMethod:         "method",
	fieldTarget:         "target",
	fieldRequestLine:    "request_line",
	fieldStatus:         "status",
	fieldHTTPStatus:     "http_status",
	fieldBytesUp:        "bytes_up",
	fieldBytesDown:      "bytes_down",
	fieldDurationMS:     "duration_ms",
	fieldUpstream:       "upstream",
	fieldUpstreamIP:     "upstream_ip",
	fieldRule:           "rule",
	fieldReason:         "reason",
	fieldSource:         "source",
	fieldSourceIP:       "source_ip",
	fieldRoute:          "route",
	fieldParent:         "parent",
	fieldWouldDeny:      "would_deny",
	fieldSNI:            "sni",
	fieldIntercepted:    "intercepted",
	fieldOrigDst:        "orig_dst",
	fieldSquidCode:      "squid_code",
	fieldSquidHierarchy: "squid_hierarchy",
	fieldSquidError:     "squid_error",
	fieldSquid:          "squid",
	fieldCommon:         "common",
	fieldCombined:       "combined",
}

// TemplateFields returns the names a template may use, each written
// {name}:
//
//   - time (start, RFC 3339 UTC with milliseconds), time_unix (start,
//     Unix seconds with milliseconds), time_end_unix (end, likewise, as
//     Squid stamps its lines), time_clf (start, "[02/Jan/2006:15:04:05
//     +0000]", Apache's %t);
//   - listener, client (host:port), client_ip, user, protocol, method,
//     target, request_line ("METHOD TARGET VERSION", Apache's %r),
//     status (as the text format), http_status (Record.HTTPStatus in
//     three digits, 000 when nothing was answered), bytes_up, bytes_down,
//     duration_ms, upstream (host:port), upstream_ip, rule, reason,
//     source (host:port), source_ip, route, parent, would_deny, sni,
//     intercepted ("intercepted" or "-"), orig_dst (host:port);
//   - squid_code (Squid's result code, TCP_MISS), squid_hierarchy
//     (HIER_DIRECT/IP), squid_error (Squid's ERR_ page, "-" when served);
//   - squid, common, combined: a whole line of that format, to which a
//     template can add fields.
//
// An empty value is written "-"; string values are escaped as the text
// format escapes them, and '"' too, so that none holds a space or a
// quote: a template's fields split as its literal text does.
// time_clf and request_line hold spaces of their own.
func TemplateFields() []string {
	return append([]string(nil), fieldNames[1:]...)
}

// segment is a template's literal text followed by one field (or none,
// at the end).
type segment struct {
	lit string
	f   field
}

// template is a parsed [Config.Template].
type template struct {
	segs []segment
}

// ValidateTemplate reports what is wrong with a template for
// [FormatTemplate]: empty, an unknown or unclosed {field} (with its
// byte offset), or a control character other than a tab, which would
// break the line.
func ValidateTemplate(s string) error {
	_, err := parseTemplate(s)
	return err
}

// parseTemplate parses s: literal text with {name} fields, "{{" for a
// literal '{'.
func parseTemplate(s string) (*template, error) {
	if s == "" {
		return nil, errors.New("empty")
	}
	t := &template{}
	var lit strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '{' && i+1 < len(s) && s[i+1] == '{':
			lit.WriteByte('{')
			i++
		case c == '{':
			end := strings.IndexByte(s[i+1:], '}')
			if end < 0 {
				return nil, fmt.Errorf("unclosed { at byte %d: write {{ for a literal {", i)
			}
			name := s[i+1 : i+1+end]
			f := lookupField(name)
			if f == fieldNone {
				return nil, fmt.Errorf("unknown field {%s} at byte %d; the fields are %s",
					name, i, strings.Join(fieldNames[1:], ", "))
			}
			t.segs = append(t.segs, segment{lit: lit.String(), f: f})
			lit.Reset()
			i += 1 + end
		case c < ' ' && c != '\t' || c == 0x7f:
			return nil, fmt.Errorf("control character 0x%02x at byte %d: a line cannot hold it", c, i)
		default:
			lit.WriteByte(c)
		}
	}
	if lit.Len() > 0 {
		t.segs = append(t.segs, segment{lit: lit.String()})
	}
	return t, nil
}

func lookupField(name string) field {
	for f := fieldNone + 1; f < numFields; f++ {
		if fieldNames[f] == name {
			return f
		}
	}
	return fieldNone
}

// append appends r as a line of the template, without the newline.
func (t *template) append(b []byte, r *Record) []byte {
	for _, s := range t.segs {
		b = append(b, s.lit...)
		if s.f != fieldNone {
			b = appendField(b, s.f, r)
		}
	}
	return b
}

// appendField appends f's value for r.
func appendField(b []byte, f field, r *Record) []byte {
	switch f {
	case fieldTime:
		return r.Time.UTC().AppendFormat(b, timeLayout)
	case fieldTimeUnix:
		return appendUnixMillis(b, r.Time, 0)
	case fieldTimeEndUnix:
		return appendUnixMillis(b, r.Time.Add(max(r.Duration, 0)), 0)
	case fieldTimeCLF:
		return r.Time.UTC().AppendFormat(b, clfTimeLayout)
	case fieldListener:
		return appendEscaped(b, r.Listener, escQuoted)
	case fieldClient:
		return appendTextAddr(b, r.Client)
	case fieldClientIP:
		return appendIP(b, r.Client)
	case fieldUser:
		return appendEscaped(b, r.User, escQuoted)
	case fieldProtocol:
		return append(b, r.Protocol.String()...)
	case fieldMethod:
		return appendEscaped(b, r.Method, escQuoted)
	case fieldTarget:
		return appendEscaped(b, r.Target, escQuoted)
	case fieldRequestLine:
		return appendRequestLine(b, r)
	case fieldStatus:
		return strconv.AppendInt(b, int64(r.Status), 10)
	case fieldHTTPStatus:
		return appendStatus3(b, httpStatus(r))
	case fieldBytesUp:
		return strconv.AppendInt(b, r.BytesUp, 10)
	case fieldBytesDown:
		return strconv.AppendInt(b, r.BytesDown, 10)
	case fieldDurationMS:
		return appendMillis(b, r.Duration)
	case fieldUpstream:
		return appendTextAddr(b, r.Upstream)
	case fieldUpstreamIP:
		return appendIP(b, r.Upstream)
	case fieldRule:
		return appendEscaped(b, r.Rule, escQuoted)
	case fieldReason:
		return appendEscaped(b, r.Reason, escQuoted)
	case fieldSource:
		return appendTextAddr(b, r.Source)
	case fieldSourceIP:
		return appendIP(b, r.Source)
	case fieldRoute:
		return appendEscaped(b, r.Route, escQuoted)
	case fieldParent:
		return appendEscaped(b, r.Parent, escQuoted)
	case fieldWouldDeny:
		return appendEscaped(b, r.WouldDeny, escQuoted)
	case fieldSNI:
		return appendEscaped(b, r.SNI, escQuoted)
	case fieldIntercepted:
		if r.Intercepted {
			return append(b, "intercepted"...)
		}
		return append(b, '-')
	case fieldOrigDst:
		return appendTextAddr(b, r.Original)
	case fieldSquidCode:
		return appendSquidCode(b, r)
	case fieldSquidHierarchy:
		return appendSquidHierarchy(b, r)
	case fieldSquidError:
		return append(b, squidError(r)...)
	case fieldSquid:
		return appendSquid(b, r)
	case fieldCommon:
		return appendCommon(b, r)
	case fieldCombined:
		return appendCombined(b, r)
	}
	return b
}
