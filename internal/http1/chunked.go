package http1

import "errors"

// Chunked framing errors.
var (
	errChunkSize     = errors.New("http1: malformed chunk size")
	errChunkOverflow = errors.New("http1: chunk size overflows")
	errChunkLine     = errors.New("http1: chunk line too long or malformed")
	errChunkCRLF     = errors.New("http1: missing CRLF after chunk data")
	errTrailer       = errors.New("http1: malformed or oversized trailer section")
)

// Limits of the chunked framing rustle accepts.
const (
	maxChunkLine    = 4096     // size line with its extensions
	maxTrailerBytes = 64 << 10 // the whole trailer section
	maxChunkHex     = 15       // 15 hex digits: sizes below 2^60
)

// ChunkedScanner follows the framing of a chunked body (RFC 9112 §7.1) as
// its bytes pass through the proxy, so that the body can be forwarded
// verbatim (or decoded) while its end is found and malformed framing, the
// food of request smuggling, is refused.
type ChunkedScanner struct {
	state    uint8
	digits   int   // hex digits of the current size
	size     int64 // the size being parsed, then the data bytes left
	lineLen  int   // bytes of the current size or trailer line
	trailers int   // bytes of the trailer section so far
	fields   int   // bytes of the trailer section's field lines so far
}

const (
	csSize        uint8 = iota // reading hex digits of a chunk size
	csSizeBWS                  // whitespace after the size: more, ';' or CR may follow
	csExt                      // inside the extensions, up to CR
	csSizeLF                   // saw the CR of a size line
	csData                     // inside chunk data
	csDataCR                   // expect the CR after chunk data
	csDataLF                   // expect the LF after chunk data
	csTrailerBOL               // at the start of a trailer line (or the final empty line)
	csTrailerName              // inside a trailer field's name
	csTrailerLine              // inside a trailer field's value
	csTrailerLF                // saw the CR of a trailer line
	csFinalLF                  // saw the CR of the final empty line
	csDone
)

// TrailerBytes returns how many bytes of the trailer section (its field
// lines and the final empty line) the scanner has consumed: a caller that
// keeps the trailers takes that many from the end of the framing runs
// Step returns once the last chunk is seen.
func (s *ChunkedScanner) TrailerBytes() int {
	if s.state == csDone {
		return s.trailers + 1 // the final LF, which Step does not count
	}
	return s.trailers
}

// Done reports whether the whole body has been seen.
func (s *ChunkedScanner) Done() bool { return s.state == csDone }

// Step consumes a prefix of p that is either all framing or all chunk data
// and returns its length and which it was. It consumes nothing past the
// end of the body. p must not be empty unless the body is done.
func (s *ChunkedScanner) Step(p []byte) (n int, data bool, err error) {
	if s.state == csData {
		n = len(p)
		if int64(n) > s.size {
			n = int(s.size)
		}
		s.size -= int64(n)
		if s.size == 0 {
			s.state = csDataCR
		}
		return n, true, nil
	}
	for n < len(p) && s.state != csDone {
		c := p[n]
		n++
		switch s.state {
		case csSize:
			s.lineLen++
			if v, ok := unhex(c); ok {
				if s.digits == maxChunkHex {
					return n, false, errChunkOverflow
				}
				s.size = s.size<<4 | int64(v)
				s.digits++
				continue
			}
			if s.digits == 0 {
				return n, false, errChunkSize
			}
			switch c {
			case '\r':
				s.state = csSizeLF
			case ';':
				s.state = csExt
			case ' ', '\t':
				s.state = csSizeBWS
			default:
				return n, false, errChunkSize
			}
		case csSizeBWS:
			// Only BWS may come between the size and its extensions:
			// "5 5" is no size that every parser reads as 5.
			s.lineLen++
			if s.lineLen > maxChunkLine {
				return n, false, errChunkLine
			}
			switch c {
			case ' ', '\t':
			case ';':
				s.state = csExt
			case '\r':
				s.state = csSizeLF
			default:
				return n, false, errChunkSize
			}
		case csExt:
			s.lineLen++
			if s.lineLen > maxChunkLine {
				return n, false, errChunkLine
			}
			if c == '\r' {
				s.state = csSizeLF
			} else if !fieldVChar[c] {
				return n, false, errChunkLine
			}
		case csSizeLF:
			if c != '\n' {
				return n, false, errChunkLine
			}
			s.lineLen, s.digits = 0, 0
			if s.size == 0 {
				s.state = csTrailerBOL
				continue
			}
			s.state = csData
			return n, false, nil
		case csDataCR:
			if c != '\r' {
				return n, false, errChunkCRLF
			}
			s.state = csDataLF
		case csDataLF:
			if c != '\n' {
				return n, false, errChunkCRLF
			}
			s.state = csSize
		case csTrailerBOL:
			s.trailers++
			if c == '\r' {
				s.state = csFinalLF
				continue
			}
			// A trailer field is a header field (RFC 9112 §7.1.2): a
			// token, a colon, a value. A request line, a line without a
			// colon or whitespace before the colon is none.
			s.fields++
			if !tchar[c] {
				return n, false, errTrailer
			}
			s.state = csTrailerName
		case csTrailerName:
			s.trailers++
			s.fields++
			if s.trailers > maxTrailerBytes {
				return n, false, errTrailer
			}
			if c == ':' {
				s.state = csTrailerLine
			} else if !tchar[c] {
				return n, false, errTrailer
			}
		case csTrailerLine:
			s.trailers++
			s.fields++
			if s.trailers > maxTrailerBytes {
				return n, false, errTrailer
			}
			if c == '\r' {
				s.state = csTrailerLF
			} else if !fieldVChar[c] {
				return n, false, errTrailer
			}
		case csTrailerLF:
			if c != '\n' {
				return n, false, errTrailer
			}
			s.trailers++
			s.fields++
			s.state = csTrailerBOL
		case csFinalLF:
			if c != '\n' {
				return n, false, errTrailer
			}
			s.state = csDone
		}
	}
	return n, false, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// ScanChunked advances cs over as much of p as belongs to the body and
// returns how many bytes that is, and how many of them are chunk data
// (the body's content, without its framing).
func ScanChunked(cs *ChunkedScanner, p []byte) (n, data int, err error) {
	for n < len(p) && !cs.Done() {
		k, isData, err := cs.Step(p[n:])
		if err != nil {
			return n, data, err
		}
		if isData {
			data += k
		}
		n += k
	}
	return n, data, nil
}

// ScanChunkedNoTrailers is ScanChunked for a body forwarded without its
// trailer fields (a proxy may discard them, RFC 9110 §6.5.1): it advances
// cs over p as ScanChunked does and returns out, the bytes to forward
// instead of p[:n]: those less the trailer field lines among them, which
// it removes in place (p is modified). The last chunk and the final empty
// line are kept, so the body forwarded stays well framed.
func ScanChunkedNoTrailers(cs *ChunkedScanner, p []byte) (n int, out []byte, data int, err error) {
	f0, t0 := cs.fields, cs.TrailerBytes()
	n, data, err = ScanChunked(cs, p)
	if err != nil {
		return n, p[:n], data, err
	}
	df := cs.fields - f0
	if df == 0 {
		return n, p[:n], data, nil
	}
	// The field bytes of this run come last but for the final empty
	// line's bytes (tail) behind them.
	tail := cs.TrailerBytes() - t0 - df
	copy(p[n-tail-df:], p[n-tail:n])
	return n, p[:n-df], data, nil
}
