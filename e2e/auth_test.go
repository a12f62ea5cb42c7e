//go:build linux

package e2e

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/proxy"
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

// getStatus fetches /hello of o through the HTTP proxy at addr as user
// ("" = no credentials) with Go's Transport and returns the status; a 200
// must carry the origin's body.
func getStatus(t testing.TB, o *origin, addr, user, pass string) int {
	t.Helper()
	resp, body := newProxyClient(t, proxyURL(addr, user, pass), nil).fetch(t, "GET", o.URL+"/hello", nil)
	if resp.StatusCode == http.StatusOK && body != "hello from origin\n" {
		t.Errorf("through %s as %q: body %q", addr, user, body)
	}
	return resp.StatusCode
}

// socksConnect connects to target through the SOCKS5 proxy at addr,
// logging in as user, and says whether it got through (an echo of a line
// included).
func socksConnect(t testing.TB, addr, user, pass, target string) error {
	t.Helper()
	d, err := proxy.SOCKS5("tcp", addr, &proxy.Auth{User: user, Password: pass}, &net.Dialer{Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Dial("tcp", target)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return echoOnce(c, []byte("through socks5\n"))
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
		if got := getStatus(t, o, p.addr(), "quick", "start"); got != 200 {
			t.Errorf("with the -L credentials: status %d, want 200", got)
		}
		if got := getStatus(t, o, p.addr(), "", ""); got != 407 {
			t.Errorf("without credentials: status %d, want 407", got)
		}
	})

	// The case: a -L URL's user is that listener's, and a -L
	// listener without one authenticates nobody (it is on loopback, so
	// that is no open proxy). Three loopback addresses give the port-0
	// listeners names of their own.
	t.Run("users are per listener", func(t *testing.T) {
		p := startRustle(t, "-L", "http://alice:a@127.0.0.1:0", "-L", "http://bob:b@127.0.0.2:0", "-L", "http://127.0.0.3:0")
		p.waitStarted(t)
		if len(p.addrs) != 3 {
			t.Fatalf("listeners %q, want three", p.addrs)
		}
		for _, tc := range []struct {
			listener   int
			user, pass string
			want       int
		}{
			{0, "alice", "a", 200},
			{0, "bob", "b", 407},
			{0, "", "", 407},
			{1, "bob", "b", 200},
			{1, "alice", "a", 407},
			{2, "", "", 200},
		} {
			if got := getStatus(t, o, p.addrs[tc.listener], tc.user, tc.pass); got != tc.want {
				t.Errorf("listener %d (%s) as %q: status %d, want %d", tc.listener+1, p.addrs[tc.listener], tc.user, got, tc.want)
			}
		}
		if n := strings.Count(p.log.String(), "auth=none"); n != 1 {
			t.Errorf("%d listening lines say auth=none, want 1 (the third listener's):\n%s", n, p.log)
		}
	})

	t.Run("one name, a password per listener", func(t *testing.T) {
		echo := newEchoServer(t)
		p := startRustle(t, "-L", "socks5://alice:one@127.0.0.1:0", "-L", "http://alice:two@127.0.0.1:0")
		p.waitStarted(t)
		if err := socksConnect(t, p.addrs[0], "alice", "one", echo.addr()); err != nil {
			t.Errorf("SOCKS5 as alice:one on her socks5 listener: %v", err)
		}
		if err := socksConnect(t, p.addrs[0], "alice", "two", echo.addr()); err == nil {
			t.Errorf("SOCKS5 as alice:two, the http listener's password, got through")
		}
		if got := getStatus(t, o, p.addrs[1], "alice", "two"); got != 200 {
			t.Errorf("alice:two on her http listener: %d, want 200", got)
		}
		if got := getStatus(t, o, p.addrs[1], "alice", "one"); got != 407 {
			t.Errorf("alice:one, the socks5 listener's password, on the http listener: %d, want 407", got)
		}
	})

	t.Run("a -L user is no other listener's", func(t *testing.T) {
		// Beside a listener with a user, one on every address without
		// userinfo is an open proxy: refused, as with no users at all.
		r := runRustle(t, "", "check", "-L", "http://alice:a@127.0.0.1:0", "-L", "http://0.0.0.0:3128")
		if r.code != 1 || !strings.Contains(r.stderr, "listen[1]: open proxy refused") {
			t.Errorf("rustle check: exit %d, stderr %q; want 1 and listen[1] refused as an open proxy", r.code, r.stderr)
		}
	})

	t.Run("with a file", func(t *testing.T) {
		// The file has no users: its listener authenticates nobody, and
		// the flag's user is the flag listener's alone.
		path := writeFile(t, "rustle.toml", proxyConfig("127.0.0.1:0", "5s", ""))
		p := startRustle(t, "-c", path, "-L", "http://flag:user@127.0.0.1:0")
		p.waitStarted(t)
		if len(p.addrs) != 2 || p.addrs[0] == p.addrs[1] {
			t.Fatalf("listeners %q, want two: the file's and the flag's", p.addrs)
		}
		if got := getStatus(t, o, p.addrs[0], "", ""); got != 200 {
			t.Errorf("the file's listener without credentials: %d, want 200", got)
		}
		if got := getStatus(t, o, p.addrs[1], "flag", "user"); got != 200 {
			t.Errorf("the flag's listener with its user: %d, want 200", got)
		}
		if got := getStatus(t, o, p.addrs[1], "", ""); got != 407 {
			t.Errorf("the flag's listener without credentials: %d, want 407", got)
		}
	})

	t.Run("with a file of users", func(t *testing.T) {
		// A -L listener without userinfo takes the file's users; one with
		// userinfo takes its user and none of the file's.
		path := writeFile(t, "rustle.toml", proxyConfig("127.0.0.1:0", "5s", inlineUser("filer", "f")))
		p := startRustle(t, "-c", path, "-L", "http://127.0.0.2:0", "-L", "http://flag:user@127.0.0.3:0")
		p.waitStarted(t)
		if len(p.addrs) != 3 {
			t.Fatalf("listeners %q, want three: the file's and two flags'", p.addrs)
		}
		for _, tc := range []struct {
			listener   int
			user, pass string
			want       int
		}{
			{0, "filer", "f", 200},
			{0, "flag", "user", 407},
			{1, "filer", "f", 200},
			{1, "", "", 407},
			{1, "flag", "user", 407},
			{2, "flag", "user", 200},
			{2, "filer", "f", 407},
		} {
			if got := getStatus(t, o, p.addrs[tc.listener], tc.user, tc.pass); got != tc.want {
				t.Errorf("listener %d (%s) as %q: status %d, want %d", tc.listener+1, p.addrs[tc.listener], tc.user, got, tc.want)
			}
		}
	})
}

