//go:build linux

package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestSNICheck runs the binary with a mixed listener whose SNI check is
// match and a rule on sni_hosts, in front of a Go TLS origin, and drives
// it with curl (HTTP/1.1 CONNECT and --socks5-hostname) and openssl
// s_client through a CONNECT: a hello naming the CONNECT's host gets
// through; openssl fronting another name (-servername) is refused
// (sni-mismatch), and one fronting a name of the rule is denied by it,
// in both cases before the origin sees a connection; the access log
// names every hello's server.
func TestSNICheck(t *testing.T) {
	t.Parallel()
	openssl := proxytest.RequireTool(t, "openssl", "openssl")
	o := newOrigin(t, "127.0.0.1", true)
	_, port, _ := net.SplitHostPort(o.Listener.Addr().String())
	logPath := filepath.Join(t.TempDir(), "access.log")
	extra := fmt.Sprintf(`[access_log]
enabled = true
format = "json"
path = %q

[[acl.rules]]
name = "no-fronted"
action = "deny"
sni_hosts = ["*.blocked.example"]

[[acl.rules]]
name = "all"
action = "allow"
`, logPath)
	// proxyConfig's listener, mixed and with the check on.
	cfg := strings.Replace(proxyConfig("127.0.0.1:0", "5s", extra), `protocol = "http"`, "protocol = \"mixed\"\nsni = \"match\"", 1)
	p := startRustle(t, "-c", writeFile(t, "rustle.toml", cfg))
	p.waitStarted(t)
	url := "https://localhost:" + port + "/hello"

	if r := curlVia(t, "http://"+p.addr(), "-k", url); r.code != 0 || r.status != 200 || r.body != "hello from origin\n" {
		t.Fatalf("curl through CONNECT: exit %d status %d body %q stderr %q", r.code, r.status, r.body, r.stderr)
	}
	if r := curl(t, "--socks5-hostname", p.addr(), "-k", url); r.code != 0 || r.stdout != "hello from origin\n" {
		t.Fatalf("curl --socks5-hostname: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	sclient := func(servername string) bool {
		t.Helper()
		r := runCmd(t, "", openssl, "s_client", "-proxy", p.addr(), "-connect", "localhost:"+port, "-servername", servername)
		return strings.Contains(r.stdout, "BEGIN CERTIFICATE")
	}
	if !sclient("localhost") {
		t.Fatal("openssl s_client -servername localhost through CONNECT localhost: no handshake")
	}
	before := o.conns.Load()
	if sclient("other.example") {
		t.Error("openssl fronting other.example through CONNECT localhost got a handshake under match")
	}
	if sclient("www.blocked.example") {
		t.Error("openssl fronting www.blocked.example got a handshake past the rule on sni_hosts")
	}
	if n := o.conns.Load() - before; n != 0 {
		t.Errorf("the origin got %d connections for the fronted tunnels, want none", n)
	}

	type record struct {
		Protocol, Target, SNI, Reason, Rule string
		Status                              int
	}
	var recs []record
	for _, line := range waitLines(t, logPath, 5) {
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	target := "localhost:" + port
	want := map[record]bool{
		{Protocol: "connect", Target: target, SNI: "localhost", Rule: "all", Status: 200}:                                    true,
		{Protocol: "socks5", Target: target, SNI: "localhost", Rule: "all"}:                                                  true,
		{Protocol: "connect", Target: target, SNI: "other.example", Reason: "sni-mismatch", Rule: "all", Status: 200}:        true,
		{Protocol: "connect", Target: target, SNI: "www.blocked.example", Reason: "denied", Rule: "no-fronted", Status: 200}: true,
	}
	seen := 0
	for _, r := range recs {
		if want[r] {
			seen++
		}
	}
	// The s_client that got through and curl's CONNECT are alike.
	if seen != 5 {
		t.Errorf("access log records %+v, want the five of %+v", recs, want)
	}
}
