//go:build linux

package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// realm is the realm the auth tests configure.
const realm = "e2e realm"

// hashPassword runs `rustle passwd user` with password on stdin and
// returns the htpasswd line it prints.
func hashPassword(t testing.TB, user, password string) string {
	t.Helper()
	r := runRustle(t, password+"\n", "passwd", user)
	line := strings.TrimSuffix(r.stdout, "\n")
	if r.code != 0 || strings.Contains(line, "\n") || !strings.HasPrefix(line, user+":$2") {
		t.Fatalf("rustle passwd %s: exit %d stdout %q stderr %q; want one line %s:$2…", user, r.code, r.stdout, r.stderr, user)
	}
	return line
}

// checkChallenge checks a 407 response.
func checkChallenge(t testing.TB, resp *http.Response, body string) {
	t.Helper()
	if resp.StatusCode != http.StatusProxyAuthRequired {
		t.Fatalf("status %s, want 407; body %q", resp.Status, body)
	}
	want := `Basic realm="` + realm + `"`
	if got := resp.Header.Get("Proxy-Authenticate"); !strings.HasPrefix(got, want) {
		t.Errorf("Proxy-Authenticate %q, want %s", got, want)
	}
	checkOneLine(t, body)
}

func TestAuth(t *testing.T) {
	t.Parallel()
	aliceLine := hashPassword(t, "alice", "hunter2 with spaces")
	carolHash := strings.TrimPrefix(hashPassword(t, "carol", "c4rol"), "carol:")
	htpasswd := writeFile(t, "users.htpasswd", "# made by rustle passwd\n"+aliceLine+"\n")
	authTable := fmt.Sprintf("[auth]\nrealm = %q\n", realm)

	sources := []struct {
		name       string
		extra      string
		user, pass string
	}{
		{"htpasswd file", authTable + fmt.Sprintf("htpasswd = [%q]\n", htpasswd), "alice", "hunter2 with spaces"},
		{"inline password", authTable + inlineUser("bob", "s3cret"), "bob", "s3cret"},
		{"inline bcrypt", authTable + fmt.Sprintf("[[auth.users]]\nname = \"carol\"\nbcrypt = %q\n", carolHash), "carol", "c4rol"},
	}
	plain := newOrigin(t, "127.0.0.1", false)
	secure := newOrigin(t, "127.0.0.1", true)
	target := secure.hostPort()

	for _, src := range sources {
		t.Run(src.name, func(t *testing.T) {
			p := startProxy(t, "127.0.0.1:0", src.extra)
			good := proxyURL(p.addr(), src.user, src.pass)
			wrongPass := proxyURL(p.addr(), src.user, src.pass+"x")
			unknown := proxyURL(p.addr(), "mallory", src.pass)

			get := func(t *testing.T, c *proxyClient) (*http.Response, string) {
				t.Helper()
				return c.fetch(t, "GET", plain.URL+"/hello", nil)
			}
			t.Run("GET without credentials", func(t *testing.T) {
				before := plain.conns.Load()
				resp, body := get(t, newProxyClient(t, proxyURL(p.addr(), "", ""), nil))
				checkChallenge(t, resp, body)
				if plain.conns.Load() != before {
					t.Errorf("the origin was contacted for an unauthenticated request")
				}
			})
			t.Run("GET wrong password", func(t *testing.T) {
				resp, body := get(t, newProxyClient(t, wrongPass, nil))
				checkChallenge(t, resp, body)
			})
			t.Run("GET unknown user", func(t *testing.T) {
				resp, body := get(t, newProxyClient(t, unknown, nil))
				checkChallenge(t, resp, body)
			})
			t.Run("GET right credentials", func(t *testing.T) {
				resp, body := get(t, newProxyClient(t, good, nil))
				if resp.StatusCode != 200 || body != "hello from origin\n" {
					t.Fatalf("status %s body %q", resp.Status, body)
				}
			})
			t.Run("GET wrong password after a right one", func(t *testing.T) {
				// The verdict cache must not turn a wrong password right.
				resp, body := get(t, newProxyClient(t, wrongPass, nil))
				checkChallenge(t, resp, body)
			})
			t.Run("CONNECT", func(t *testing.T) {
				cases := []struct {
					name   string
					header string
					want   int
				}{
					{"no credentials", "", 407},
					{"wrong password", basicAuth(src.user, src.pass+"x"), 407},
					{"unknown user", basicAuth("mallory", src.pass), 407},
					{"not Basic", "Proxy-Authorization: Bearer abc\r\n", 407},
					{"right credentials", basicAuth(src.user, src.pass), 200},
				}
				for _, tc := range cases {
					t.Run(tc.name, func(t *testing.T) {
						resp, body := rawExchange(t, p.addr(), "CONNECT",
							"CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n"+tc.header+"\r\n")
						if tc.want == 407 {
							checkChallenge(t, resp, body)
						} else if resp.StatusCode != tc.want {
							t.Fatalf("status %s, want %d", resp.Status, tc.want)
						}
					})
				}
			})
			t.Run("curl", func(t *testing.T) {
				needCurl(t)
				cacert := secure.certFile(t)
				for _, u := range []string{plain.URL + "/hello", secure.URL + "/hello"} {
					r := curlVia(t, good.String(), "--cacert", cacert, u)
					if r.code != 0 || r.status != 200 || r.body != "hello from origin\n" {
						t.Errorf("curl %s: exit %d status %d body %q stderr %q", u, r.code, r.status, r.body, r.stderr)
					}
				}
				r := curlVia(t, wrongPass.String(), plain.URL+"/hello")
				if r.status != 407 {
					t.Errorf("curl http:// with a wrong password: status %d, want 407", r.status)
				}
				r2 := curl(t, "-x", wrongPass.String(), "--cacert", cacert, "-o", "/dev/null", "-w", "%{http_connect}", secure.URL+"/hello")
				if r2.code == 0 || strings.TrimSpace(r2.stdout) != "407" {
					t.Errorf("curl https:// with a wrong password: exit %d, CONNECT status %q, want a failure with 407", r2.code, r2.stdout)
				}
			})
		})
	}
}

