package http1

import (
	"bytes"
	"errors"
)

// Span is a byte range [Start, End) of a head buffer. Parsed heads keep
// spans rather than strings so that parsing allocates nothing.
type Span struct{ Start, End int32 }

// Empty reports whether the span holds no byte.
func (s Span) Empty() bool { return s.End <= s.Start }

// Of returns the bytes of b the span covers.
func (s Span) Of(b []byte) []byte { return b[s.Start:s.End] }

// Field is one header field line of a parsed head: the whole line
// (without CRLF), its name and its value with surrounding whitespace trimmed.
type Field struct {
	Line, Name, Value Span
	// Drop is set for hop-by-hop fields and fields rustle replaces.
	Drop bool
}

// ParseError is a refusal of a malformed message head. Status is the
// response a client gets for a request head (400, 431, 501, 505).
type ParseError struct {
	Status int
	Reason string
	// Framing is set when the head was refused for how it frames its
	// body, the shapes of request smuggling: Content-Length and
	// Transfer-Encoding together, conflicting or invalid Content-Length
	// values, a Transfer-Encoding whose last coding is not chunked (or
	// any in HTTP/1.0), and the line folding and whitespace before a
	// colon that can hide either field from one parser but not another.
	Framing bool
}

// Error returns the reason with the package prefix.
func (e *ParseError) Error() string { return "http1: " + e.Reason }

// NewParseError returns a *ParseError refusing a message with status and
// reason.
func NewParseError(status int, reason string) error {
	return &ParseError{Status: status, Reason: reason}
}

func perr(status int, reason string) error { return NewParseError(status, reason) }

// framingErr returns a *ParseError refusing a message for its framing
// (see ParseError.Framing).
func framingErr(reason string) error {
	return &ParseError{Status: 400, Reason: reason, Framing: true}
}

// Parse errors, allocated once.
var (
	errBadRequestLine  = perr(400, "malformed request line")
	errBadMethod       = perr(400, "malformed method")
	errBadTarget       = perr(400, "malformed request target")
	errVersion         = perr(505, "unsupported HTTP version")
	errBadVersion      = perr(400, "malformed HTTP version")
	errBareCR          = perr(400, "bare CR or LF in message head")
	errObsFold         = framingErr("obsolete line folding in header")
	errSpaceColon      = framingErr("whitespace between header name and colon")
	errBadHeaderName   = perr(400, "malformed header name")
	errBadHeaderValue  = perr(400, "invalid character in header value")
	errTooManyHeaders  = perr(431, "too many header fields")
	ErrHeadTooLarge    = perr(431, "request header fields too large")
	errBadCL           = framingErr("invalid Content-Length")
	errDupCL           = framingErr("conflicting Content-Length values")
	errCLAndTE         = framingErr("both Content-Length and Transfer-Encoding")
	errTENotChunked    = framingErr("Transfer-Encoding without chunked as final coding")
	errTEUnsupported   = perr(501, "unsupported transfer coding")
	errTEHTTP10        = framingErr("Transfer-Encoding in an HTTP/1.0 message")
	errDupHost         = perr(400, "more than one Host header")
	errTooManyConnOpts = perr(400, "too many Connection options")
	ErrBadStatusLine   = errors.New("http1: malformed status line")
	ErrBadResponseHead = errors.New("http1: malformed response head")
)

// ErrTransferCoding is the error of a response whose Transfer-Encoding
// names a coding other than chunked (Head.TEOther), body or not: no
// front-end relays one (502), as no HTTP/2 or HTTP/3 client could be
// given it, and an HTTP/1.1 client did not ask for it (rustle forwards no
// TE field, so an origin has no leave to use another coding). "identity"
// is no coding any more (RFC 9112 §7) and refused too, as Go's net/http
// and Squid do. What follows "http1: " is the one-line reason a client is
// answered (see internal/origin.Failure).
var ErrTransferCoding = errors.New("http1: upstream used a transfer coding other than chunked")

// maxHeaders bounds the header lines of one head.
const maxHeaders = 256

// maxConnTokens bounds the options one Connection header set may list.
const maxConnTokens = 16

