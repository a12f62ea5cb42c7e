package pac

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// checkCases are PAC files and what Check says of them: the line of the
// fault, 0 for a file that checks, -1 for an error without a line.
var checkCases = []struct {
	name string
	src  string
	line int
}{
	{"plain", "function FindProxyForURL(url, host) {\n  return \"DIRECT\";\n}\n", 0},
	{"brackets in strings, comments, regexps and templates", `// a comment with } and (
/* a block comment
   with { and " and ' */
function FindProxyForURL(url, host) {
	var a = "}{)(", b = '\'"[', re = /[/}]+\//i;
	if (re.test(host) && url.length / 2 > 1) return "PROXY p:1; DIRECT";
	if (shExpMatch(host, "*.example.com") || [1, 2][0] == 1) { return "DIRECT"; }
	return "PROXY p:1";
}
`, 0},
	{"template literals", "function FindProxyForURL(url, host) {\n\tvar t = `a ${host + `in ${\"}\"}`} b {`;\n\treturn \"DIRECT\";\n}\n", 0},
	{"assigned", "var FindProxyForURL = function(url, host) { return \"DIRECT\"; };\n", 0},
	{"unclosed brace", "function FindProxyForURL(url, host) {\n  if (x) {\n    return \"DIRECT\";\n}\n", 1},
	{"extra brace", "function FindProxyForURL(url, host) {\n  return \"DIRECT\";\n}\n}\n", 4},
	{"mismatched", "function FindProxyForURL(url, host) {\n  if (isPlainHostName(host] return \"DIRECT\";\n}\n", 2},
	{"unclosed string", "function FindProxyForURL(url, host) {\n\n  return \"DIRECT;\n}\n", 3},
	{"unclosed comment", "function FindProxyForURL(url, host) {\n  return \"DIRECT\"; /* no end\n}\n", 2},
	{"unclosed regexp", "function FindProxyForURL(url, host) {\n  if (/abc.test(host)) return \"DIRECT\";\n}\n", 2},
	{"unclosed template", "function FindProxyForURL(url, host) {\n  var s = `abc\n}\n", 2},
	{"no function", "function findProxy(url, host) { return \"DIRECT\"; }\n", -1},
	{"function name only in a comment", "// function FindProxyForURL\nfunction f() {}\n", -1},
}

// es6Case is the case of checkCases that only ECMAScript 2015 and later
// take.
const es6Case = "template literals"

// TestCheck checks Check on checkCases: each fault with its line.
func TestCheck(t *testing.T) {
	for _, tc := range checkCases {
		t.Run(tc.name, func(t *testing.T) {
			err := Check([]byte(tc.src))
			var se *SyntaxError
			switch {
			case tc.line == 0 && err != nil:
				t.Fatalf("Check: %v; want nil", err)
			case tc.line > 0 && (!errors.As(err, &se) || se.Line != tc.line):
				t.Fatalf("Check: %v; want an error on line %d", err, tc.line)
			case tc.line < 0 && (err == nil || errors.As(err, &se)):
				t.Fatalf("Check: %v; want an error without a line", err)
			}
		})
	}
	if err := Check(make([]byte, MaxFileBytes+1)); err == nil {
		t.Error("Check of a file over MaxFileBytes: nil")
	}
	if err := Check([]byte("\xff function FindProxyForURL(){}")); err == nil {
		t.Error("Check of a file that is not UTF-8: nil")
	}
}

// pacparser evaluates src with Debian's python3-pacparser (SpiderMonkey)
// and returns, for each URL, what FindProxyForURL answers, or the error
// of a file that does not evaluate.
func pacparser(t *testing.T, src string, urls []string) ([]string, error) {
	t.Helper()
	python := proxytest.RequirePython(t, "pacparser", "python3-pacparser")
	dir := t.TempDir()
	file := filepath.Join(dir, "proxy.pac")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `import json, sys, urllib.parse, pacparser
pacparser.init()
pacparser.enable_microsoft_extensions()
pacparser.parse_pac_file(sys.argv[1])
out = []
for u in json.loads(sys.argv[2]):
    # The host as a browser gives it (pacparser's own parse of an IPv6
    # URL splits at its first colon).
    out.append(pacparser.find_proxy(u, urllib.parse.urlsplit(u).hostname))
print(json.dumps(out))`
	arg, _ := json.Marshal(urls)
	cmd := exec.Command(python, "-c", script, file, string(arg))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, errors.New(stderr.String())
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("pacparser's output %q: %v", out, err)
	}
	return got, nil
}

