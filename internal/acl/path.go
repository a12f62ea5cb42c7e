package acl

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rustle-proxy/rustle/internal/dialer"
)

// pathPattern is a compiled paths entry.
type pathPattern struct {
	s      string // the path, or the prefix before the '*'
	prefix bool   // s is a prefix ("/v1/*")
}

// ParsePath checks a paths entry: an absolute path ("/v1/models"), or
// one ending in '*' ("/v1/*"), which matches every path that begins with
// what comes before it. It has no other '*', no query ('?'), fragment
// ('#'), space or control character, and no dot segment ("/./",
// "/../"), which a normalized request path never has.
func ParsePath(s string) error {
	_, err := parsePath(s)
	return err
}

func parsePath(s string) (pathPattern, error) {
	if !strings.HasPrefix(s, "/") {
		return pathPattern{}, fmt.Errorf("path %q does not begin with /", s)
	}
	p := pathPattern{s: s}
	if strings.HasSuffix(s, "*") {
		p.s, p.prefix = s[:len(s)-1], true
	}
	if strings.ContainsAny(p.s, "*?# \t") || strings.ContainsFunc(p.s, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return pathPattern{}, fmt.Errorf("path %q has a '*' before its end, a '?', '#', space or control character", s)
	}
	for seg := range strings.SplitSeq(p.s[1:], "/") {
		if seg == "." || seg == ".." {
			return pathPattern{}, fmt.Errorf("path %q has a dot segment, which a request's path is matched without", s)
		}
	}
	if n, err := normalizePath(p.s); err != nil || n != p.s {
		if err == nil {
			err = fmt.Errorf("path %q is not in normal form: write %q", s, n)
		}
		return pathPattern{}, err
	}
	return p, nil
}

// matchPaths reports whether the request path target (origin form, with
// its query; "" for none) matches one of ps, normalized.
func matchPaths(ps []pathPattern, target string) bool {
	if target == "" || target[0] != '/' {
		return false
	}
	p, err := normalizePath(target)
	if err != nil {
		return false // a path no origin reads alike matches no entry
	}
	for _, pp := range ps {
		if pp.prefix && strings.HasPrefix(p, pp.s) || !pp.prefix && p == pp.s {
			return true
		}
	}
	return false
}

// errPathEncoding is a path with a malformed percent-encoding.
var errPathEncoding = errors.New("malformed percent-encoding in the path")

// normalizePath returns the path of target (origin form: "/a/b?q")
// as an origin resolves it (RFC 3986 §6.2.2): without its query, its
// percent-encoded unreserved characters decoded (%41 is "A", %2E "."),
// other percent-encodings with upper-case digits (an encoded '/' stays
// encoded: it is no separator), and its dot segments removed (§5.2.4).
// A path that needs none of it is returned as it is, without
// allocating.
func normalizePath(target string) (string, error) {
	if i := strings.IndexAny(target, "?#"); i >= 0 {
		target = target[:i]
	}
	if !strings.Contains(target, "%") && !hasDotSegment(target) {
		return target, nil
	}
	b := make([]byte, 0, len(target))
	for i := 0; i < len(target); i++ {
		c := target[i]
		if c != '%' {
			b = append(b, c)
			continue
		}
		if i+2 >= len(target) || dialer.HexDigit(target[i+1]) < 0 || dialer.HexDigit(target[i+2]) < 0 {
			return "", errPathEncoding
		}
		v := byte(dialer.HexDigit(target[i+1])<<4 | dialer.HexDigit(target[i+2]))
		i += 2
		if unreserved(v) {
			b = append(b, v)
			continue
		}
		const hex = "0123456789ABCDEF"
		b = append(b, '%', hex[v>>4], hex[v&15])
	}
	return removeDotSegments(string(b)), nil
}

// hasDotSegment reports whether the path p has a "." or ".." segment.
func hasDotSegment(p string) bool {
	for seg := range strings.SplitSeq(p, "/") {
		if seg == "." || seg == ".." {
			return true
		}
	}
	return false
}

// removeDotSegments resolves the "." and ".." segments of the absolute
// path p (RFC 3986 §5.2.4); ".." above the root stays at the root.
func removeDotSegments(p string) string {
	if !hasDotSegment(p) {
		return p
	}
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	for i, seg := range segs {
		last := i == len(segs)-1
		switch seg {
		case ".":
			if last {
				out = append(out, "")
			}
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			if last {
				out = append(out, "")
			}
		default:
			out = append(out, seg)
		}
	}
	return "/" + strings.Join(out, "/")
}

// unreserved reports whether c is an unreserved character (RFC 3986
// §2.3), which percent-encoding does not change.
func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}