// Head is the parsed form of a request or response head. It is reused
// across messages of a connection: each parse starts it afresh. Its spans
// and fields point into Buf, the head's bytes, which it does not own.
type Head struct {
	Buf []byte // the head's bytes, request line through the empty line

	// Request fields.
	Method, Target Span
	// Response fields.
	Status int
	Reason Span

	Minor int // HTTP/1.minor

	Fields []Field

	ContentLength int64 // -1 when absent
	Chunked       bool
	// TEOther is set when Transfer-Encoding names a coding other than
	// chunked (responses only). A response whose final coding is
	// chunked is framed by it (Chunked), whatever codings come before;
	// one without is delimited by close.
	TEOther bool

	ConnClose, ConnKeepAlive bool
	connTokens               [maxConnTokens]Span
	nConnTokens              int

	ExpectContinue bool
	HostIdx        int  // index in Fields of the Host field, -1 if none
	UpgradeIdx     int  // index in Fields of the Upgrade field, -1 if none
	ConnUpgrade    bool // Connection lists "upgrade"
	ProxyAuth      Span
	HasVia         bool // a Via field is present
	MaxForwardsIdx int  // index in Fields of the first Max-Forwards field, -1 if none
}

func (h *Head) reset(buf []byte) {
	h.Buf = buf
	h.Method, h.Target, h.Reason = Span{}, Span{}, Span{}
	h.Status, h.Minor = 0, 0
	h.Fields = h.Fields[:0]
	h.ContentLength = -1
	h.Chunked, h.TEOther = false, false
	h.ConnClose, h.ConnKeepAlive = false, false
	h.nConnTokens = 0
	h.ExpectContinue = false
	h.HostIdx = -1
	h.UpgradeIdx = -1
	h.ConnUpgrade = false
	h.ProxyAuth = Span{}
	h.HasVia = false
	h.MaxForwardsIdx = -1
}

// findHeadEnd returns the length of the head at the start of b (through
// the CRLF CRLF that ends it), or -1 when b does not hold a whole head yet.
// from is where to resume the search (a previous call's len(b)-3).
func findHeadEnd(b []byte, from int) int {
	if from < 0 {
		from = 0
	}
	i := bytes.Index(b[from:], crlfcrlf)
	if i < 0 {
		return -1
	}
	return from + i + 4
}

var crlfcrlf = []byte("\r\n\r\n")

// tchar reports whether c may appear in a token (RFC 9110 §5.6.2).
var tchar = func() (t [256]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// IsTokenChar reports whether c may appear in a token (RFC 9110 §5.6.2).
func IsTokenChar(c byte) bool { return tchar[c] }

// fieldVChar reports whether c may appear inside a field value: VCHAR,
// obs-text, SP and HTAB. CR, LF, NUL and other controls may not.
var fieldVChar = func() (t [256]bool) {
	for c := 0x21; c <= 0xff; c++ {
		t[c] = c != 0x7f
	}
	t[' '], t['\t'] = true, true
	return t
}()

// ParseRequest parses a request head: b must be the whole head as found by
// findHeadEnd. When it fails past the request line, Method and Target
// are set: they were parsed.
func (h *Head) ParseRequest(b []byte) error {
	eol, err := h.ParseRequestLine(b)
	if err != nil {
		return err
	}
	if err := h.parseFields(b, eol+2); err != nil {
		return err
	}
	return h.checkFraming(true)
}

// ParseRequestLine parses the request line at the start of b, which may
// hold a head not yet whole (one refused as too large or too slow, whose
// request line may still say what it was): Method, Target and Minor are
// set when it returns nil, with the index of the line's CR. No other
// field is parsed.
func (h *Head) ParseRequestLine(b []byte) (int, error) {
	h.reset(b)
	eol, err := lineEnd(b, 0)
	if err != nil {
		return 0, err
	}
	line := b[:eol]
	// method SP request-target SP HTTP-version
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return 0, errBadRequestLine
	}
	for _, c := range line[:sp1] {
		if !tchar[c] {
			return 0, errBadMethod
		}
	}
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 {
		return 0, errBadRequestLine
	}
	for _, c := range rest[:sp2] {
		if c <= ' ' || c == 0x7f {
			return 0, errBadTarget
		}
	}
	minor, err := parseVersion(rest[sp2+1:])
	if err != nil {
		return 0, err
	}
	h.Method = Span{0, int32(sp1)}
	h.Target = Span{int32(sp1 + 1), int32(sp1 + 1 + sp2)}
	h.Minor = minor
	return eol, nil
}

