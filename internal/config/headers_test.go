package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestHeaderRulesParse checks that a route's request_headers and
// response_headers and a [[header_rules]] entry decode, that an unnamed
// entry gets its name, and that Load resolves a relative {file:} path
// against the file's directory.
func TestHeaderRulesParse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rustle.toml")
	src := lines(
		`[[listen]]`,
		`address = "127.0.0.1:3128"`,
		`[[routes]]`,
		`name = "lb"`,
		`via = "direct"`,
		`request_headers = { set = { "X-Balancer-Token" = "{file:secrets/lb}" }, remove = ["X-Forwarded-For"] }`,
		`response_headers.add = { "X-Route" = "lb" }`,
		`[[header_rules]]`,
		`users = ["bob"]`,
		`[header_rules.request_headers]`,
		`set = { "X-Team" = "devs", "Authorization" = "{file:/run/origin-token}" }`,
		`add = { "X-Tag" = "bob" }`,
		`[header_rules.response_headers]`,
		`remove = ["Server"]`,
	)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r := c.Routes[0]
	want := HeaderEdit{Set: map[string]string{"X-Balancer-Token": "{file:" + filepath.Join(dir, "secrets", "lb") + "}"}, Remove: []string{"X-Forwarded-For"}}
	if diff := cmp.Diff(want, r.RequestHeaders); diff != "" {
		t.Errorf("routes[0].request_headers (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(HeaderEdit{Add: map[string]string{"X-Route": "lb"}}, r.ResponseHeaders); diff != "" {
		t.Errorf("routes[0].response_headers (-want +got):\n%s", diff)
	}
	hr := c.HeaderRules[0]
	wantRule := HeaderRule{Name: "header_rules[0]", Criteria: Criteria{Who: Who{Users: []string{"bob"}}},
		RequestHeaders: HeaderEdit{Set: map[string]string{"X-Team": "devs", "Authorization": "{file:/run/origin-token}"},
			Add: map[string]string{"X-Tag": "bob"}},
		ResponseHeaders: HeaderEdit{Remove: []string{"Server"}}}
	if diff := cmp.Diff(wantRule, hr); diff != "" {
		t.Errorf("header_rules[0] (-want +got):\n%s", diff)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

// TestHeaderRulesFileAndLine checks that Validate refuses what a header
// rule may not do, each error naming the file, the line and the key, and
// none showing a value: a hop-by-hop field, Host, the framing, the
// client's credentials, a name given twice in any case, a value with a
// line break, a {file:} value that is not the whole value or names no
// file, an entry that edits nothing, a bad criterion, a name given twice.
func TestHeaderRulesFileAndLine(t *testing.T) {
	const secret = "s3cr3t-value"
	src := `[[listen]]
address = "127.0.0.1:3128"

[[routes]]
via = "direct"
request_headers.set = { "Connection" = "` + secret + `", "X-Ok" = "` + secret + `" }
request_headers.remove = ["x-ok", "Host"]
response_headers.add = { "Content-Length" = "1" }

[[header_rules]]
name = "a"
hosts = ["a b"]
[header_rules.request_headers]
set = { "Proxy-Authorization" = "Basic ` + secret + `", "X-Line" = "` + secret + `\r\nX-Injected: 1" }
add = { "X-File" = "Bearer {file:/run/token}", "X-Empty" = "{file:}", "Transfer-Encoding" = "chunked" }

[[header_rules]]
name = "a"
ports = ["443"]

[[header_rules]]
response_headers = { remove = ["TE", "Upgrade", "keep-alive", "Via", "max-forwards", "X Bad"] }
`
	c, err := Parse([]byte(src), "h.toml")
	if err != nil {
		t.Fatal(err)
	}
	got := errorStrings(t, c.Validate())
	want := []string{
		`h.toml:6: routes[0].request_headers.set.Connection: "Connection" may not be named by a header rule: ` + "a hop-by-hop field (RFC 9110 §7.6.1): rustle makes its own for each connection and passes on none",
		`h.toml:7: routes[0].request_headers.remove[0]: "x-ok" is named twice (also routes[0].request_headers.set.X-Ok)`,
		`h.toml:7: routes[0].request_headers.remove[1]: "Host" may not be named by a header rule: ` + "the destination the policy decided: rustle sets it from the request target, and a rule may not send a request elsewhere",
		`h.toml:8: routes[0].response_headers.add.Content-Length: "Content-Length" may not be named by a header rule: ` + "it frames the message body: rustle frames each hop itself, and a second framing would let an upstream read one message as two (request smuggling)",
		`h.toml:12: header_rules[0].hosts[0]: "a b" is not a host name, *.suffix, .suffix, IP address or CIDR prefix`,
		`h.toml:14: header_rules[0].request_headers.set.Proxy-Authorization: "Proxy-Authorization" may not be named by a header rule: ` + "credentials for one proxy: the client's are never passed on, and a parent's come from its url",
		`h.toml:14: header_rules[0].request_headers.set.X-Line: the value has a control character (0x0d) at byte 12`,
		`h.toml:15: header_rules[0].request_headers.add.Transfer-Encoding: "Transfer-Encoding" may not be named by a header rule: ` + "it frames the message body: rustle frames each hop itself, and a second framing would let an upstream read one message as two (request smuggling)",
		`h.toml:15: header_rules[0].request_headers.add.X-Empty: {file:} names no file`,
		`h.toml:15: header_rules[0].request_headers.add.X-File: a {file:PATH} value must be the whole value: put the whole value in the file`,
		`h.toml:18: header_rules[1].name: "a" is also the name of header_rules[0]`,
		`h.toml:17: header_rules[1]: edits nothing: give request_headers or response_headers`,
		`h.toml:22: header_rules[2].response_headers.remove[0]: "TE" may not be named by a header rule: ` + "a hop-by-hop field (RFC 9110 §7.6.1): rustle makes its own for each connection and passes on none",
		`h.toml:22: header_rules[2].response_headers.remove[1]: "Upgrade" may not be named by a header rule: ` + "a hop-by-hop field (RFC 9110 §7.6.1): rustle makes its own for each connection and passes on none",
		`h.toml:22: header_rules[2].response_headers.remove[2]: "keep-alive" may not be named by a header rule: ` + "a hop-by-hop field (RFC 9110 §7.6.1): rustle makes its own for each connection and passes on none",
		`h.toml:22: header_rules[2].response_headers.remove[3]: "Via" may not be named by a header rule: ` + "rustle's loop detection: rustle adds its own element (see via) and looks for it",
		`h.toml:22: header_rules[2].response_headers.remove[4]: "max-forwards" may not be named by a header rule: ` + "rustle counts it down for TRACE and OPTIONS and answers at 0",
		`h.toml:22: header_rules[2].response_headers.remove[5]: "X Bad" is not a field name (a token of letters, digits and !#$%&'*+-.^_` + "`" + `|~)`,
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("Validate errors lack\n  %s\ngot:\n  %s", w, strings.Join(got, "\n  "))
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d errors, want %d:\n  %s", len(got), len(want), strings.Join(got, "\n  "))
	}
	for _, g := range got {
		if strings.Contains(g, secret) {
			t.Errorf("error %q shows a value", g)
		}
	}
}
