package masque

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// DefaultTemplate is the URI template of RFC 9298 §3's well-known
// location, the one CONNECT-UDP clients use by default.
const DefaultTemplate = "/.well-known/masque/udp/{target_host}/{target_port}/"

// Template is a parsed CONNECT-UDP URI template's path and query: literal
// text with the variables target_host and target_port, each once (RFC
// 9298 §2; RFC 6570 level 1 expressions only, which is what clients
// expand).
type Template struct {
	raw   string
	parts []part // literals and variables in order
}

type part struct {
	literal string // "" for a variable
	host    bool   // the variable is target_host (else target_port)
}

// ParseTemplate parses a template's path and query, such as
// DefaultTemplate: it starts with '/', names {target_host} and
// {target_port} once each, with literal text between them, and has no
// other expression.
func ParseTemplate(s string) (*Template, error) {
	if !strings.HasPrefix(s, "/") {
		return nil, fmt.Errorf("masque: template %q: must start with '/'", s)
	}
	t := &Template{raw: s}
	var seenHost, seenPort bool
	rest := s
	for rest != "" {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			t.parts = append(t.parts, part{literal: rest})
			break
		}
		if strings.IndexByte(rest[:i], '}') >= 0 {
			return nil, fmt.Errorf("masque: template %q: unmatched '}'", s)
		}
		if i > 0 {
			t.parts = append(t.parts, part{literal: rest[:i]})
		} else if len(t.parts) > 0 && t.parts[len(t.parts)-1].literal == "" {
			return nil, fmt.Errorf("masque: template %q: two variables need literal text between them", s)
		}
		j := strings.IndexByte(rest[i:], '}')
		if j < 0 {
			return nil, fmt.Errorf("masque: template %q: unterminated '{'", s)
		}
		switch name := rest[i+1 : i+j]; name {
		case "target_host":
			if seenHost {
				return nil, fmt.Errorf("masque: template %q: {target_host} twice", s)
			}
			seenHost = true
			t.parts = append(t.parts, part{host: true})
		case "target_port":
			if seenPort {
				return nil, fmt.Errorf("masque: template %q: {target_port} twice", s)
			}
			seenPort = true
			t.parts = append(t.parts, part{})
		default:
			return nil, fmt.Errorf("masque: template %q: unknown expression {%s}: want {target_host} and {target_port}", s, name)
		}
		rest = rest[i+j+1:]
	}
	if !seenHost || !seenPort {
		return nil, fmt.Errorf("masque: template %q: needs {target_host} and {target_port}", s)
	}
	return t, nil
}

// String returns the template as it was parsed.
func (t *Template) String() string { return t.raw }

// ErrNoMatch is returned by Match for a path the template does not
// match.
var ErrNoMatch = errors.New("masque: the path does not match the URI template")

// Match matches a request's path and query as sent (percent-encoded)
// against the template and returns the target: host is a name or an IP
// literal without brackets, percent-decoded (RFC 9298 §2: "2001%3Adb8%3A%3A1"
// is 2001:db8::1), and port is between 1 and 65535.
func (t *Template) Match(path string) (host string, port uint16, err error) {
	var rawHost, rawPort string
	rest := path
	for i, p := range t.parts {
		if p.literal != "" {
			if !strings.HasPrefix(rest, p.literal) {
				return "", 0, ErrNoMatch
			}
			rest = rest[len(p.literal):]
			continue
		}
		// A variable runs to the next literal's start, or to the end.
		end := len(rest)
		if i+1 < len(t.parts) {
			end = strings.Index(rest, t.parts[i+1].literal)
			if end < 0 {
				return "", 0, ErrNoMatch
			}
		}
		v := rest[:end]
		if v == "" || strings.ContainsAny(v, "/?&#") {
			return "", 0, ErrNoMatch
		}
		if p.host {
			rawHost = v
		} else {
			rawPort = v
		}
		rest = rest[end:]
	}
	if rest != "" {
		return "", 0, ErrNoMatch
	}
	host, err = url.PathUnescape(rawHost)
	if err != nil || host == "" {
		return "", 0, fmt.Errorf("masque: target_host %q: not a host", rawHost)
	}
	if strings.ContainsAny(host, ":") {
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return "", 0, fmt.Errorf("masque: target_host %q: not a host", rawHost)
		}
	} else if !validHostName(host) {
		return "", 0, fmt.Errorf("masque: target_host %q: not a host", rawHost)
	}
	n, err := strconv.ParseUint(rawPort, 10, 16)
	if err != nil || n == 0 || rawPort[0] == '+' {
		return "", 0, fmt.Errorf("masque: target_port %q: not a port", rawPort)
	}
	return host, uint16(n), nil
}

// validHostName reports whether s is a DNS name or an IPv4 literal:
// letters, digits, '-', '_' and '.', at most 253 bytes.
func validHostName(s string) bool {
	if len(s) > 253 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
