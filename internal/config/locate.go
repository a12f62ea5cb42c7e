package config

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// locateKeys returns the 1-based line on which each key of the TOML
// document src is first written. The map is keyed by pathString of the
// key's full path, with array elements as indexElem entries: the address of
// the second [[listen]] table is "listen", indexElem(1), "address".
//
// The TOML decoder reports no positions for keys it has decoded, so this
// scanner reads just enough TOML to follow them: [table] and [[array]]
// headers, dotted and quoted keys, strings of all four kinds, arrays and
// inline tables. It is meant for documents the decoder has accepted; on
// anything else it still terminates, with no promise about the lines.
func locateKeys(src []byte) map[string]int {
	l := &locator{src: src, line: 1, lines: make(map[string]int), arrays: make(map[string]int)}
	l.document()
	return l.lines
}

// locator is the state of one locateKeys scan.
type locator struct {
	src    []byte
	pos    int
	line   int
	lines  map[string]int // result: path → first line
	arrays map[string]int // path of an array of tables → elements so far
	table  []string       // path of the table the last header opened
}

func (l *locator) document() {
	for l.pos < len(l.src) {
		start := l.pos
		l.skipSpace(true)
		if l.pos >= len(l.src) {
			return
		}
		if l.src[l.pos] == '[' {
			l.header()
		} else {
			l.keyValue(l.table)
		}
		if l.pos == start { // not TOML; move on
			l.pos++
		}
	}
}

// header reads a [table] or [[array]] header and makes it the current
// table.
func (l *locator) header() {
	line := l.line
	aot := l.peek(1) == '['
	if aot {
		l.pos += 2
	} else {
		l.pos++
	}
	key := l.key()
	l.skipSpace(false)
	for range 2 {
		if l.peek(0) == ']' {
			l.pos++
		}
	}
	if len(key) == 0 {
		return
	}
	p := l.resolve(nil, key[:len(key)-1], line)
	p = append(p, key[len(key)-1])
	l.record(p, line)
	if aot {
		n := l.arrays[pathString(p)]
		l.arrays[pathString(p)] = n + 1
		p = append(p, indexElem(n))
		l.record(p, line)
	}
	l.table = p
}

// resolve appends keys to base, each followed by the index of the last
// element when it names an array of tables, recording each prefix at line.
func (l *locator) resolve(base, keys []string, line int) []string {
	p := append([]string(nil), base...)
	for _, k := range keys {
		p = append(p, k)
		l.record(p, line)
		if n := l.arrays[pathString(p)]; n > 0 {
			p = append(p, indexElem(n-1))
		}
	}
	return p
}

// keyValue reads "key = value" in the table at base.
func (l *locator) keyValue(base []string) {
	line := l.line
	key := l.key()
	if len(key) == 0 {
		return
	}
	p := l.resolve(base, key[:len(key)-1], line)
	p = append(p, key[len(key)-1])
	l.record(p, line)
	l.skipSpace(false)
	if l.peek(0) != '=' {
		return
	}
	l.pos++
	l.skipSpace(false)
	l.value(p)
}

// value skips one value, recording the keys inside it under path.
func (l *locator) value(path []string) {
	switch l.peek(0) {
	case '"', '\'':
		l.str()
	case '[':
		l.array(path)
	case '{':
		l.inlineTable(path)
	default: // number, boolean, date-time: up to a delimiter
		for l.pos < len(l.src) && !strings.ContainsRune(",]}\n#", rune(l.src[l.pos])) {
			l.pos++
		}
	}
}

func (l *locator) array(path []string) {
	l.pos++ // '['
	i := 0
	for l.pos < len(l.src) {
		l.skipSpace(true)
		switch l.peek(0) {
		case 0:
			return
		case ']':
			l.pos++
			return
		case ',':
			l.pos++
			i++
			continue
		}
		start := l.pos
		elem := append(path[:len(path):len(path)], indexElem(i))
		l.record(elem, l.line)
		l.value(elem)
		if l.pos == start {
			l.pos++
		}
	}
}

