package httpproxy

import (
	"bytes"
	"errors"
)

// span is a byte range [start, end) of a head buffer. Parsed heads keep
// spans rather than strings so that parsing allocates nothing.
type span struct{ start, end int32 }

func (s span) empty() bool { return s.end <= s.start }

func (s span) of(b []byte) []byte { return b[s.start:s.end] }

// headerLine is one header field line of a parsed head: the whole line
// (without CRLF), its name and its value with surrounding whitespace trimmed.
type headerLine struct {
	line, name, value span
	// drop is set for hop-by-hop fields and fields rustle replaces.
	drop bool
}

// parseError is a refusal of a malformed message head. status is the
// response a client gets for a request head (400, 431, 501, 505).
type parseError struct {
	status int
	reason string
}

func (e *parseError) Error() string { return "httpproxy: " + e.reason }

func perr(status int, reason string) error { return &parseError{status: status, reason: reason} }

// Parse errors, allocated once.
var (
	errBadRequestLine  = perr(400, "malformed request line")
	errBadMethod       = perr(400, "malformed method")
	errBadTarget       = perr(400, "malformed request target")
	errVersion         = perr(505, "unsupported HTTP version")
	errBadVersion      = perr(400, "malformed HTTP version")
	errBareCR          = perr(400, "bare CR or LF in message head")
	errObsFold         = perr(400, "obsolete line folding in header")
	errBadHeaderName   = perr(400, "malformed header name (or whitespace before colon)")
	errBadHeaderValue  = perr(400, "invalid character in header value")
	errTooManyHeaders  = perr(431, "too many header fields")
	errHeadTooLarge    = perr(431, "request header fields too large")
	errBadCL           = perr(400, "invalid Content-Length")
	errDupCL           = perr(400, "conflicting Content-Length values")
	errCLAndTE         = perr(400, "both Content-Length and Transfer-Encoding")
	errTENotChunked    = perr(400, "Transfer-Encoding without chunked as final coding")
	errTEUnsupported   = perr(501, "unsupported transfer coding")
	errTEHTTP10        = perr(400, "Transfer-Encoding in an HTTP/1.0 message")
	errDupHost         = perr(400, "more than one Host header")
	errTooManyConnOpts = perr(400, "too many Connection options")
	errBadStatusLine   = errors.New("httpproxy: malformed status line")
	errBadResponseHead = errors.New("httpproxy: malformed response head")
)

// maxHeaders bounds the header lines of one head.
const maxHeaders = 256

// maxConnTokens bounds the options one Connection header set may list.
const maxConnTokens = 16

// head is the parsed form of a request or response head. It is reused
// across messages of a connection; reset prepares it for the next one.
type head struct {
	buf []byte // the head's bytes, request line through the empty line

	// Request fields.
	method, target span
	// Response fields.
	status       int
	statusReason span

	minor int // HTTP/1.minor

	headers []headerLine

	contentLength int64 // -1 when absent
	chunked       bool
	// teOther is set when Transfer-Encoding is present but not chunked
	// (responses only: the body is then delimited by close).
	teOther bool

	connClose, connKeepAlive bool
	connTokens               [maxConnTokens]span
	nConnTokens              int

	expectContinue bool
	hostIdx        int  // index in headers of the Host field, -1 if none
	upgradeIdx     int  // index in headers of the Upgrade field, -1 if none
	connUpgrade    bool // Connection lists "upgrade"
	proxyAuth      span
}

