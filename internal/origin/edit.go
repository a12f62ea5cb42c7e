package origin

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Edits are header fields a [Client] sets on and removes from the
// requests it forwards and the responses it relays: the request_headers
// and response_headers of an interception rule (see package intercept),
// whose Client edits every request inside the tunnels the rule
// intercepts. The head builders ask them: a client's field they drop is
// left out (the HTTP/1.1 head of httpproxy, AppendFieldHead for HTTP/2),
// their fields are appended; a response field they drop is marked
// (http1.Field.Drop) by ReadResponse, and the front-end appends their
// response fields (AppendResponse, ResponseFields).
//
// The header rules of forwarded requests ([[header_rules]], built beside
// this) are to share this place: both are an edit of the heads the
// exchange builds. Edits are immutable and safe for concurrent use.
type Edits struct {
	reqDrop  []string // lower-case names of the request fields left out: Set's and Remove's
	reqSet   []EditField
	respDrop []string
	respSet  []EditField
}

// EditField is a field an edit sets.
type EditField struct {
	// Name is the field's name as configured, which an HTTP/1.1 head
	// carries.
	Name string
	// Lower is Name in lower case, as HTTP/2 names fields (NewEdits
	// fills it).
	Lower string
	// Value is the field's value: maybe a secret (a token read from a
	// file), which rustle never logs.
	Value string
}

// String names the field without its value, so that a field formatted
// by mistake shows no secret.
func (f EditField) String() string { return f.Name + ": [redacted]" }

// LogValue is String, for log/slog.
func (f EditField) LogValue() slog.Value { return slog.StringValue(f.String()) }

// EditConfig is what an Edits does: for requests and for responses,
// fields set (replacing the message's own of their names) and names
// removed.
type EditConfig struct {
	RequestSet, ResponseSet       []EditField
	RequestRemove, ResponseRemove []string
}

// MaxEditValue bounds the value of a field an edit sets.
const MaxEditValue = 8 << 10

// NewEdits compiles cfg; nil when it edits nothing. It fails on a field
// an edit may not name (CheckEditField) or value (CheckEditValue), or a
// name given twice in one direction; the errors name the field, never a
// value.
func NewEdits(cfg EditConfig) (*Edits, error) {
	e := &Edits{}
	var errs []error
	compile := func(dir string, set []EditField, remove []string) (drop []string, out []EditField) {
		seen := make(map[string]bool)
		name := func(n string) bool {
			if err := CheckEditField(n); err != nil {
				errs = append(errs, fmt.Errorf("origin: %s field: %w", dir, err))
				return false
			}
			l := strings.ToLower(n)
			if seen[l] {
				errs = append(errs, fmt.Errorf("origin: %s field %q is named twice", dir, n))
				return false
			}
			seen[l] = true
			drop = append(drop, l)
			return true
		}
		for _, f := range set {
			if !name(f.Name) {
				continue
			}
			if err := CheckEditValue(f.Value); err != nil {
				errs = append(errs, fmt.Errorf("origin: %s field %q: %w", dir, f.Name, err))
				continue
			}
			f.Lower = strings.ToLower(f.Name)
			out = append(out, f)
		}
		for _, n := range remove {
			name(n)
		}
		return drop, out
	}
	e.reqDrop, e.reqSet = compile("request", cfg.RequestSet, cfg.RequestRemove)
	e.respDrop, e.respSet = compile("response", cfg.ResponseSet, cfg.ResponseRemove)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(e.reqDrop) == 0 && len(e.respDrop) == 0 {
		return nil, nil
	}
	return e, nil
}

// CheckEditField returns what is wrong with name as a field an edit sets
// or removes: not a token, or one rustle makes or checks itself (the
// hop-by-hop fields, the framing, Host, Via, Max-Forwards, the proxies'
// credentials, a WebSocket handshake's).
func CheckEditField(name string) error {
	if !httpguts.ValidHeaderFieldName(name) {
		return fmt.Errorf("%q is not a field name", name)
	}
	if HopByHop(name) {
		return fmt.Errorf("%q is hop-by-hop: rustle makes it itself", name)
	}
	switch strings.ToLower(name) {
	case "host", "content-length", "transfer-encoding", "via", "max-forwards",
		"sec-websocket-key", "sec-websocket-accept", "sec-websocket-version", "http2-settings":
		return fmt.Errorf("%q is made or checked by rustle itself", name)
	}
	return nil
}

// CheckEditValue returns what is wrong with a value an edit sets: a
// byte a field value may not hold (a line break, a NUL), or more than
// MaxEditValue bytes. The error never holds the value.
func CheckEditValue(v string) error {
	if len(v) > MaxEditValue {
		return fmt.Errorf("the value is longer than %d bytes", MaxEditValue)
	}
	if !httpguts.ValidHeaderFieldValue(v) {
		return errors.New("the value has a control character or a line break")
	}
	return nil
}

// DropsRequest reports whether the request field name (any case) is
// left out: the edit sets or removes it. A nil Edits drops none.
func (e *Edits) DropsRequest(name []byte) bool {
	return e != nil && dropsName(e.reqDrop, name)
}

// DropsRequestName is DropsRequest for a name as a string.
func (e *Edits) DropsRequestName(name string) bool {
	return e != nil && dropsName(e.reqDrop, name)
}

// DropsResponse reports whether the response field name (any case) is
// left out.
func (e *Edits) DropsResponse(name []byte) bool {
	return e != nil && dropsName(e.respDrop, name)
}

// AppendRequest appends the fields the edit sets on requests as HTTP/1.1
// field lines.
func (e *Edits) AppendRequest(dst []byte) []byte {
	if e == nil {
		return dst
	}
	return appendEditFields(dst, e.reqSet)
}

// AppendResponse appends the fields the edit sets on responses as
// HTTP/1.1 field lines.
func (e *Edits) AppendResponse(dst []byte) []byte {
	if e == nil {
		return dst
	}
	return appendEditFields(dst, e.respSet)
}

// ResponseFields returns the fields the edit sets on responses (their
// Lower names for HTTP/2); nil for none.
func (e *Edits) ResponseFields() []EditField {
	if e == nil {
		return nil
	}
	return e.respSet
}

// RequestNames returns the names of the request fields the edit sets,
// for the access log's redaction and the documentation of a rule.
func (e *Edits) RequestNames() []string {
	if e == nil {
		return nil
	}
	names := make([]string, len(e.reqSet))
	for i, f := range e.reqSet {
		names[i] = f.Name
	}
	return names
}

func appendEditFields(dst []byte, fs []EditField) []byte {
	for _, f := range fs {
		dst = append(dst, f.Name...)
		dst = append(dst, ": "...)
		dst = append(dst, f.Value...)
		dst = append(dst, "\r\n"...)
	}
	return dst
}

// dropsName reports whether name, in any case, is one of list (lower
// case).
func dropsName[T ~string | ~[]byte](list []string, name T) bool {
	for _, l := range list {
		if len(l) != len(name) {
			continue
		}
		eq := true
		for i := 0; i < len(l); i++ {
			c := name[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if c != l[i] {
				eq = false
				break
			}
		}
		if eq {
			return true
		}
	}
	return false
}
