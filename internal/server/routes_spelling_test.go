package server

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// loopbackSpellings are inet_aton spellings of 127.0.0.1 that
// netip.ParseAddr does not read.
var loopbackSpellings = []string{
	"127.1", "2130706433", "0x7f000001", "0177.0.0.1", "0x7f.0.0.1",
	"127.0.0.1.", "017700000001", "127.000.000.001",
}

// rawProxyGet sends a GET for http://host:port/ (the target as written,
// no client library normalising it) to the HTTP proxy at proxy and
// returns the answer's status and body.
func rawProxyGet(t *testing.T, proxy, method, hostPort string) (int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	target := "http://" + hostPort + "/"
	if method == http.MethodConnect {
		target = hostPort
	}
	if _, err := io.WriteString(c, method+" "+target+" HTTP/1.1\r\nHost: "+hostPort+"\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	if method == http.MethodConnect && resp.StatusCode == http.StatusOK {
		return resp.StatusCode, ""
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// socksConnect asks the SOCKS5 proxy at proxy (no authentication) to
// CONNECT to the domain host at port and returns the reply code.
func socksConnect(t *testing.T, proxy, host string, port uint16) byte {
	t.Helper()
	c, err := net.DialTimeout("tcp", proxy, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	req := []byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}
	req = append(append(req, host...), byte(port>>8), byte(port))
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	var rep [4]byte
	if _, err := io.ReadFull(c, rep[:]); err != nil {
		t.Fatalf("SOCKS5 CONNECT %s: %v", host, err)
	}
	return rep[3]
}

// TestRoutesAddressSpellings checks that every inet_aton spelling of a
// loopback address is an address to the guard on every path: sent to
// Squid as an http parent, to Dante as a socks5h parent, and dialed
// direct, a GET, a CONNECT and a SOCKS5 CONNECT to the origin on
// loopback spelled so are refused (403 naming the private address,
// SOCKS5 reply 2), and never reach the origin.
func TestRoutesAddressSpellings(t *testing.T) {
	var reached int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached++
		io.WriteString(w, "origin")
	}))
	t.Cleanup(origin.Close)
	_, portStr, _ := net.SplitHostPort(origin.Listener.Addr().String())
	var port uint16
	for _, c := range portStr {
		port = port*10 + uint16(c-'0')
	}
	squid := proxytest.StartSquid(t)
	dante := proxytest.StartDante(t)
	parents := []struct {
		name string
		url  string // "" = direct
	}{
		{"squid http parent", "http://" + proxytest.SquidUser + ":" + proxytest.SquidPassword + "@" + squid.Addr},
		{"dante socks5h parent", "socks5h://" + dante.Addr},
		{"direct", ""},
	}
	for _, p := range parents {
		t.Run(p.name, func(t *testing.T) {
			addrs, access, _ := startRouted(t, func(c *config.Config) {
				if p.url != "" {
					c.Parents = []config.Parent{{Name: "p", URL: p.url}}
					c.Routes = []config.Route{{Name: "all", Via: config.Strings{"p"}}}
				}
			})
			// The origin is reachable through the path when spelled as a
			// name the parent (or rustle) resolves to it: the path works.
			for _, host := range loopbackSpellings {
				hp := host + ":" + portStr
				t.Run(host, func(t *testing.T) {
					for _, method := range []string{http.MethodGet, http.MethodConnect} {
						status, body := rawProxyGet(t, addrs["plain"], method, hp)
						if status != http.StatusForbidden || !strings.Contains(body, "is a private or local address") {
							t.Errorf("%s %s: %d %q, want 403 naming a private address\nsquid: %s\ndante: %s", method, hp, status, body, squid.Output(), dante.Output())
						}
					}
					if rep := socksConnect(t, addrs["socks"], host, port); rep != 2 {
						t.Errorf("SOCKS5 CONNECT %s: reply %d, want 2 (not allowed)", hp, rep)
					}
				})
			}
			n := len(loopbackSpellings) * 3
			proxytest.WaitFor(t, "the access log records", func() bool { return len(routeRecords(t, access)) >= n })
			for _, r := range routeRecords(t, access) {
				if r.Reason != "forbidden" {
					t.Errorf("record %+v: want reason forbidden", r)
				}
			}
		})
	}
	if reached != 0 {
		t.Errorf("the origin was reached %d times", reached)
	}
}