// TestCheckAgreesWithPacparser evaluates checkCases with pacparser: a
// file Check takes evaluates, and one whose syntax Check refuses does
// not (those without a FindProxyForURL evaluate, and then fail when
// asked).
func TestCheckAgreesWithPacparser(t *testing.T) {
	for _, tc := range checkCases {
		if tc.name == es6Case {
			continue // pacparser's SpiderMonkey (ES5) has no template literals; the browsers do
		}
		t.Run(tc.name, func(t *testing.T) {
			_, err := pacparser(t, tc.src, []string{"http://a.example/"})
			switch {
			case tc.line == 0 && err != nil:
				t.Fatalf("pacparser refuses a file Check takes: %v", err)
			case tc.line != 0 && err == nil:
				t.Fatalf("pacparser takes a file Check refuses")
			}
		})
	}
}

// TestGeneratedWithPacparser evaluates a generated file with pacparser
// for a table of URLs: the bypass names, suffixes, plain names and
// ranges go DIRECT, the rest to the proxies in order; a file without
// proxies names the host it was fetched by.
func TestGeneratedWithPacparser(t *testing.T) {
	cfg := config.PAC{
		Listeners: []string{"web"},
		Proxies:   []string{"http://proxy1.example:3128", "https://proxy2.example:443", "socks5://[2001:db8::5]:1080", "direct"},
		Bypass:    []string{"<local>", "intranet.example", ".corp.example", "*.svc.example", "10.0.0.0/8", "192.168.1.7", "fd00::/8"},
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	src, err := p.Body("ignored:1", 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(src); err != nil {
		t.Fatalf("the generated file does not check: %v\n%s", err, src)
	}
	const proxies = "PROXY proxy1.example:3128; HTTPS proxy2.example:443; SOCKS5 [2001:db8::5]:1080; DIRECT"
	table := []struct{ url, want string }{
		{"http://www.example.com/", proxies},
		{"https://www.example.com:8443/x?y", proxies},
		{"http://printer/", "DIRECT"},
		{"http://intranet.example/", "DIRECT"},
		{"http://www.intranet.example/", proxies},
		{"http://corp.example/", "DIRECT"},
		{"http://a.b.corp.example/", "DIRECT"},
		{"http://notcorp.example/", proxies},
		{"http://svc.example/", proxies},
		{"http://api.svc.example/", "DIRECT"},
		{"http://10.1.2.3/", "DIRECT"},
		{"http://11.1.2.3/", proxies},
		{"http://192.168.1.7:8080/", "DIRECT"},
		{"http://192.168.1.8/", proxies},
		{"http://[fd00::1]/", "DIRECT"},
		{"http://[2001:db8::1]/", proxies},
		{"http://WWW.CORP.EXAMPLE/", "DIRECT"},
	}
	urls := make([]string, len(table))
	for i, r := range table {
		urls[i] = r.url
	}
	got, err := pacparser(t, string(src), urls)
	if err != nil {
		t.Fatalf("pacparser: %v\n%s", err, src)
	}
	for i, r := range table {
		if got[i] != r.want {
			t.Errorf("%s: %q, want %q", r.url, got[i], r.want)
		}
	}

	t.Run("without proxies", func(t *testing.T) {
		p, err := New(config.PAC{Listeners: []string{"web"}, Bypass: []string{"<local>"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ host, want string }{
			{"proxy.example:3128", "PROXY proxy.example:3128"},
			{"proxy.example", "PROXY proxy.example:8080"},
			{"[2001:db8::1]", "PROXY [2001:db8::1]:8080"},
			{"192.0.2.1:3128", "PROXY 192.0.2.1:3128"},
		} {
			src, err := p.Body(tc.host, 8080)
			if err != nil {
				t.Fatalf("Body(%q): %v", tc.host, err)
			}
			got, err := pacparser(t, string(src), []string{"http://www.example.com/", "http://printer/"})
			if err != nil || got[0] != tc.want || got[1] != "DIRECT" {
				t.Errorf("fetched by %q: %q, %v; want %q and DIRECT\n%s", tc.host, got, err, tc.want, src)
			}
		}
		for _, bad := range []string{`x";alert(1);"`, "a b:1", "[::1", ""} {
			if _, err := p.Body(bad, 8080); err == nil {
				t.Errorf("Body(%q): nil; want an error", bad)
			}
		}
	})
}

// TestFile checks an operator's file: served as it is, refused with its
// line when it does not check.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.pac")
	os.WriteFile(good, []byte(checkCases[0].src), 0o644)
	p, err := New(config.PAC{File: good})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := p.Body("x:1", 1); string(b) != checkCases[0].src {
		t.Errorf("body %q", b)
	}
	bad := filepath.Join(dir, "bad.pac")
	os.WriteFile(bad, []byte("function FindProxyForURL(url, host) {\n  return \"DIRECT;\n}\n"), 0o644)
	if _, err := New(config.PAC{File: bad}); err == nil || !strings.Contains(err.Error(), "bad.pac: line 2:") {
		t.Errorf("New with a bad file: %v; want its line 2", err)
	}
	if _, err := New(config.PAC{File: filepath.Join(dir, "missing.pac")}); err == nil {
		t.Error("New with a missing file: nil")
	}
}
