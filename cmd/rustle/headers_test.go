package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckHeaderRules checks what rustle check says of header rules: a
// rule naming a hop-by-hop field, a {file:} value whose file is missing
// or holds a line break, each with its file, line and key; a good
// configuration is OK. Neither its output nor an error shows a value.
func TestCheckHeaderRules(t *testing.T) {
	const secret = "chk-s3cr3t"
	dir := t.TempDir()
	for name, content := range map[string]string{"token": secret + "\n", "broken": secret + "\nX-Injected: 1\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const head = "[[listen]]\naddress = \"127.0.0.1:3128\"\n[[routes]]\nvia = \"direct\"\n"
	for _, tc := range []struct {
		name, src, want string // want "" = OK
	}{
		{"good", head + "request_headers.set = { \"X-Key\" = \"{file:token}\", \"X-Inline\" = \"" + secret + "\" }\n", ""},
		{"hop-by-hop", head + "request_headers.set = { \"Transfer-Encoding\" = \"" + secret + "\" }\n",
			`rustle.toml:5: routes[0].request_headers.set.Transfer-Encoding: "Transfer-Encoding" may not be named by a header rule: ` +
				"it frames the message body: rustle frames each hop itself, and a second framing would let an upstream read one message as two (request smuggling)"},
		{"missing file", head + "\n[[header_rules]]\nrequest_headers.add = { \"X-Key\" = \"{file:none}\" }\n",
			"rustle.toml:7: header_rules[0].request_headers.add.X-Key: open " + filepath.Join(dir, "none") + ": no such file or directory"},
		{"line break in the file", head + "response_headers.set = { \"X-Key\" = \"{file:broken}\" }\n",
			"rustle.toml:5: routes[0].response_headers.set.X-Key: " + filepath.Join(dir, "broken") + ": the value has a control character (0x0a) at byte 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "rustle.toml")
			if err := os.WriteFile(path, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := check([]string{"-c", path}, &stdout, &stderr)
			if out := stdout.String() + stderr.String(); strings.Contains(out, secret) {
				t.Errorf("rustle check showed a value: %q", out)
			}
			if tc.want == "" {
				if code != 0 || !strings.Contains(stdout.String(), ": OK") {
					t.Fatalf("rustle check exit %d\nstdout %s\nstderr %s", code, stdout.String(), stderr.String())
				}
				return
			}
			if code != 1 {
				t.Fatalf("rustle check exit %d, want 1\nstdout %s\nstderr %s", code, stdout.String(), stderr.String())
			}
			if want := "rustle check: " + dir + string(filepath.Separator) + tc.want + "\n"; stderr.String() != want {
				t.Errorf("rustle check said\n%q\nwant\n%q", stderr.String(), want)
			}
		})
	}
}