func (l *locator) inlineTable(path []string) {
	l.pos++ // '{'
	for l.pos < len(l.src) {
		l.skipSpace(true) // TOML 1.1 allows newlines in inline tables
		switch l.peek(0) {
		case 0:
			return
		case '}':
			l.pos++
			return
		case ',':
			l.pos++
			continue
		}
		start := l.pos
		l.keyValue(path)
		if l.pos == start {
			l.pos++
		}
	}
}

// key reads a possibly dotted key and returns its parts, unquoted.
func (l *locator) key() []string {
	var parts []string
	for {
		l.skipSpace(false)
		part, ok := l.simpleKey()
		if !ok {
			return parts
		}
		parts = append(parts, part)
		l.skipSpace(false)
		if l.peek(0) != '.' {
			return parts
		}
		l.pos++
	}
}

func (l *locator) simpleKey() (string, bool) {
	switch l.peek(0) {
	case '"':
		start := l.pos + 1
		l.str()
		end := max(l.pos-1, start)
		return unescapeBasic(string(l.src[start:end])), true
	case '\'':
		start := l.pos + 1
		l.str()
		end := max(l.pos-1, start)
		return string(l.src[start:end]), true
	}
	start := l.pos
	for l.pos < len(l.src) && isBareKeyByte(l.src[l.pos]) {
		l.pos++
	}
	return string(l.src[start:l.pos]), l.pos > start
}

func isBareKeyByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// str skips a basic or literal string, single-line or multi-line, leaving
// pos just past its closing quote.
func (l *locator) str() {
	q := l.src[l.pos]
	multi := l.peek(1) == q && l.peek(2) == q
	if multi {
		l.pos += 3
	} else {
		l.pos++
	}
	for l.pos < len(l.src) {
		c := l.src[l.pos]
		switch {
		case c == '\\' && q == '"':
			l.pos++
			if l.peek(0) != '\n' { // a line-ending backslash's newline is counted below
				l.pos++
			}
		case c == '\n':
			if !multi {
				return
			}
			l.line++
			l.pos++
		case c == q && !multi:
			l.pos++
			return
		case c == q && l.peek(1) == q && l.peek(2) == q:
			l.pos += 3
			// Up to two more quotes belong to the string's content.
			for range 2 {
				if l.peek(0) == q {
					l.pos++
				}
			}
			return
		default:
			l.pos++
		}
	}
	l.pos = min(l.pos, len(l.src))
}

// skipSpace skips blanks and comments, and newlines too if newlines is
// set, counting lines.
func (l *locator) skipSpace(newlines bool) {
	for l.pos < len(l.src) {
		switch l.src[l.pos] {
		case ' ', '\t', '\r':
			l.pos++
		case '\n':
			if !newlines {
				return
			}
			l.line++
			l.pos++
		case '#':
			for l.pos < len(l.src) && l.src[l.pos] != '\n' {
				l.pos++
			}
		default:
			return
		}
	}
}

// peek returns the byte i past pos, or 0 past the end.
func (l *locator) peek(i int) byte {
	if l.pos+i < len(l.src) {
		return l.src[l.pos+i]
	}
	return 0
}

// record notes that path is written on line, unless it was earlier.
func (l *locator) record(path []string, line int) {
	k := pathString(path)
	if _, ok := l.lines[k]; !ok {
		l.lines[k] = line
	}
}

// unescapeBasic decodes the escapes of a TOML basic string. It assumes
// the decoder accepted the string; a malformed escape is kept as written.
func unescapeBasic(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch s[i] {
		case 'b':
			b.WriteByte('\b')
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'f':
			b.WriteByte('\f')
		case 'r':
			b.WriteByte('\r')
		case 'e':
			b.WriteByte(0x1b)
		case '"', '\\':
			b.WriteByte(s[i])
		case 'x', 'u', 'U':
			n := 2 // \xHH
			switch s[i] {
			case 'u':
				n = 4
			case 'U':
				n = 8
			}
			if i+1+n <= len(s) {
				if r, err := strconv.ParseUint(s[i+1:i+1+n], 16, 32); err == nil {
					b.WriteRune(validRune(rune(r)))
					i += n
					continue
				}
			}
			b.WriteByte('\\')
			b.WriteByte(s[i])
		default:
			b.WriteByte('\\')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func validRune(r rune) rune {
	if !utf8.ValidRune(r) {
		return utf8.RuneError
	}
	return r
}
