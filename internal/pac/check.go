package pac

import (
	"fmt"
	"unicode/utf8"
)

// Check checks a PAC file without evaluating it: it is at most
// MaxFileBytes of UTF-8; every string, template literal, comment and
// regular expression literal ends; every bracket ((, [, {, and ${ in a
// template) is closed by its own kind, in order; and FindProxyForURL is
// defined (function FindProxyForURL ..., or FindProxyForURL = ...). The
// error is a *SyntaxError naming the line of the first fault (or an
// error for a file too large, not UTF-8, or without the function).
func Check(src []byte) error {
	if len(src) > MaxFileBytes {
		return fmt.Errorf("is %d bytes, more than %d", len(src), MaxFileBytes)
	}
	if !utf8.Valid(src) {
		return fmt.Errorf("is not UTF-8")
	}
	s := scanner{src: src, line: 1}
	return s.run()
}

// open is an unclosed bracket.
type open struct {
	c    byte // '(', '[', '{', or '$' for a template's ${
	line int
}

// scanner is one Check's state.
type scanner struct {
	src  []byte
	i    int
	line int
	// stack holds the brackets open, and the template literals whose ${
	// is open ('$').
	stack []open
	// regexOK says a '/' here starts a regular expression literal rather
	// than a division: after an operator, an opening bracket, a comma or
	// a semicolon, a keyword such as return, or at the start.
	regexOK bool
	// prev is the last token's identifier ("" for another token), and
	// defined says FindProxyForURL was defined: for Check's last test.
	prev    string
	defined bool
}

// regexKeywords are the words after which a '/' starts a regular
// expression.
var regexKeywords = map[string]bool{"return": true, "typeof": true, "case": true, "do": true, "else": true,
	"in": true, "instanceof": true, "new": true, "delete": true, "void": true, "throw": true}