// ParseResponse parses a response head.
func (h *Head) ParseResponse(b []byte) error {
	h.reset(b)
	eol, err := lineEnd(b, 0)
	if err != nil {
		return ErrBadStatusLine
	}
	line := b[:eol]
	// HTTP-version SP 3DIGIT SP reason-phrase (the last SP is tolerated
	// missing when the reason is empty).
	if len(line) < 12 || line[8] != ' ' {
		return ErrBadStatusLine
	}
	minor, err := parseVersion(line[:8])
	if err != nil {
		return ErrBadStatusLine
	}
	h.Minor = minor
	d0, d1, d2 := line[9], line[10], line[11]
	if d0 < '1' || d0 > '5' || d1 < '0' || d1 > '9' || d2 < '0' || d2 > '9' {
		return ErrBadStatusLine
	}
	h.Status = int(d0-'0')*100 + int(d1-'0')*10 + int(d2-'0')
	if len(line) > 12 {
		if line[12] != ' ' {
			return ErrBadStatusLine
		}
		for _, c := range line[13:] {
			if !fieldVChar[c] {
				return ErrBadStatusLine
			}
		}
		h.Reason = Span{13, int32(eol)}
	}
	if err := h.parseFields(b, eol+2); err != nil {
		return ErrBadResponseHead
	}
	if err := h.checkFraming(false); err != nil {
		return ErrBadResponseHead
	}
	return nil
}

// parseVersion parses "HTTP/1.0" or "HTTP/1.1" and returns the minor version.
func parseVersion(v []byte) (int, error) {
	if len(v) != 8 || string(v[:5]) != "HTTP/" || v[6] != '.' {
		return 0, errBadVersion
	}
	if v[5] < '0' || v[5] > '9' || v[7] < '0' || v[7] > '9' {
		return 0, errBadVersion
	}
	if v[5] != '1' {
		return 0, errVersion
	}
	return int(v[7] - '0'), nil
}

// lineEnd returns the index of the CR of the CRLF ending the line that
// starts at from. A bare CR or LF inside the line is an error.
func lineEnd(b []byte, from int) (int, error) {
	for i := from; i < len(b); i++ {
		switch b[i] {
		case '\r':
			if i+1 < len(b) && b[i+1] == '\n' {
				return i, nil
			}
			return 0, errBareCR
		case '\n':
			return 0, errBareCR
		}
	}
	return 0, errBareCR
}

// parseFields parses the header lines from off to the end of the head.
func (h *Head) parseFields(b []byte, off int) error {
	for {
		if off+1 < len(b) && b[off] == '\r' && b[off+1] == '\n' {
			return nil // the empty line
		}
		if off >= len(b) {
			return errBareCR
		}
		eol, err := lineEnd(b, off)
		if err != nil {
			return err
		}
		if b[off] == ' ' || b[off] == '\t' {
			return errObsFold
		}
		colon := -1
		for i := off; i < eol; i++ {
			c := b[i]
			if c == ':' {
				colon = i
				break
			}
			if !tchar[c] {
				if (c == ' ' || c == '\t') && i > off && spaceThenColon(b[i:eol]) {
					return errSpaceColon
				}
				return errBadHeaderName
			}
		}
		if colon <= off {
			return errBadHeaderName
		}
		vs, ve := colon+1, eol
		for vs < ve && (b[vs] == ' ' || b[vs] == '\t') {
			vs++
		}
		for ve > vs && (b[ve-1] == ' ' || b[ve-1] == '\t') {
			ve--
		}
		for _, c := range b[vs:ve] {
			if !fieldVChar[c] {
				return errBadHeaderValue
			}
		}
		if len(h.Fields) == maxHeaders {
			return errTooManyHeaders
		}
		h.Fields = append(h.Fields, Field{
			Line:  Span{int32(off), int32(eol)},
			Name:  Span{int32(off), int32(colon)},
			Value: Span{int32(vs), int32(ve)},
		})
		if err := h.noteField(len(h.Fields) - 1); err != nil {
			return err
		}
		off = eol + 2
	}
}

// spaceThenColon reports whether b is whitespace up to a colon.
func spaceThenColon(b []byte) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t':
		case ':':
			return true
		default:
			return false
		}
	}
	return false
}