func (h *head) reset(buf []byte) {
	h.buf = buf
	h.method, h.target, h.statusReason = span{}, span{}, span{}
	h.status, h.minor = 0, 0
	h.headers = h.headers[:0]
	h.contentLength = -1
	h.chunked, h.teOther = false, false
	h.connClose, h.connKeepAlive = false, false
	h.nConnTokens = 0
	h.expectContinue = false
	h.hostIdx = -1
	h.upgradeIdx = -1
	h.connUpgrade = false
	h.proxyAuth = span{}
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

// fieldVChar reports whether c may appear inside a field value: VCHAR,
// obs-text, SP and HTAB. CR, LF, NUL and other controls may not.
var fieldVChar = func() (t [256]bool) {
	for c := 0x21; c <= 0xff; c++ {
		t[c] = c != 0x7f
	}
	t[' '], t['\t'] = true, true
	return t
}()

// parseRequest parses a request head: b must be the whole head as found by
// findHeadEnd.
func (h *head) parseRequest(b []byte) error {
	h.reset(b)
	eol, err := lineEnd(b, 0)
	if err != nil {
		return err
	}
	line := b[:eol]
	// method SP request-target SP HTTP-version
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 {
		return errBadRequestLine
	}
	for _, c := range line[:sp1] {
		if !tchar[c] {
			return errBadMethod
		}
	}
	rest := line[sp1+1:]
	sp2 := bytes.IndexByte(rest, ' ')
	if sp2 <= 0 {
		return errBadRequestLine
	}
	for _, c := range rest[:sp2] {
		if c <= ' ' || c == 0x7f {
			return errBadTarget
		}
	}
	h.method = span{0, int32(sp1)}
	h.target = span{int32(sp1 + 1), int32(sp1 + 1 + sp2)}
	minor, err := parseVersion(rest[sp2+1:])
	if err != nil {
		return err
	}
	h.minor = minor
	if err := h.parseFields(b, eol+2); err != nil {
		return err
	}
	return h.checkFraming(true)
}

// parseResponse parses a response head.
func (h *head) parseResponse(b []byte) error {
	h.reset(b)
	eol, err := lineEnd(b, 0)
	if err != nil {
		return errBadStatusLine
	}
	line := b[:eol]
	// HTTP-version SP 3DIGIT SP reason-phrase (the last SP is tolerated
	// missing when the reason is empty).
	if len(line) < 12 || line[8] != ' ' {
		return errBadStatusLine
	}
	minor, err := parseVersion(line[:8])
	if err != nil {
		return errBadStatusLine
	}
	h.minor = minor
	d0, d1, d2 := line[9], line[10], line[11]
	if d0 < '1' || d0 > '5' || d1 < '0' || d1 > '9' || d2 < '0' || d2 > '9' {
		return errBadStatusLine
	}
	h.status = int(d0-'0')*100 + int(d1-'0')*10 + int(d2-'0')
	if len(line) > 12 {
		if line[12] != ' ' {
			return errBadStatusLine
		}
		for _, c := range line[13:] {
			if !fieldVChar[c] {
				return errBadStatusLine
			}
		}
		h.statusReason = span{13, int32(eol)}
	}
	if err := h.parseFields(b, eol+2); err != nil {
		return errBadResponseHead
	}
	return h.checkFraming(false)
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
func (h *head) parseFields(b []byte, off int) error {
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
		if len(h.headers) == maxHeaders {
			return errTooManyHeaders
		}
		h.headers = append(h.headers, headerLine{
			line:  span{int32(off), int32(eol)},
			name:  span{int32(off), int32(colon)},
			value: span{int32(vs), int32(ve)},
		})
		if err := h.noteField(len(h.headers) - 1); err != nil {
			return err
		}
		off = eol + 2
	}
}

// noteField records what the framing, connection management and
// authentication code need from header i, and marks hop-by-hop fields.
func (h *head) noteField(i int) error {
	f := &h.headers[i]
	name := f.name.of(h.buf)
	value := f.value.of(h.buf)
	switch len(name) {
	case 4:
		if equalFold(name, "host") {
			if h.hostIdx >= 0 {
				return errDupHost
			}
			h.hostIdx = i
		}
	case 2:
		if equalFold(name, "te") {
			f.drop = true
		}
	case 6:
		if equalFold(name, "expect") && equalFold(value, "100-continue") {
			h.expectContinue = true
		}
	case 7:
		if equalFold(name, "trailer") {
			f.drop = true
		}
		if equalFold(name, "upgrade") {
			// Hop-by-hop: forwarded only when rustle relays the
			// upgrade itself (WebSocket).
			f.drop = true
			h.upgradeIdx = i
		}
	case 10:
		if equalFold(name, "connection") {
			f.drop = true
			return h.noteConnection(value)
		}
		if equalFold(name, "keep-alive") {
			f.drop = true
		}
	case 14:
		if equalFold(name, "content-length") {
			n, ok := parseContentLength(value)
			if !ok {
				return errBadCL
			}
			if h.contentLength >= 0 {
				if h.contentLength != n {
					return errDupCL
				}
				f.drop = true // an identical repeat: forward one
			}
			h.contentLength = n
		}
	case 16:
		if equalFold(name, "proxy-connection") {
			f.drop = true
			return h.noteConnection(value)
		}
	case 17:
		if equalFold(name, "transfer-encoding") {
			return h.noteTransferEncoding(value)
		}
	case 18:
		if equalFold(name, "proxy-authenticate") {
			f.drop = true
		}
	case 19:
		if equalFold(name, "proxy-authorization") {
			f.drop = true
			h.proxyAuth = f.value
		}
	}
	return nil
}

// noteConnection records the options of a Connection (or legacy
// Proxy-Connection) field: close, keep-alive, and the names of further
// hop-by-hop fields.
func (h *head) noteConnection(v []byte) error {
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
		case equalFold(tok, "close"):
			h.connClose = true
		case equalFold(tok, "keep-alive"):
			h.connKeepAlive = true
		case equalFold(tok, "upgrade"):
			h.connUpgrade = true
		default:
			if h.nConnTokens == maxConnTokens {
				return errTooManyConnOpts
			}
			s := spanWithin(h.buf, tok)
			h.connTokens[h.nConnTokens] = s
			h.nConnTokens++
		}
		start = end + 1
	}
	return nil
}

