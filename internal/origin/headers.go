package origin

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/route"
)

// Header rules: the fields an operator's rules set, add and remove on the
// requests rustle forwards to origins and http parents, and on the
// responses it relays back, for every HTTP front-end at once. A route's
// rules ([[routes]] request_headers and response_headers) apply to the
// requests it takes; each [[header_rules]] entry's to the requests its
// criteria match, every matching entry in order, after the route's. The
// head builders ask the request's [Headers] (see [Exchange.Headers]):
// which of the client's fields to leave out, and which fields to append.

// MaxRuleValue bounds the value of a header rule's field, inline or read
// from a file.
const MaxRuleValue = 8 << 10

// HeaderField is one field a header rule puts on a message.
type HeaderField struct {
	// Name is the field's name as the configuration spells it, which an
	// HTTP/1.1 head carries.
	Name string
	// Lower is Name in lower case, as HTTP/2 and HTTP/3 name fields.
	// NewHeaderRules fills it.
	Lower string
	// Value is the field's value: maybe a secret (a token read from a
	// file), which rustle never logs.
	Value string
}

// String names the field without its value, so that a field formatted
// by mistake shows no secret.
func (f HeaderField) String() string { return f.Name + ": [redacted]" }

// LogValue is String, for log/slog.
func (f HeaderField) LogValue() slog.Value { return slog.StringValue(f.String()) }

// HeaderEdit is how a rule edits one kind of message (requests, or
// responses). Its zero value changes nothing. A name appears once in it
// at most, in any case.
type HeaderEdit struct {
	// Set are fields that replace the message's own of their names.
	Set []HeaderField
	// Add are fields added beside the message's own of their names.
	Add []HeaderField
	// Remove names fields, in any case, that are left out.
	Remove []string
}

// Empty reports whether e changes nothing.
func (e *HeaderEdit) Empty() bool { return len(e.Set) == 0 && len(e.Add) == 0 && len(e.Remove) == 0 }

// Check returns what is wrong with e, nil when nothing is: a field a
// rule may not name (see CheckRuleField) or value (see CheckRuleValue),
// a name given twice. The error never holds a value.
func (e *HeaderEdit) Check() error {
	_, _, err := compileEdit(e)
	return err
}

// AppendFields appends e's Set and Add fields to dst as HTTP/1.1 field
// lines, each "Name: value\r\n": what a CONNECT to a route's http parent
// carries of the route's request_headers (see route.RouteConfig).
func (e *HeaderEdit) AppendFields(dst []byte) []byte {
	for _, f := range e.Set {
		dst = appendRuleField(dst, f)
	}
	for _, f := range e.Add {
		dst = appendRuleField(dst, f)
	}
	return dst
}

// HeaderRule is one rule's edits: a route's, or a [[header_rules]]
// entry's.
type HeaderRule struct {
	// Name names the rule in errors.
	Name string
	// Match is the criteria of a [[header_rules]] entry, with the syntax
	// and meaning of an access rule's (Name, Action and AllowPrivate
	// empty); ignored for a route's rule.
	Match acl.Rule
	// Request edits the request forwarded upstream.
	Request HeaderEdit
	// Response edits the response relayed to the client.
	Response HeaderEdit
}

// HeaderRulesConfig is the header rules of a configuration.
type HeaderRulesConfig struct {
	// Routes are the routes' rules, by the route of a route table (the
	// one gate.Grant.Route returns); nil = none.
	Routes map[*route.Route]HeaderRule
	// Rules are the [[header_rules]] entries, in order; nil = none.
	Rules []HeaderRule
	// Groups are the user groups of the access rules, which the rules'
	// groups criteria name.
	Groups map[string][]string
	// ProviderGroups are the groups identity providers put users in,
	// which the rules' groups criteria may name too; nil = none.
	ProviderGroups []string
}

// HeaderRules is a compiled HeaderRulesConfig. It is immutable and safe
// for concurrent use.
type HeaderRules struct {
	routes  map[*route.Route]*headerRule
	matcher *acl.Matcher // nil = no [[header_rules]]
	rules   []headerRule // the matcher's entries' rules
}

// headerRule is a compiled HeaderRule: what the head builders need.
type headerRule struct {
	reqDrop  []string      // lower-case names of the request fields left out: Set's and Remove's
	reqAdd   []HeaderField // Set's, then Add's
	respDrop []string      // as reqDrop, of the response
	respAdd  []HeaderField // as reqAdd, of the response
}

