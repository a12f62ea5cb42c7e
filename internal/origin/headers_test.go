package origin

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/http1"
)

// TestCheckRuleField checks which field names a header rule may name:
// tokens, but none of the fields rustle makes itself, in any case.
func TestCheckRuleField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want string // "" = allowed
	}{
		{"X-Api-Key", ""},
		{"x-forwarded-for", ""},
		{"Forwarded", ""},
		{"Authorization", ""},
		{"Cookie", ""},
		{"Server", ""},
		{"!#$%&'*+-.^_`|~09az", ""},
		{"", "a field name is empty"},
		{"X Key", "is not a field name"},
		{"X-Key:", "is not a field name"},
		{":authority", "is not a field name"},
		{"X-Ké", "is not a field name"},
		{"Connection", "hop-by-hop"},
		{"keep-alive", "hop-by-hop"},
		{"Proxy-Connection", "hop-by-hop"},
		{"TE", "hop-by-hop"},
		{"Trailer", "hop-by-hop"},
		{"UPGRADE", "hop-by-hop"},
		{"HTTP2-Settings", "hop-by-hop"},
		{"Transfer-Encoding", "request smuggling"},
		{"Content-Length", "request smuggling"},
		{"Proxy-Authorization", "the client's are never passed on"},
		{"proxy-authenticate", "the client's are never passed on"},
		{"Host", "a rule may not send a request elsewhere"},
		{"Via", "loop detection"},
		{"Max-Forwards", "TRACE and OPTIONS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckRuleField(tt.name)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckRuleField(%q) = %v, want nil", tt.name, err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckRuleField(%q) = %v, want an error saying %q", tt.name, err, tt.want)
			}
		})
	}
}

// TestCheckRuleValue checks the values a rule's field may have, and that
// an error never repeats the value, which may be a secret.
func TestCheckRuleValue(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t"
	tests := []struct {
		name, value string
		want        string // "" = allowed
	}{
		{"plain", "Bearer " + secret, ""},
		{"empty", "", ""},
		{"tab inside", secret + "\t" + secret, ""},
		{"obs-text", secret + "\xe9", ""},
		{"longest", strings.Repeat("a", MaxRuleValue), ""},
		{"too long", secret + strings.Repeat("a", MaxRuleValue), "over the 8192-byte limit"},
		{"line feed", secret + "\nX-Other: 1", "control character (0x0a) at byte 6"},
		{"carriage return", secret + "\r", "control character (0x0d)"},
		{"nul", secret + "\x00", "control character (0x00)"},
		{"del", secret + "\x7f", "control character (0x7f)"},
		{"leading space", " " + secret, "white space"},
		{"trailing tab", secret + "\t", "white space"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckRuleValue(tt.value)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("CheckRuleValue = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("CheckRuleValue = %v, want an error saying %q", err, tt.want)
			case err != nil && strings.Contains(err.Error(), secret):
				t.Errorf("CheckRuleValue's error %q shows the value", err)
			}
		})
	}
}

// TestNewHeaderRulesErrors checks that NewHeaderRules refuses what
// CheckRuleField and CheckRuleValue refuse and a name given twice,
// naming the rule and never a value, and returns nil for rules that edit
// nothing.
func TestNewHeaderRulesErrors(t *testing.T) {
	t.Parallel()
	const secret = "s3cr3t"
	f := func(name, value string) HeaderField { return HeaderField{Name: name, Value: value} }
	tests := []struct {
		name string
		rule HeaderRule
		want string
	}{
		{"hop-by-hop set", HeaderRule{Name: "r", Request: HeaderEdit{Set: []HeaderField{f("Connection", secret)}}},
			`origin: header rule r: request: "Connection" may not be named`},
		{"hop-by-hop remove", HeaderRule{Name: "r", Response: HeaderEdit{Remove: []string{"Transfer-Encoding"}}},
			`origin: header rule r: response: "Transfer-Encoding" may not be named`},
		{"twice", HeaderRule{Name: "r", Request: HeaderEdit{Set: []HeaderField{f("X-A", secret)}, Remove: []string{"x-a"}}},
			`"x-a" is named twice`},
		{"bad value", HeaderRule{Name: "r", Request: HeaderEdit{Add: []HeaderField{f("X-A", secret+"\r\nX-B: 1")}}},
			"X-A: the value has a control character"},
		{"bad criterion", HeaderRule{Name: "r", Request: HeaderEdit{Remove: []string{"X-A"}}},
			"origin: header rules: acl: matcher r: ports"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := HeaderRulesConfig{Rules: []HeaderRule{tt.rule}}
			if tt.name == "bad criterion" {
				cfg.Rules[0].Match.Ports = []string{"0-x"}
			}
			h, err := NewHeaderRules(cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) || h != nil {
				t.Fatalf("NewHeaderRules = %v, %v; want an error saying %q", h, err, tt.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error %q shows a value", err)
			}
		})
	}
	if h, err := NewHeaderRules(HeaderRulesConfig{}); h != nil || err != nil {
		t.Errorf("NewHeaderRules of nothing = %v, %v; want nil, nil", h, err)
	}
}