// noteField records what the framing, connection management and
// authentication code need from header i, and marks hop-by-hop fields.
func (h *Head) noteField(i int) error {
	f := &h.Fields[i]
	name := f.Name.Of(h.Buf)
	value := f.Value.Of(h.Buf)
	switch len(name) {
	case 4:
		if EqualFold(name, "host") {
			if h.HostIdx >= 0 {
				return errDupHost
			}
			h.HostIdx = i
		}
	case 2:
		if EqualFold(name, "te") {
			f.Drop = true
		}
	case 3:
		if EqualFold(name, "via") {
			h.HasVia = true
		}
	case 12:
		if h.MaxForwardsIdx < 0 && EqualFold(name, "max-forwards") {
			h.MaxForwardsIdx = i
		}
	case 6:
		if EqualFold(name, "expect") && EqualFold(value, "100-continue") {
			h.ExpectContinue = true
		}
	case 7:
		if EqualFold(name, "trailer") {
			f.Drop = true
		}
		if EqualFold(name, "upgrade") {
			// Hop-by-hop: forwarded only when rustle relays the
			// upgrade itself (WebSocket).
			f.Drop = true
			h.UpgradeIdx = i
		}
	case 10:
		if EqualFold(name, "connection") {
			f.Drop = true
			return h.noteConnection(value)
		}
		if EqualFold(name, "keep-alive") {
			f.Drop = true
		}
	case 14:
		if EqualFold(name, "content-length") {
			n, ok := parseContentLength(value)
			if !ok {
				return errBadCL
			}
			if h.ContentLength >= 0 {
				if h.ContentLength != n {
					return errDupCL
				}
				f.Drop = true // an identical repeat: forward one
			}
			h.ContentLength = n
		}
	case 16:
		if EqualFold(name, "proxy-connection") {
			f.Drop = true
			return h.noteConnection(value)
		}
	case 17:
		if EqualFold(name, "transfer-encoding") {
			return h.noteTransferEncoding(value)
		}
	case 18:
		if EqualFold(name, "proxy-authenticate") {
			f.Drop = true
		}
	case 19:
		if EqualFold(name, "proxy-authorization") {
			f.Drop = true
			h.ProxyAuth = f.Value
		}
	}
	return nil
}

// noteConnection records the options of a Connection (or legacy
// Proxy-Connection) field: close, keep-alive, and the names of further
// hop-by-hop fields.
func (h *Head) noteConnection(v []byte) error {
	start := 0
	for start <= len(v) {
		end := bytes.IndexByte(v[start:], ',')
		if end < 0 {
			end = len(v)
		} else {
			end += start
		}
		tok := trimOWS(v[start:end])
		switch {
		case len(tok) == 0:
		case EqualFold(tok, "close"):
			h.ConnClose = true
		case EqualFold(tok, "keep-alive"):
			h.ConnKeepAlive = true
		case EqualFold(tok, "upgrade"):
			h.ConnUpgrade = true
		default:
			if h.nConnTokens == maxConnTokens {
				return errTooManyConnOpts
			}
			s := spanWithin(h.Buf, tok)
			h.connTokens[h.nConnTokens] = s
			h.nConnTokens++
		}
		start = end + 1
	}
	return nil
}

// noteTransferEncoding validates Transfer-Encoding: only "chunked" alone is
// accepted in requests; responses with other codings are close-delimited.
func (h *Head) noteTransferEncoding(v []byte) error {
	if h.Chunked {
		// chunked already seen: anything after it is invalid.
		return errTENotChunked
	}
	start := 0
	for start <= len(v) {
		end := bytes.IndexByte(v[start:], ',')
		if end < 0 {
			end = len(v)
		} else {
			end += start
		}
		tok := trimOWS(v[start:end])
		last := end == len(v)
		switch {
		case len(tok) == 0:
			return errTENotChunked
		case EqualFold(tok, "chunked"):
			if !last {
				return errTENotChunked
			}
			h.Chunked = true
		default:
			h.TEOther = true
		}
		start = end + 1
	}
	return nil
}

