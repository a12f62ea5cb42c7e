//go:build linux

package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestAccessLogFormats runs the binary with the access log in Squid's
// format, the NCSA Combined format, and templates that append the
// upstream's address and the egress source to them, sends a request, a
// CONNECT tunnel, a SOCKS5 tunnel, a request without credentials and
// one a rule denies, and has goaccess (and, for Squid's lines,
// calamaris) read the log: five requests, all valid, counted by their
// Squid result codes, with the upstream's address rustle connected to
// and no password.
func TestAccessLogFormats(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, "127.0.0.1", false)
	echo := newEchoServer(t)
	const user, password = "alice", "s3cret-pw"
	for _, tt := range []struct {
		name, format, template string
		goaccess               []string
		calamaris              string // calamaris's input format; "" = not a Squid log
		appended               bool   // the lines end with the upstream and the source
	}{
		{"squid", "squid", "", proxytest.GoAccessSquidArgs, "squid", false},
		{"squid with upstream and source", "template", "{squid} {upstream} {source}", proxytest.GoAccessSquidArgs, "squid-extended", true},
		{"combined", "combined", "", []string{"--log-format=COMBINED"}, "", false},
		{"combined with upstream and source", "", "{combined} {upstream} {source}", []string{"--log-format=COMBINED"}, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logPath := filepath.Join(t.TempDir(), "access.log")
			format := ""
			if tt.format != "" { // "" leaves it to the template
				format = fmt.Sprintf("format = %q\n", tt.format)
			}
			cfg := fmt.Sprintf(`workers = 1

[[listen]]
name = "e2e"
address = "127.0.0.1:0"
protocol = "mixed"

[access_log]
enabled = true
%stemplate = %q
path = %q

[egress]
bind = ["127.0.0.1"]

[acl]
default = "allow"

[[acl.rules]]
name = "no-post"
action = "deny"
methods = ["POST"]

`, format, tt.template, logPath) + inlineUser(user, password)
			p := startRustle(t, "-c", writeFile(t, "rustle.toml", cfg))
			p.waitStarted(t)
			addr := p.addr()
			auth := basicAuth(user, password)

			if resp, body := rawExchange(t, addr, "GET", "GET "+o.URL+"/hello HTTP/1.1\r\nHost: x\r\n"+auth+"\r\n"); resp.StatusCode != http.StatusOK {
				t.Fatalf("GET: %s %q", resp.Status, body)
			}
			c, err := openTunnel(context.Background(), addr, echo.addr(), auth)
			if err != nil {
				t.Fatal(err)
			}
			err = echoOnce(c, []byte("through the tunnel\n"))
			c.Close()
			if err != nil {
				t.Fatalf("CONNECT tunnel: %v", err)
			}
			if err := socksConnect(t, addr, user, password, echo.addr()); err != nil {
				t.Fatalf("SOCKS5 tunnel: %v", err)
			}
			if resp, _ := rawExchange(t, addr, "GET", "GET "+o.URL+"/hello HTTP/1.1\r\nHost: x\r\n\r\n"); resp.StatusCode != http.StatusProxyAuthRequired {
				t.Fatalf("GET without credentials: %s", resp.Status)
			}
			post := "POST " + o.URL + "/hello HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n" + auth + "\r\n"
			if resp, _ := rawExchange(t, addr, "POST", post); resp.StatusCode != http.StatusForbidden {
				t.Fatalf("POST: %s", resp.Status)
			}

			lines := waitLines(t, logPath, 5)
			log := strings.Join(lines, "\n")
			if strings.Contains(log, password) || strings.Contains(log, base64.StdEncoding.EncodeToString([]byte(user+":"+password))) {
				t.Errorf("the access log holds the password:\n%s", log)
			}
			if got := proxytest.GoAccess(t, logPath, tt.goaccess...); got.Total != 5 || got.Valid != 5 || got.Failed != 0 {
				t.Errorf("goaccess counts %+v, want 5 requests, all valid\n%s", got, log)
			}
			if tt.calamaris != "" {
				rep := proxytest.Calamaris(t, logPath, tt.calamaris)
				want := map[string]int{"TCP_MISS": 1, "TCP_TUNNEL": 2, "TCP_DENIED": 2}
				if rep.Parsed != 5 || rep.Invalid != 0 || !maps.Equal(rep.Codes, want) {
					t.Errorf("calamaris parsed %d lines, %d invalid, codes %v; want 5, 0, %v\n%s", rep.Parsed, rep.Invalid, rep.Codes, want, log)
				}
			}
			// The served requests name the upstream rustle connected to:
			// the origin (GET) or the echo server (the tunnels), and the
			// refused ones none.
			upstreams := map[string]bool{o.URL[len("http://"):]: true, echo.addr(): true}
			served := 0
			for _, line := range lines {
				refused := strings.Contains(line, " TCP_DENIED/") || // Squid's
					strings.Contains(line, `" 403 `) || strings.Contains(line, `" 407 `) // NCSA's
				if tt.calamaris != "" {
					hier := strings.Fields(line)[8]
					if refused && hier != "HIER_NONE/-" || !refused && hier != "HIER_DIRECT/127.0.0.1" {
						t.Errorf("hierarchy %s in %q", hier, line)
					}
				}
				if !tt.appended {
					served++
					continue
				}
				f := strings.Fields(line)
				up, src := f[len(f)-2], f[len(f)-1]
				switch {
				case refused && (up != "-" || src != "-"):
					t.Errorf("a refusal with upstream %s and source %s: %q", up, src, line)
				case !refused && !upstreams[up]:
					t.Errorf("upstream %s is neither the origin nor the echo server: %q", up, line)
				case !refused:
					if h, port, err := net.SplitHostPort(src); err != nil || h != "127.0.0.1" || port == "0" {
						t.Errorf("source %s is not the egress address 127.0.0.1 and a port: %q", src, line)
					}
				}
				served++
			}
			if served != 5 {
				t.Errorf("%d lines checked, want 5", served)
			}
		})
	}
}

// waitLines waits, at most 10s, until the file at path holds n lines,
// and returns them; it fails the test if there are fewer, or more.
func waitLines(t *testing.T, path string, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		if len(b) == 0 {
			lines = nil
		}
		if len(lines) >= n || time.Now().After(deadline) {
			if len(lines) != n {
				t.Fatalf("%s holds %d lines, want %d:\n%s", path, len(lines), n, b)
			}
			return lines
		}
		time.Sleep(20 * time.Millisecond)
	}
}