// TestListenerUsers checks the listener key users in a file, with the
// built binary and real clients: on a listener that names alice, bob's
// right password is refused over HTTP (Go's Transport and curl), SOCKS5
// (username/password), HTTPS (HTTP/1.1 and HTTP/2) and both sides of a
// mixed port, while a listener without the key takes both; and a name
// that is no user is refused at load with its line.
func TestListenerUsers(t *testing.T) {
	t.Parallel()
	o := newOrigin(t, "127.0.0.1", false)
	echo := newEchoServer(t)
	certDir := rustleFiles(t, "cert")
	roots := x509.NewCertPool()
	roots.AddCert(readCertPEM(t, filepath.Join(certDir, "ca.pem")))
	config := func(users string) string {
		return fmt.Sprintf(`workers = 2

[auth]
realm = %q

[[auth.users]]
name = "alice"
password = "a-pw"

[[auth.users]]
name = "bob"
password = "b-pw"

[[listen]]
name = "http"
address = "127.0.0.1:0"
users = %s

[[listen]]
name = "socks"
address = "127.0.0.1:0"
protocol = "socks5"
users = ["alice"]

[[listen]]
name = "https"
address = "127.0.0.1:0"
protocol = "https"
users = ["alice"]
tls = { cert = %q, key = %q }

[[listen]]
name = "mixed"
address = "127.0.0.1:0"
protocol = "mixed"
users = ["alice"]

[[listen]]
name = "everyone"
address = "127.0.0.1:0"
`, realm, users, filepath.Join(certDir, "server.pem"), filepath.Join(certDir, "server.key"))
	}

	t.Run("unknown user", func(t *testing.T) {
		path := writeFile(t, "rustle.toml", config(`["alice", "mallory"]`))
		r := runRustle(t, "", "check", "-c", path)
		want := path + `:17: listen[0].users[1]: user "mallory" is neither in [[auth.users]] nor in an auth.htpasswd file`
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("rustle check: exit %d, stderr %q; want 1 and %q", r.code, r.stderr, want)
		}
	})

	p := startRustle(t, "-c", writeFile(t, "rustle.toml", config(`["alice"]`)))
	p.waitStarted(t)
	if len(p.addrs) != 5 {
		t.Fatalf("listeners %q, want five", p.addrs)
	}
	httpAddr, socksAddr, httpsAddr, mixedAddr, everyone := p.addrs[0], p.addrs[1], p.addrs[2], p.addrs[3], p.addrs[4]
	target := o.URL + "/hello"

	// tlsGet sends a GET of target over TLS to the https listener, with
	// ALPN proto, and returns the status.
	tlsGet := func(t *testing.T, proto, user, pass string) int {
		t.Helper()
		c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", httpsAddr,
			&tls.Config{RootCAs: roots, ServerName: "127.0.0.1", NextProtos: []string{proto}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got := c.ConnectionState().NegotiatedProtocol; got != proto {
			t.Fatalf("ALPN %q, want %q", got, proto)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		req, _ := http.NewRequest("GET", target, nil)
		req.Header.Set("Proxy-Authorization", strings.TrimSuffix(strings.TrimPrefix(basicAuth(user, pass), "Proxy-Authorization: "), "\r\n"))
		var resp *http.Response
		if proto == "h2" {
			cc, err := (&http2.Transport{}).NewClientConn(c)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			if resp, err = cc.RoundTrip(req); err != nil {
				t.Fatalf("h2 GET: %v", err)
			}
		} else {
			if err := req.WriteProxy(c); err != nil {
				t.Fatal(err)
			}
			if resp, err = http.ReadResponse(bufio.NewReader(c), req); err != nil {
				t.Fatalf("GET over TLS: %v", err)
			}
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusOK && string(body) != "hello from origin\n" {
			t.Errorf("%s as %s: body %q", proto, user, body)
		}
		if resp.StatusCode == http.StatusProxyAuthRequired {
			checkChallenge(t, resp, string(body))
		}
		return resp.StatusCode
	}

	for _, tc := range []struct {
		name string
		try  func(t *testing.T, user, pass string) bool // got through
		bob  bool                                       // bob gets through
	}{
		{"http, Go", func(t *testing.T, user, pass string) bool { return getStatus(t, o, httpAddr, user, pass) == 200 }, false},
		{"http, curl", func(t *testing.T, user, pass string) bool {
			needCurl(t)
			r := curlVia(t, proxyURL(httpAddr, user, pass).String(), target)
			return r.status == 200
		}, false},
		{"socks5", func(t *testing.T, user, pass string) bool {
			return socksConnect(t, socksAddr, user, pass, echo.addr()) == nil
		}, false},
		{"https, HTTP/1.1", func(t *testing.T, user, pass string) bool { return tlsGet(t, "http/1.1", user, pass) == 200 }, false},
		{"https, HTTP/2", func(t *testing.T, user, pass string) bool { return tlsGet(t, "h2", user, pass) == 200 }, false},
		{"mixed, http", func(t *testing.T, user, pass string) bool { return getStatus(t, o, mixedAddr, user, pass) == 200 }, false},
		{"mixed, socks5", func(t *testing.T, user, pass string) bool {
			return socksConnect(t, mixedAddr, user, pass, echo.addr()) == nil
		}, false},
		{"a listener without users", func(t *testing.T, user, pass string) bool { return getStatus(t, o, everyone, user, pass) == 200 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.try(t, "alice", "a-pw") {
				t.Errorf("alice, a listed user, was refused")
			}
			if got := tc.try(t, "bob", "b-pw"); got != tc.bob {
				t.Errorf("bob with his right password: got through %v, want %v", got, tc.bob)
			}
		})
	}
}