func TestListenFlag(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, "127.0.0.1", false)

	t.Run("quick start", func(t *testing.T) {
		p := startRustle(t, "-L", "http://quick:start@127.0.0.1:0")
		p.waitStarted(t)
		if strings.Contains(p.log.String(), "quick:start") {
			t.Errorf("the log repeats the password from -L:\n%s", p.log.String())
		}
		resp, body := newProxyClient(t, proxyURL(p.addr(), "quick", "start"), nil).fetch(t, "GET", o.URL+"/hello", nil)
		if resp.StatusCode != 200 || body != "hello from origin\n" {
			t.Fatalf("with the -L credentials: status %s body %q", resp.Status, body)
		}
		resp, body = newProxyClient(t, proxyURL(p.addr(), "", ""), nil).fetch(t, "GET", o.URL+"/hello", nil)
		if resp.StatusCode != 407 {
			t.Fatalf("without credentials: status %s body %q, want 407", resp.Status, body)
		}
	})

	t.Run("with a file", func(t *testing.T) {
		path := writeFile(t, "rustle.toml", proxyConfig("127.0.0.1:0", "5s", ""))
		p := startRustle(t, "-c", path, "-L", "http://flag:user@127.0.0.1:0")
		p.waitStarted(t)
		if len(p.addrs) != 2 || p.addrs[0] == p.addrs[1] {
			t.Fatalf("listeners %q, want two: the file's and the flag's", p.addrs)
		}
		for _, addr := range p.addrs {
			resp, body := newProxyClient(t, proxyURL(addr, "flag", "user"), nil).fetch(t, "GET", o.URL+"/hello", nil)
			if resp.StatusCode != 200 || body != "hello from origin\n" {
				t.Errorf("listener %s with the -L user: status %s body %q", addr, resp.Status, body)
			}
		}
	})
}