// NewHeaderRules compiles cfg; it returns nil when cfg has no rule that
// edits anything. It fails on a field a rule may not name (see
// CheckRuleField) or value (see CheckRuleValue), a name given twice in
// one edit, or a bad criterion; the errors name the rule, never a
// value.
func NewHeaderRules(cfg HeaderRulesConfig) (*HeaderRules, error) {
	t := &HeaderRules{}
	var errs []error
	routes := slices.SortedFunc(maps.Keys(cfg.Routes), func(a, b *route.Route) int { return cmp.Compare(a.Name(), b.Name()) })
	for _, r := range routes {
		hr := cfg.Routes[r]
		if hr.Request.Empty() && hr.Response.Empty() {
			continue
		}
		cr, err := compileHeaderRule(hr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if t.routes == nil {
			t.routes = make(map[*route.Route]*headerRule, len(routes))
		}
		t.routes[r] = &cr
	}
	if len(cfg.Rules) > 0 {
		criteria := make([]acl.Rule, len(cfg.Rules))
		t.rules = make([]headerRule, len(cfg.Rules))
		for i, hr := range cfg.Rules {
			criteria[i] = hr.Match
			criteria[i].Name = hr.Name
			cr, err := compileHeaderRule(hr)
			if err != nil {
				errs = append(errs, err)
			}
			t.rules[i] = cr
		}
		m, err := acl.NewMatcher(criteria, cfg.Groups, cfg.ProviderGroups)
		if err != nil {
			errs = append(errs, fmt.Errorf("origin: header rules: %w", err))
		}
		t.matcher = m
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if t.routes == nil && t.matcher == nil {
		return nil, nil
	}
	return t, nil
}

// compileHeaderRule checks hr and returns it compiled.
func compileHeaderRule(hr HeaderRule) (headerRule, error) {
	var errs []error
	var r headerRule
	var err error
	if r.reqDrop, r.reqAdd, err = compileEdit(&hr.Request); err != nil {
		errs = append(errs, fmt.Errorf("request: %w", err))
	}
	if r.respDrop, r.respAdd, err = compileEdit(&hr.Response); err != nil {
		errs = append(errs, fmt.Errorf("response: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return r, fmt.Errorf("origin: header rule %s: %w", hr.Name, err)
	}
	return r, nil
}

// compileEdit checks e and returns the names it leaves out and the fields
// it appends.
func compileEdit(e *HeaderEdit) (drop []string, add []HeaderField, err error) {
	var errs []error
	seen := make(map[string]bool)
	name := func(n string) (string, bool) {
		if err := CheckRuleField(n); err != nil {
			errs = append(errs, err)
			return "", false
		}
		l := strings.ToLower(n)
		if seen[l] {
			errs = append(errs, fmt.Errorf("%q is named twice", n))
			return "", false
		}
		seen[l] = true
		return l, true
	}
	field := func(f HeaderField) (HeaderField, bool) {
		l, ok := name(f.Name)
		if !ok {
			return f, false
		}
		if err := CheckRuleValue(f.Value); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.Name, err))
			return f, false
		}
		f.Lower = l
		return f, true
	}
	for _, f := range e.Set {
		if f, ok := field(f); ok {
			drop = append(drop, f.Lower)
			add = append(add, f)
		}
	}
	for _, f := range e.Add {
		if f, ok := field(f); ok {
			add = append(add, f)
		}
	}
	for _, n := range e.Remove {
		if l, ok := name(n); ok {
			drop = append(drop, l)
		}
	}
	return drop, add, errors.Join(errs...)
}

// Why a header rule may not name a field.
const (
	whyHopByHop = "a hop-by-hop field (RFC 9110 §7.6.1): rustle makes its own for each connection and passes on none"
	whyFraming  = "it frames the message body: rustle frames each hop itself, and a second framing would let an upstream read one message as two (request smuggling)"
	whyProxy    = "credentials for one proxy: the client's are never passed on, and a parent's come from its url"
	whyHost     = "the destination the policy decided: rustle sets it from the request target, and a rule may not send a request elsewhere"
	whyVia      = "rustle's loop detection: rustle adds its own element (see via) and looks for it"
	whyMaxFwd   = "rustle counts it down for TRACE and OPTIONS and answers at 0"
)

// refusedFields are the fields a header rule may not name, by lower-case
// name, with why.
var refusedFields = map[string]string{
	"connection":          whyHopByHop,
	"keep-alive":          whyHopByHop,
	"proxy-connection":    whyHopByHop,
	"te":                  whyHopByHop,
	"trailer":             whyHopByHop,
	"upgrade":             whyHopByHop,
	"http2-settings":      whyHopByHop,
	"transfer-encoding":   whyFraming,
	"content-length":      whyFraming,
	"proxy-authorization": whyProxy,
	"proxy-authenticate":  whyProxy,
	"host":                whyHost,
	"via":                 whyVia,
	"max-forwards":        whyMaxFwd,
}

// CheckRuleField returns why a header rule may not name the field name,
// nil when it may: the name must be a token (RFC 9110 §5.1), and not one
// of the fields rustle makes itself: the hop-by-hop ones (Connection,
// Keep-Alive, Proxy-Connection, TE, Trailer, Upgrade, HTTP2-Settings),
// the framing (Transfer-Encoding, Content-Length), the proxies'
// credentials (Proxy-Authorization, Proxy-Authenticate), Host, Via and
// Max-Forwards.
func CheckRuleField(name string) error {
	if name == "" {
		return errors.New("a field name is empty")
	}
	for i := 0; i < len(name); i++ {
		if !tokenByte(name[i]) {
			return fmt.Errorf("%q is not a field name (a token of letters, digits and !#$%%&'*+-.^_`|~)", name)
		}
	}
	if why, ok := refusedFields[strings.ToLower(name)]; ok {
		return fmt.Errorf("%q may not be named by a header rule: %s", name, why)
	}
	return nil
}

// CheckRuleValue returns what is wrong with v as the value of a header
// rule's field, nil when nothing is: over MaxRuleValue bytes, a control
// character but HTAB (a line break would end the field and start
// another), white space at either end. The error never holds a byte of
// v, which may be a secret.
func CheckRuleValue(v string) error {
	if len(v) > MaxRuleValue {
		return fmt.Errorf("the value is %d bytes, over the %d-byte limit", len(v), MaxRuleValue)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < ' ' && c != '\t' || c == 0x7f {
			return fmt.Errorf("the value has a control character (0x%02x) at byte %d", c, i)
		}
	}
	if v != "" && (v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		return errors.New("the value begins or ends with white space")
	}
	return nil
}

// tokenByte reports whether c may be in a token (RFC 9110 §5.6.2).
func tokenByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// Headers are the header rules that apply to one request: the route's,
// then the matching [[header_rules]] entries', in order, each applied to
// what the ones before it made. A client's field is left out when a rule
// sets or removes its name; a rule's field goes out unless a later rule
// sets or removes its name. A TRACE gets the rules' removals but none of
// their fields: its final recipient echoes the request to the client (RFC
// 9110 §9.3.8), and a rule's field may be a secret. An [Exchange] holds
// them (see Exchange.Headers); a nil *Headers applies no rule.
type Headers struct {
	picked []*headerRule // the rules that apply, in order
	idx    []int         // the matcher's answer
	authz  headerRule    // the fields the decision service asked for (gate.Grant.AuthzHeaders), set last

	reqDrop, respDrop []string
	reqAdd, respAdd   []HeaderField

	// The merge of several rules, reused request after request (a single
	// rule's slices are used as they are).
	bufReqDrop, bufRespDrop []string
	bufReqAdd, bufRespAdd   []HeaderField
}

// choose picks the rules of t that apply to the request g granted (trace:
// a TRACE), and reports whether any does. It allocates nothing once its
// buffers have grown.
func (h *Headers) choose(t *HeaderRules, g *gate.Grant, trace bool) bool {
	h.picked = h.picked[:0]
	if t == nil {
		return h.chooseAuthz(g, trace)
	}
	if t.routes != nil {
		if r := t.routes[g.Route()]; r != nil {
			h.picked = append(h.picked, r)
		}
	}
	if t.matcher != nil {
		h.idx = g.Matches(t.matcher, h.idx[:0])
		for _, i := range h.idx {
			h.picked = append(h.picked, &t.rules[i])
		}
	}
	return h.chooseAuthz(g, trace)
}

// chooseAuthz adds, after the rules picked, the fields the decision
// service asked for the request (gate.Grant.AuthzHeaders), which it sets
// as a rule's set does; then it settles the picked rules (see settle).
// The service's fields were checked as a rule's are (see CheckRuleField).
func (h *Headers) chooseAuthz(g *gate.Grant, trace bool) bool {
	if hs := g.AuthzHeaders(); len(hs) > 0 {
		a := &h.authz
		a.reqDrop, a.reqAdd = a.reqDrop[:0], a.reqAdd[:0]
		for _, f := range hs {
			lower := strings.ToLower(f.Name)
			a.reqDrop = append(a.reqDrop, lower)
			a.reqAdd = append(a.reqAdd, HeaderField{Name: f.Name, Lower: lower, Value: f.Value})
		}
		h.picked = append(h.picked, a)
	}
	return h.settle(trace)
}

// settle makes the fields the picked rules drop and add, and reports
// whether any rule was picked.
func (h *Headers) settle(trace bool) bool {
	switch len(h.picked) {
	case 0:
		return false
	case 1:
		r := h.picked[0]
		h.reqDrop, h.reqAdd, h.respDrop, h.respAdd = r.reqDrop, r.reqAdd, r.respDrop, r.respAdd
	default:
		h.bufReqDrop, h.bufReqAdd = h.merge(h.bufReqDrop[:0], h.bufReqAdd[:0], false)
		h.bufRespDrop, h.bufRespAdd = h.merge(h.bufRespDrop[:0], h.bufRespAdd[:0], true)
		h.reqDrop, h.reqAdd, h.respDrop, h.respAdd = h.bufReqDrop, h.bufReqAdd, h.bufRespDrop, h.bufRespAdd
	}
	if trace {
		h.reqAdd = nil
	}
	return true
}

// merge appends the picked rules' names left out of the request (resp
// false) or the response, and their fields that no later rule sets or
// removes, in order.
func (h *Headers) merge(drop []string, add []HeaderField, resp bool) ([]string, []HeaderField) {
	for i, r := range h.picked {
		rd, ra := r.reqDrop, r.reqAdd
		if resp {
			rd, ra = r.respDrop, r.respAdd
		}
		drop = append(drop, rd...)
	fields:
		for _, f := range ra {
			for _, later := range h.picked[i+1:] {
				ld := later.reqDrop
				if resp {
					ld = later.respDrop
				}
				if slices.Contains(ld, f.Lower) {
					continue fields
				}
			}
			add = append(add, f)
		}
	}
	return drop, add
}

// forget drops what h holds of the rules (their tables may go), keeping
// its buffers.
func (h *Headers) forget() {
	clear(h.picked)
	h.picked = h.picked[:0]
	h.reqDrop, h.reqAdd, h.respDrop, h.respAdd = nil, nil, nil, nil
	clear(h.bufReqAdd)
	clear(h.bufRespAdd)
	clear(h.authz.reqAdd)
}

// DropsRequest reports whether the rules leave the client's field name
// (any case) out of the request: one they set or remove.
func (h *Headers) DropsRequest(name []byte) bool {
	return h != nil && dropsName(h.reqDrop, name)
}

// DropsRequestName is DropsRequest for a name given as a string.
func (h *Headers) DropsRequestName(name string) bool {
	return h != nil && dropsName(h.reqDrop, name)
}

// AppendRequest appends the rules' request fields to dst as HTTP/1.1
// field lines, each "Name: value\r\n".
func (h *Headers) AppendRequest(dst []byte) []byte {
	if h == nil {
		return dst
	}
	for _, f := range h.reqAdd {
		dst = appendRuleField(dst, f)
	}
	return dst
}

// AppendResponse appends the rules' response fields to dst as HTTP/1.1
// field lines, each "Name: value\r\n".
func (h *Headers) AppendResponse(dst []byte) []byte {
	if h == nil {
		return dst
	}
	for _, f := range h.respAdd {
		dst = appendRuleField(dst, f)
	}
	return dst
}

// ResponseFields returns the rules' response fields, for a front-end
// that does not write HTTP/1.1 heads; the slice must not be changed.
func (h *Headers) ResponseFields() []HeaderField {
	if h == nil {
		return nil
	}
	return h.respAdd
}

// editResponse marks the fields of the response head resp that the rules
// set or remove dropped (http1.Field.Drop), which every front-end leaves
// out.
func (h *Headers) editResponse(resp *http1.Head) {
	if len(h.respDrop) == 0 {
		return
	}
	for i := range resp.Fields {
		f := &resp.Fields[i]
		if !f.Drop && dropsName(h.respDrop, f.Name.Of(resp.Buf)) {
			f.Drop = true
		}
	}
}

// dropsName reports whether name, in any case, is one of list's
// lower-case names.
func dropsName[T ~string | ~[]byte](list []string, name T) bool {
	for _, l := range list {
		if equalFoldASCII(name, l) {
			return true
		}
	}
	return false
}

// appendRuleField appends f as an HTTP/1.1 field line.
func appendRuleField(dst []byte, f HeaderField) []byte {
	dst = append(dst, f.Name...)
	dst = append(dst, ": "...)
	dst = append(dst, f.Value...)
	return append(dst, "\r\n"...)
}