// checkFraming applies the message-length rules of RFC 9112 §6 that
// protect against request smuggling.
func (h *Head) checkFraming(request bool) error {
	te := h.Chunked || h.TEOther
	if !te {
		return nil
	}
	if h.Minor == 0 {
		if request {
			return errTEHTTP10
		}
		// An HTTP/1.0 response with Transfer-Encoding is faulty framing
		// (RFC 9112 §6.1): relayed as close-delimited under the proxy's
		// HTTP/1.1 status line with its Transfer-Encoding kept, a client
		// would frame it by chunks and take what follows the last one
		// for its next response. Refused.
		return ErrBadResponseHead
	}
	if h.ContentLength >= 0 {
		if request {
			return errCLAndTE
		}
		// RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and
		// an intermediary removes Content-Length before forwarding.
		h.ContentLength = -1
		for i := range h.Fields {
			if EqualFold(h.Fields[i].Name.Of(h.Buf), "content-length") {
				h.Fields[i].Drop = true
			}
		}
	}
	if request {
		if h.TEOther && h.Chunked {
			return errTEUnsupported
		}
		if !h.Chunked {
			return errTENotChunked
		}
	}
	// A response is framed one way only: by chunks when chunked is the
	// final coding ("gzip, chunked", or "identity" then "chunked" in two
	// fields), so that bytes after the last chunk are never relayed as
	// part of it; by the connection's close otherwise.
	return nil
}

// spanWithin returns the span of sub, a subslice of buf.
func spanWithin(buf, sub []byte) Span {
	if len(sub) == 0 {
		return Span{}
	}
	// Both share the backing array; the offset is the pointer difference.
	off := cap(buf) - cap(sub)
	return Span{int32(off), int32(off + len(sub))}
}

func trimOWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	return b
}

// parseContentLength parses 1*DIGIT, refusing signs, lists, spaces and
// values that overflow.
func parseContentLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// EqualFold reports whether b equals the lower-case ASCII string s,
// ignoring ASCII case in b.
func EqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// FieldIndex returns the index in Fields of the first field named name
// (lower case), or -1.
func (h *Head) FieldIndex(name string) int {
	for i := range h.Fields {
		if EqualFold(h.Fields[i].Name.Of(h.Buf), name) {
			return i
		}
	}
	return -1
}

// UpgradesTo reports whether the head asks to switch to protocol (lower
// case): Connection lists "upgrade" and Upgrade names exactly protocol.
func (h *Head) UpgradesTo(protocol string) bool {
	return h.ConnUpgrade && h.UpgradeIdx >= 0 && EqualFold(h.Fields[h.UpgradeIdx].Value.Of(h.Buf), protocol)
}

// ConnectionLists reports whether the Connection (or Proxy-Connection)
// fields name the field name, ASCII case ignored; "close", "keep-alive"
// and "upgrade" are not recorded as names.
func (h *Head) ConnectionLists(name []byte) bool {
	for t := 0; t < h.nConnTokens; t++ {
		if bytes.EqualFold(h.connTokens[t].Of(h.Buf), name) {
			return true
		}
	}
	return false
}

// AppendValues appends the non-empty values of the fields named name
// (lower case) that are not dropped, each followed by ", ".
func (h *Head) AppendValues(out []byte, name string) []byte {
	for i := range h.Fields {
		f := &h.Fields[i]
		if f.Drop || f.Value.Empty() || !EqualFold(f.Name.Of(h.Buf), name) {
			continue
		}
		out = append(out, f.Value.Of(h.Buf)...)
		out = append(out, ", "...)
	}
	return out
}

// ParseTrailers parses the trailer section of a chunked body: b is its
// field lines through the final empty line (only "\r\n" when there are
// none). The fields are noted as a head's are; a malformed section is
// ErrBadResponseHead.
func (h *Head) ParseTrailers(b []byte) error {
	h.reset(b)
	if err := h.parseFields(b, 0); err != nil {
		return ErrBadResponseHead
	}
	return nil
}

// DropConnectionListed marks the fields named in Connection as hop-by-hop,
// except those the body is framed by or that the forwarder rewrites:
// dropping Content-Length or Transfer-Encoding while forwarding the body
// by them would desynchronise the next hop (request smuggling).
func (h *Head) DropConnectionListed() {
	for t := 0; t < h.nConnTokens; t++ {
		tok := h.connTokens[t].Of(h.Buf)
		if EqualFold(tok, "content-length") || EqualFold(tok, "transfer-encoding") || EqualFold(tok, "host") {
			continue
		}
		for i := range h.Fields {
			if bytes.EqualFold(h.Fields[i].Name.Of(h.Buf), tok) {
				h.Fields[i].Drop = true
			}
		}
	}
}
