package accesslog

import "strconv"

// clfTimeLayout is the time of the NCSA formats (Apache's %t), in UTC.
const clfTimeLayout = "[02/Jan/2006:15:04:05 -0700]"

// versions is the protocol version a request line names, by Protocol:
// what the client spoke to rustle. HTTP/1.0 clients are written
// HTTP/1.1, which rustle answered them with.
var versions = [...]string{
	ProtoHTTP:      "HTTP/1.1",
	ProtoConnect:   "HTTP/1.1",
	ProtoWebSocket: "HTTP/1.1",
	ProtoH2:        "HTTP/2.0",
	ProtoSOCKS5:    "SOCKS5",
	ProtoSOCKS5UDP: "SOCKS5",
	ProtoSOCKS4:    "SOCKS4",
	ProtoH3:        "HTTP/3.0",

	ProtoTransparent: "HTTP/1.1",
}

// version returns the version a request line of p names, "-" for the
// zero Protocol.
func (p Protocol) version() string {
	if int(p) < len(versions) && versions[p] != "" {
		return versions[p]
	}
	return "-"
}

// appendRequestLine appends r's request as Apache's %r writes it:
// "METHOD TARGET VERSION", each part escaped (escQuoted) and "-" when
// empty, or "-" alone when r has neither method nor target.
func appendRequestLine(b []byte, r *Record) []byte {
	if r.Method == "" && r.Target == "" {
		return append(b, '-')
	}
	b = appendEscaped(b, r.Method, escQuoted)
	b = append(b, ' ')
	b = appendEscaped(b, r.Target, escQuoted)
	b = append(b, ' ')
	return append(b, r.Protocol.version()...)
}

// appendDashInt appends n, or "-" when it is zero (CLF's %b).
func appendDashInt(b []byte, n int64) []byte {
	if n == 0 {
		return append(b, '-')
	}
	return strconv.AppendInt(b, n, 10)
}

// appendCommon appends r as a line of [FormatCommon], without the
// newline.
func appendCommon(b []byte, r *Record) []byte {
	b = appendIP(b, r.Client)
	b = append(b, " - "...)
	b = appendEscaped(b, r.User, escCLFUser)
	b = append(b, ' ')
	b = r.Time.UTC().AppendFormat(b, clfTimeLayout)
	b = append(b, ` "`...)
	b = appendRequestLine(b, r)
	b = append(b, `" `...)
	b = appendDashInt(b, int64(httpStatus(r)))
	b = append(b, ' ')
	return appendDashInt(b, max(r.BytesDown, 0))
}

// appendCombined appends r as a line of [FormatCombined], without the
// newline.
func appendCombined(b []byte, r *Record) []byte {
	return append(appendCommon(b, r), ` "-" "-"`...)
}