// TestHeaderFieldRedacted checks that a rule's field formatted or logged
// by mistake shows its name and not its value.
func TestHeaderFieldRedacted(t *testing.T) {
	t.Parallel()
	f := HeaderField{Name: "X-Key", Lower: "x-key", Value: "s3cr3t"}
	for _, s := range []string{fmt.Sprint(f), fmt.Sprintf("%v %s", f, f), f.LogValue().String()} {
		if strings.Contains(s, "s3cr3t") || !strings.Contains(s, "X-Key") {
			t.Errorf("formatted as %q, want the name without the value", s)
		}
	}
}

// picked returns Headers with rules applied in order, as choose leaves
// them for a request (trace: a TRACE).
func picked(t *testing.T, trace bool, rules ...HeaderRule) *Headers {
	t.Helper()
	h := new(Headers)
	for _, r := range rules {
		cr, err := compileHeaderRule(r)
		if err != nil {
			t.Fatal(err)
		}
		h.picked = append(h.picked, &cr)
	}
	if !h.settle(trace) {
		t.Fatal("settle picked no rule")
	}
	return h
}

// TestHeadersCompose checks how rules compose, on the head HTTP/2 and
// HTTP/3 requests get (AppendFieldHead) and on a response: each applies
// to what the ones before it made, a client's field named by any rule's
// set or remove is left out (the Forwarded element rustle adds too), a
// rule's field unless a later rule sets or removes its name; a TRACE
// gets the removals only.
func TestHeadersCompose(t *testing.T) {
	t.Parallel()
	c, err := New(Config{Forwarded: ForwardedXFF, MaxHeaderBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	f := func(name, value string) HeaderField { return HeaderField{Name: name, Value: value} }
	route := HeaderRule{Name: "route", Request: HeaderEdit{
		Set:    []HeaderField{f("X-Balancer", "route-token"), f("X-Team", "route")},
		Add:    []HeaderField{f("X-Tag", "route")},
		Remove: []string{"X-Forwarded-For"},
	}, Response: HeaderEdit{Set: []HeaderField{f("X-Served-By", "route")}, Remove: []string{"Server"}}}
	rule := HeaderRule{Name: "rule", Request: HeaderEdit{
		Set:    []HeaderField{f("X-Team", "rule")},
		Remove: []string{"x-tag", "Cookie"},
	}, Response: HeaderEdit{Add: []HeaderField{f("X-Rule", "1")}, Remove: []string{"x-served-by"}}}
	req := &FieldRequest{Method: "GET", Authority: "o.example", Path: "/", ContentLength: -1, MaxForwards: -1,
		ClientAddr: netip.MustParseAddr("192.0.2.1"), Fields: []hpack.HeaderField{
			{Name: "x-team", Value: "client"}, {Name: "x-tag", Value: "client"}, {Name: "cookie", Value: "a=1"},
			{Name: "x-forwarded-for", Value: "198.51.100.7"}, {Name: "accept", Value: "*/*"},
			{Name: "proxy-authorization", Value: "Basic Y2xpZW50OnB3"},
		}}
	tests := []struct {
		name     string
		trace    bool
		rules    []HeaderRule
		head     string
		response string
	}{
		{"route alone", false, []HeaderRule{route},
			"GET / HTTP/1.1\r\nHost: o.example\r\nX-Tag: client\r\nAccept: */*\r\nCookie: a=1\r\n" +
				"X-Balancer: route-token\r\nX-Team: route\r\nX-Tag: route\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Served-By: route\r\n"},
		{"route then rule", false, []HeaderRule{route, rule},
			"GET / HTTP/1.1\r\nHost: o.example\r\nAccept: */*\r\n" +
				"X-Balancer: route-token\r\nX-Team: rule\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Rule: 1\r\n"},
		{"rule alone", false, []HeaderRule{rule},
			"GET / HTTP/1.1\r\nHost: o.example\r\nAccept: */*\r\nX-Forwarded-For: 198.51.100.7, 192.0.2.1\r\n" +
				"X-Team: rule\r\n\r\n",
			"HTTP/1.1 200 OK\r\nServer: o\r\nContent-Type: text/plain\r\nX-Rule: 1\r\n"},
		{"trace", true, []HeaderRule{route, rule},
			"GET / HTTP/1.1\r\nHost: o.example\r\nAccept: */*\r\n\r\n",
			"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nX-Rule: 1\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := picked(t, tt.trace, tt.rules...)
			head, _ := c.AppendFieldHead(nil, req, nil, h)
			if got := string(head); got != tt.head {
				t.Errorf("head\n%q\nwant\n%q", got, tt.head)
			}
			var resp http1.Head
			raw := "HTTP/1.1 200 OK\r\nServer: o\r\nX-Served-By: origin\r\nContent-Type: text/plain\r\n\r\n"
			if err := resp.ParseResponse([]byte(raw)); err != nil {
				t.Fatal(err)
			}
			h.editResponse(&resp)
			out := []byte("HTTP/1.1 200 OK\r\n")
			for _, f := range resp.Fields {
				if !f.Drop {
					out = append(append(out, f.Line.Of(resp.Buf)...), "\r\n"...)
				}
			}
			if got := string(h.AppendResponse(out)); got != tt.response {
				t.Errorf("response\n%q\nwant\n%q", got, tt.response)
			}
		})
	}
	var none *Headers
	if head, _ := c.AppendFieldHead(nil, req, nil, none); !strings.Contains(string(head), "X-Team: client\r\n") ||
		!strings.Contains(string(head), "X-Forwarded-For: 198.51.100.7, 192.0.2.1\r\n") || strings.Contains(string(head), "Basic") {
		t.Errorf("head without rules %q: want the client's fields but Proxy-Authorization, and the Forwarded element", head)
	}
}

// TestHeadersAllocs checks that choosing among several rules allocates
// nothing once the buffers have grown.
func TestHeadersAllocs(t *testing.T) {
	f := func(name, value string) HeaderField { return HeaderField{Name: name, Value: value} }
	h := picked(t, false,
		HeaderRule{Request: HeaderEdit{Set: []HeaderField{f("X-A", "1")}}},
		HeaderRule{Request: HeaderEdit{Add: []HeaderField{f("X-B", "2")}}, Response: HeaderEdit{Remove: []string{"Server"}}})
	if n := testing.AllocsPerRun(100, func() { h.settle(false) }); n != 0 {
		t.Errorf("settle allocates %v times", n)
	}
}

// BenchmarkAppendFieldHeadRules measures what a header rule costs the
// head an HTTP/2 or HTTP/3 request gets: the same request's head without
// rules, and with a rule that sets a field and removes another.
func BenchmarkAppendFieldHeadRules(b *testing.B) {
	c, err := New(Config{Forwarded: ForwardedNone, MaxHeaderBytes: 64 << 10})
	if err != nil {
		b.Fatal(err)
	}
	req := &FieldRequest{Method: "GET", Authority: "o.example", Path: "/1k", ContentLength: -1, MaxForwards: -1,
		Fields: []hpack.HeaderField{{Name: "user-agent", Value: "bench"}, {Name: "accept", Value: "*/*"},
			{Name: "accept-encoding", Value: "gzip"}, {Name: "cookie", Value: "a=1"}}}
	cr, err := compileHeaderRule(HeaderRule{Request: HeaderEdit{
		Set: []HeaderField{{Name: "X-Api-Key", Value: "0123456789abcdef"}}, Remove: []string{"User-Agent"}}})
	if err != nil {
		b.Fatal(err)
	}
	h := &Headers{picked: []*headerRule{&cr}}
	h.settle(false)
	for _, bc := range []struct {
		name string
		h    *Headers
	}{{"none", nil}, {"set+remove", h}} {
		b.Run(bc.name, func(b *testing.B) {
			out := make([]byte, 0, 1024)
			b.ReportAllocs()
			for b.Loop() {
				out, _ = c.AppendFieldHead(out[:0], req, nil, bc.h)
			}
		})
	}
}
