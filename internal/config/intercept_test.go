package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestInterceptParse checks that [intercept] and its rules decode, that
// Load resolves the CA's, the upstream CA's and relative {file:} paths
// against the file's directory, that an unnamed rule gets its name, and
// that FileRefs and ExpandFileRefs find and replace the references.
func TestInterceptParse(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rustle.toml")
	src := lines(
		`[[listen]]`,
		`address = "127.0.0.1:3128"`,
		`[intercept]`,
		`ca_cert = "ca.pem"`,
		`ca_key = "/etc/ca-key.pem"`,
		`upstream_ca = "origins.pem"`,
		`bypass = [".bank.example", "10.0.0.0/8"]`,
		`[[intercept.rules]]`,
		`hosts = ["api.example"]`,
		`users = ["ci"]`,
		`request_headers = { set = { Authorization = "Bearer {file:secrets/token}", "X-Team" = "ci" }, remove = ["Cookie"] }`,
		`response_headers.remove = ["Set-Cookie"]`,
	)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := Intercept{
		CACert: filepath.Join(dir, "ca.pem"), CAKey: "/etc/ca-key.pem", UpstreamCA: filepath.Join(dir, "origins.pem"),
		Bypass: []string{".bank.example", "10.0.0.0/8"}, CacheSize: 4096, UpstreamIdle: Duration{5 * time.Second},
		Rules: []InterceptRule{{
			Name:     "intercept.rules[0]",
			Criteria: Criteria{Hosts: []string{"api.example"}, Who: Who{Users: []string{"ci"}}},
			RequestHeaders: InterceptHeaders{
				Set:    map[string]string{"Authorization": "Bearer {file:" + filepath.Join(dir, "secrets", "token") + "}", "X-Team": "ci"},
				Remove: []string{"Cookie"},
			},
			ResponseHeaders: InterceptHeaders{Remove: []string{"Set-Cookie"}},
		}},
	}
	if diff := cmp.Diff(want, c.Intercept); diff != "" {
		t.Errorf("intercept (-want +got):\n%s", diff)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	v := "a {file:/x} b {file:y}"
	if got := FileRefs(v); !slices.Equal(got, []string{"/x", "y"}) {
		t.Errorf("FileRefs: %q", got)
	}
	got, err := ExpandFileRefs(v, func(p string) (string, error) { return "<" + p + ">", nil })
	if err != nil || got != "a </x> b <y>" {
		t.Errorf("ExpandFileRefs: %q %v", got, err)
	}
}

// TestInterceptFileAndLine checks what Validate refuses in [intercept],
// each error with the file, line and key, and none showing a value.
func TestInterceptFileAndLine(t *testing.T) {
	const secret = "s3cr3t-value"
	src := `[[listen]]
address = "127.0.0.1:3128"

[intercept]
ca_cert = "ca.pem"
bypass = ["a b"]
cache_size = -1
upstream_idle = "-1s"

[[intercept.rules]]
name = "r"
methods = ["GET"]
paths = ["/x"]
request_headers.set = { Host = "` + secret + `", "X-Ok" = "` + secret + `\r\n", "X-File" = "{file:/nope" }
request_headers.remove = ["x-ok", "Content-Length"]

[[intercept.rules]]
name = "r"
response_headers.set = { "X-Empty" = "{file:}" }
protocols = ["connect", "transparent", "websocket", "socks5", "nope"]
`
	c, err := Parse([]byte(src), "i.toml")
	if err != nil {
		t.Fatal(err)
	}
	got := errorStrings(t, c.Validate())
	want := []string{
		`i.toml:4: intercept: ca_cert and ca_key go together`,
		`i.toml:6: intercept.bypass[0]: "a b" is not a host name, *.suffix, .suffix, IP address or CIDR prefix`,
		`i.toml:7: intercept.cache_size: -1 is not positive`,
		`i.toml:8: intercept.upstream_idle: -1s is not positive`,
		`i.toml:12: intercept.rules[0].methods: a tunnel has no method: the access rules decide the requests inside`,
		`i.toml:13: intercept.rules[0].paths: a tunnel has no path: the access rules decide the requests inside`,
		`i.toml:14: intercept.rules[0].request_headers.set.Host: "Host" may not be named by a header rule: the destination the policy decided: rustle sets it from the request target, and a rule may not send a request elsewhere`,
		`i.toml:14: intercept.rules[0].request_headers.set.X-File: a {file:PATH} reference without its closing '}'`,
		`i.toml:14: intercept.rules[0].request_headers.set.X-Ok: the value has a control character (0x0d) at byte 12`,
		`i.toml:15: intercept.rules[0].request_headers.remove[0]: "x-ok" is named twice (also intercept.rules[0].request_headers.set.X-Ok)`,
		`i.toml:15: intercept.rules[0].request_headers.remove[1]: "Content-Length" may not be named by a header rule: it frames the message body: rustle frames each hop itself, and a second framing would let an upstream read one message as two (request smuggling)`,
		`i.toml:18: intercept.rules[1].name: "r" is also the name of intercept.rules[0]`,
		`i.toml:19: intercept.rules[1].response_headers.set.X-Empty: {file:} names no file`,
		`i.toml:20: intercept.rules[1].protocols[1]: "transparent": only connect, socks5 and socks4 tunnels are intercepted: a transparent listener's tunnels are always spliced`,
		`i.toml:20: intercept.rules[1].protocols[2]: "websocket": only connect, socks5 and socks4 tunnels are intercepted`,
		`i.toml:20: intercept.rules[1].protocols[4]: acl: protocol "nope" is not one of http, connect, websocket, socks5, socks5-udp, socks4, udp, https, transparent`,
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
	// Rules without a CA.
	c, err = Parse([]byte("[[listen]]\naddress = \"127.0.0.1:3128\"\n[[intercept.rules]]\nhosts = [\"a.example\"]\n"), "n.toml")
	if err != nil {
		t.Fatal(err)
	}
	if got := errorStrings(t, c.Validate()); !slices.Equal(got, []string{`n.toml:3: intercept.rules: need intercept.ca_cert and intercept.ca_key`}) {
		t.Errorf("rules without a CA: %q", got)
	}
}