func (s *scanner) fail(line int, format string, args ...any) error {
	return &SyntaxError{Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (s *scanner) run() error {
	s.regexOK = true
	for s.i < len(s.src) {
		c := s.src[s.i]
		switch {
		case c == '\n':
			s.line++
			s.i++
		case c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v':
			s.i++
		case c == '/' && s.peek(1) == '/':
			for s.i < len(s.src) && s.src[s.i] != '\n' {
				s.i++
			}
		case c == '/' && s.peek(1) == '*':
			start := s.line
			s.i += 2
			for {
				if s.i+1 >= len(s.src) {
					return s.fail(start, "a /* comment is never closed")
				}
				if s.src[s.i] == '*' && s.src[s.i+1] == '/' {
					s.i += 2
					break
				}
				if s.src[s.i] == '\n' {
					s.line++
				}
				s.i++
			}
		case c == '"' || c == '\'':
			if err := s.str(c); err != nil {
				return err
			}
			s.token(false, "")
		case c == '`':
			s.i++
			if err := s.template(); err != nil {
				return err
			}
		case c == '/' && s.regexOK:
			if err := s.regex(); err != nil {
				return err
			}
			s.token(false, "")
		case c == '(' || c == '[' || c == '{':
			s.stack = append(s.stack, open{c, s.line})
			s.i++
			s.token(true, "")
		case c == '}' && s.inTemplate():
			// The } of a template's ${: the literal goes on.
			s.stack = s.stack[:len(s.stack)-1]
			s.i++
			if err := s.template(); err != nil {
				return err
			}
		case c == ')' || c == ']' || c == '}':
			if err := s.close(c); err != nil {
				return err
			}
			s.token(c == '}', "")
		case isIdentStart(c):
			j := s.i
			for j < len(s.src) && isIdentPart(s.src[j]) {
				j++
			}
			word := string(s.src[s.i:j])
			s.i = j
			s.token(regexKeywords[word], word)
		case c >= '0' && c <= '9' || c == '.' && isDigit(s.peek(1)):
			for s.i < len(s.src) && (isIdentPart(s.src[s.i]) || s.src[s.i] == '.') {
				s.i++
			}
			s.token(false, "")
		case c >= utf8.RuneSelf:
			_, n := utf8.DecodeRune(s.src[s.i:])
			s.i += n // an identifier's letter, or a space the browser's parser judges
			s.token(false, "")
		default: // an operator or punctuation
			s.i++
			if c == '=' && s.prev == "FindProxyForURL" && s.peek(0) != '=' {
				s.defined = true
			}
			s.token(true, "")
		}
	}
	if n := len(s.stack); n > 0 {
		o := s.stack[n-1]
		if o.c == '$' {
			return s.fail(o.line, "a template literal's ${ is never closed")
		}
		return s.fail(o.line, "'%c' is never closed", o.c)
	}
	if !s.defined {
		return errNoFunction
	}
	return nil
}

// token notes a token: whether a '/' after it starts a regular
// expression, and the identifier it is ("" for another token).
func (s *scanner) token(regexOK bool, word string) {
	s.regexOK = regexOK
	if word == "FindProxyForURL" && s.prev == "function" {
		s.defined = true
	}
	s.prev = word
}

func (s *scanner) peek(n int) byte {
	if s.i+n < len(s.src) {
		return s.src[s.i+n]
	}
	return 0
}

// inTemplate reports whether the innermost open bracket is a template's
// ${.
func (s *scanner) inTemplate() bool {
	return len(s.stack) > 0 && s.stack[len(s.stack)-1].c == '$'
}

// close matches c, a closing bracket, with the innermost open one.
func (s *scanner) close(c byte) error {
	want := map[byte]byte{')': '(', ']': '[', '}': '{'}[c]
	n := len(s.stack)
	if n == 0 {
		return s.fail(s.line, "'%c' closes nothing", c)
	}
	o := s.stack[n-1]
	if o.c != want {
		opened := o.c
		if opened == '$' {
			return s.fail(s.line, "'%c' inside a template literal's ${ opened on line %d", c, o.line)
		}
		return s.fail(s.line, "'%c' closes the '%c' opened on line %d", c, opened, o.line)
	}
	s.stack = s.stack[:n-1]
	s.i++
	return nil
}

// str scans a string literal quoted by q, from its opening quote.
func (s *scanner) str(q byte) error {
	start := s.line
	s.i++
	for s.i < len(s.src) {
		switch c := s.src[s.i]; c {
		case q:
			s.i++
			return nil
		case '\\':
			if s.peek(1) == '\n' {
				s.line++
			}
			s.i += 2
		case '\n':
			return s.fail(start, "a string is never closed on its line")
		default:
			s.i++
		}
	}
	return s.fail(start, "a string is never closed")
}

// template scans a template literal from after its ` (or after the } of
// one of its ${), to its closing ` or its next ${, which it opens.
func (s *scanner) template() error {
	start := s.line
	for s.i < len(s.src) {
		switch c := s.src[s.i]; c {
		case '`':
			s.i++
			s.token(false, "")
			return nil
		case '\\':
			if s.peek(1) == '\n' {
				s.line++
			}
			s.i += 2
		case '$':
			if s.peek(1) == '{' {
				s.stack = append(s.stack, open{'$', s.line})
				s.i += 2
				s.token(true, "")
				return nil
			}
			s.i++
		case '\n':
			s.line++
			s.i++
		default:
			s.i++
		}
	}
	return s.fail(start, "a template literal is never closed")
}

// regex scans a regular expression literal from its opening /.
func (s *scanner) regex() error {
	start := s.line
	s.i++
	class := false
	for s.i < len(s.src) {
		switch c := s.src[s.i]; {
		case c == '\n':
			return s.fail(start, "a regular expression is never closed on its line")
		case c == '\\':
			s.i += 2
		case c == '[':
			class = true
			s.i++
		case c == ']':
			class = false
			s.i++
		case c == '/' && !class:
			s.i++
			for s.i < len(s.src) && isIdentPart(s.src[s.i]) { // flags
				s.i++
			}
			return nil
		default:
			s.i++
		}
	}
	return s.fail(start, "a regular expression is never closed")
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool {
	return c == '_' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
func isIdentPart(c byte) bool { return isIdentStart(c) || isDigit(c) }