// noteTransferEncoding validates Transfer-Encoding: only "chunked" alone is
// accepted in requests; responses with other codings are close-delimited.
func (h *head) noteTransferEncoding(v []byte) error {
	if h.chunked {
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
		case equalFold(tok, "chunked"):
			if !last {
				return errTENotChunked
			}
			h.chunked = true
		default:
			h.teOther = true
		}
		start = end + 1
	}
	return nil
}

// checkFraming applies the message-length rules of RFC 9112 §6 that
// protect against request smuggling.
func (h *head) checkFraming(request bool) error {
	te := h.chunked || h.teOther
	if !te {
		return nil
	}
	if h.minor == 0 {
		if request {
			return errTEHTTP10
		}
		// An HTTP/1.0 response with Transfer-Encoding: framing is
		// faulty; read it as close-delimited, and drop Content-Length
		// below as for any response with both.
		h.chunked, h.teOther = false, true
	}
	if h.contentLength >= 0 {
		if request {
			return errCLAndTE
		}
		// RFC 9112 §6.3: Transfer-Encoding overrides Content-Length, and
		// an intermediary removes Content-Length before forwarding.
		h.contentLength = -1
		for i := range h.headers {
			if equalFold(h.headers[i].name.of(h.buf), "content-length") {
				h.headers[i].drop = true
			}
		}
	}
	if request {
		if h.teOther && h.chunked {
			return errTEUnsupported
		}
		if !h.chunked {
			return errTENotChunked
		}
	} else if h.teOther {
		h.chunked = false // close-delimited, forwarded as is
	}
	return nil
}

// spanWithin returns the span of sub, a subslice of buf.
func spanWithin(buf, sub []byte) span {
	if len(sub) == 0 {
		return span{}
	}
	// Both share the backing array; the offset is the pointer difference.
	off := cap(buf) - cap(sub)
	return span{int32(off), int32(off + len(sub))}
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

// equalFold reports whether b equals the lower-case ASCII string s,
// ignoring ASCII case in b.
func equalFold(b []byte, s string) bool {
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

// hasField reports whether the head has a field named name (lower case).
func (h *head) fieldIndex(name string) int {
	for i := range h.headers {
		if equalFold(h.headers[i].name.of(h.buf), name) {
			return i
		}
	}
	return -1
}

// upgradesTo reports whether the head asks to switch to protocol (lower
// case): Connection lists "upgrade" and Upgrade names exactly protocol.
func (h *head) upgradesTo(protocol string) bool {
	return h.connUpgrade && h.upgradeIdx >= 0 && equalFold(h.headers[h.upgradeIdx].value.of(h.buf), protocol)
}

// dropConnectionListed marks the fields named in Connection as hop-by-hop,
// except those the body is framed by or that the forwarder rewrites:
// dropping Content-Length or Transfer-Encoding while forwarding the body
// by them would desynchronise the next hop (request smuggling).
func (h *head) dropConnectionListed() {
	for t := 0; t < h.nConnTokens; t++ {
		tok := h.connTokens[t].of(h.buf)
		if equalFold(tok, "content-length") || equalFold(tok, "transfer-encoding") || equalFold(tok, "host") {
			continue
		}
		for i := range h.headers {
			if bytes.EqualFold(h.headers[i].name.of(h.buf), tok) {
				h.headers[i].drop = true
			}
		}
	}
}
