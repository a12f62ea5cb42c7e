package h2

import (
	"context"
	"encoding/xml"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// h2specExcluded lists the h2spec cases that do not apply to rustle, by
// their id ("http2/5.1/1", as in h2spec's JUnit report), each with the
// reason. A failure of any other case fails the test.
var h2specExcluded = map[string]string{}

// summary logs a result line and, as go test shows nothing of passing
// tests, appends it to the file $RUSTLE_HOSTILE_SUMMARY names when set,
// which `make test` prints after the run.
func summary(t testing.TB, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	path := os.Getenv("RUSTLE_HOSTILE_SUMMARY")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Logf("write summary: %v", err)
		return
	}
	defer f.Close()
	fmt.Fprintln(f, line)
}

// junitReport is the part of h2spec's JUnit report the test reads.
type junitReport struct {
	Suites []struct {
		Name  string `xml:"name,attr"`
		Cases []struct {
			Name      string `xml:"name,attr"`
			ClassName string `xml:"classname,attr"`
			Failure   *struct {
				Text string `xml:",chardata"`
			} `xml:"failure"`
			Error *struct {
				Text string `xml:",chardata"`
			} `xml:"error"`
			Skipped *struct{} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

// TestH2Spec runs the h2spec conformance suite (generic, http2 and hpack
// sections) against the proxy over TLS. h2spec sends requests for
// https://127.0.0.1:PORT/, which rustle answers itself (400: not a proxy
// request) with a body, enough for every flow-control case.
func TestH2Spec(t *testing.T) {
	bin := proxytest.FindTool("h2spec")
	if bin == "" {
		t.Skip("h2spec not installed (scripts/deps.sh installs it)")
	}
	p := startProxy(t, testConfig(Config{}), nil)
	_, port, _ := net.SplitHostPort(p.addr)
	report := filepath.Join(t.TempDir(), "h2spec.xml")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"-t", "-k", "-h", "127.0.0.1", "-p", port, "-o", "5", "-j", report}
	if os.Getenv("H2SPEC_STRICT") != "" {
		args = append(args, "-S") // also the cases of RFC 7540 "SHOULD"s
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	out, err := cmd.CombinedOutput()
	raw, rerr := os.ReadFile(report)
	if rerr != nil {
		t.Fatalf("h2spec: %v (no report: %v)\n%s", err, rerr, out)
	}
	var rep junitReport
	if err := xml.Unmarshal(raw, &rep); err != nil {
		t.Fatalf("h2spec report: %v", err)
	}
	var passed, failed, skipped, excluded int
	for _, s := range rep.Suites {
		for _, c := range s.Cases {
			id := c.ClassName
			switch {
			case c.Skipped != nil:
				skipped++
			case c.Failure == nil && c.Error == nil:
				passed++
			case h2specExcluded[id] != "":
				excluded++
			default:
				failed++
				msg := ""
				if c.Failure != nil {
					msg = c.Failure.Text
				} else {
					msg = c.Error.Text
				}
				t.Errorf("h2spec %s %s (%s): %s", id, c.Name, s.Name, strings.TrimSpace(msg))
			}
		}
	}
	summary(t, "h2spec: %d passed, %d failed, %d skipped, %d excluded (of %d cases, over TLS)",
		passed, failed, skipped, excluded, passed+failed+skipped+excluded)
	if passed == 0 {
		t.Fatalf("h2spec ran no case:\n%s", out)
	}
	if failed > 0 || testing.Verbose() && os.Getenv("H2SPEC_OUTPUT") != "" {
		t.Logf("h2spec output:\n%s", out)
	}
}

// TestNghttp fetches through the proxy with nghttp (Debian's
// nghttp2-client), which can send a proxy-style request: :scheme http
// and the origin's :authority, over TLS to the proxy.
func TestNghttp(t *testing.T) {
	bin := proxytest.FindTool("nghttp")
	if bin == "" {
		t.Skip("nghttp not installed (scripts/deps.sh installs nghttp2-client)")
	}
	o := echoOrigin(t)
	p := startProxy(t, testConfig(Config{}), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host := strings.TrimPrefix(o.URL, "http://")
	out, err := exec.CommandContext(ctx, bin, "-v", "-H", ":authority: "+host, "-H", ":scheme: http",
		"https://"+p.addr+"/via-nghttp").CombinedOutput()
	if err != nil {
		t.Fatalf("nghttp: %v\n%s", err, out)
	}
	if want := "GET /via-nghttp host=" + host; !strings.Contains(string(out), want) {
		t.Fatalf("nghttp output lacks %q:\n%s", want, out)
	}
	t.Logf("nghttp:\n%s", out)
}
