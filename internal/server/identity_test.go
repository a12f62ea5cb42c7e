package server

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/net/http2"
	"golang.org/x/net/proxy"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// This file drives the identity providers end to end: a real slapd and
// a JWKS origin the test runs, a rustle with an LDAP and a JWT provider
// beside a local user, and curl, Go's transport and a SOCKS5 client.

const githubIssuer = "https://token.actions.githubusercontent.com"

// identityRig is a running server whose listeners "plain" (http),
// "tls" (https, HTTP/2 offered) and "socks" (socks5) take the local user zoe (password "zoe-pw"), the
// directory's users and the issuer's tokens; access rules let the
// directory's developers (group devs) anywhere, tokens of
// octo-org/app on main (group ci-main) to the origin's port only, and
// zoe and the user o/a (a token of the issuer "short") anywhere.
type identityRig struct {
	addr   map[string]string
	access *logBuffer
	log    *logBuffer
	dir    *proxytest.Slapd
	key    *proxytest.Signer
	jwks   *proxytest.JWKS
	origin string         // "http://127.0.0.1:PORT"
	other  string         // another origin, on a port the ci rule leaves out
	roots  *x509.CertPool // trusts the "tls" listener's certificate
}

func startIdentityRig(t *testing.T) *identityRig {
	t.Helper()
	r := &identityRig{access: &logBuffer{}, log: &logBuffer{}}
	r.dir = proxytest.StartSlapd(t, proxytest.DirectoryLDIF)
	r.key = proxytest.NewECSigner(t, "k1")
	r.jwks = proxytest.StartJWKS(t, r.key)
	port := mixedOrigin(t)
	r.origin = fmt.Sprintf("http://127.0.0.1:%d", port)
	r.other = fmt.Sprintf("http://127.0.0.1:%d", mixedOrigin(t))

	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.0/8"}
	cfg.Auth.Users = []config.User{{Name: "zoe", Password: "zoe-pw"}}
	cfg.Auth.Providers = []config.Provider{
		{Name: "corp", Type: config.ProviderLDAP, URL: r.dir.URL, InsecurePlaintext: true,
			BindDN: "cn=svc,dc=example,dc=org", BindPassword: "svc-pw", BaseDN: "ou=people,dc=example,dc=org",
			UserFilter: "(&(objectClass=inetOrgPerson)(uid={user})(!(employeeType=disabled)))", NameAttribute: "uid",
			GroupAttribute: "memberOf",
			Groups:         map[string][]string{"devs": {"cn=developers,ou=groups,dc=example,dc=org"}},
			Timeout:        config.Duration{Duration: 2 * time.Second}},
		{Name: "actions", Type: config.ProviderJWT, Issuer: githubIssuer, Audience: "rustle", JWKSURL: r.jwks.URL,
			InsecurePlaintext: true, UserClaim: "repository", GroupClaim: "{repository}@{ref}",
			Groups: map[string][]string{"ci-main": {"octo-org/app@refs/heads/main"}}},
		// An issuer with a short name, whose tokens fit a SOCKS5 password.
		{Name: "short", Type: config.ProviderJWT, Issuer: "https://i.example", Audience: "r", JWKSURL: r.jwks.URL,
			InsecurePlaintext: true, UserClaim: "repository"},
	}
	cfg.ACL.Rules = []config.ACLRule{
		{Name: "devs", Action: "allow", Criteria: config.Criteria{Who: config.Who{Groups: []string{"devs"}}}},
		{Name: "ci", Action: "allow", Criteria: config.Criteria{Who: config.Who{Groups: []string{"ci-main"}}, Ports: []string{strconv.Itoa(port)}}},
		{Name: "zoe", Action: "allow", Criteria: config.Criteria{Who: config.Who{Users: []string{"zoe"}}}},
		{Name: "short", Action: "allow", Criteria: config.Criteria{Who: config.Who{Users: []string{"o/a"}}}},
	}
	tl, roots := proxyCerts(t)
	r.roots = roots
	cfg.Listen = []config.Listener{
		{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"},
		{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl},
		{Name: "socks", Address: "127.0.0.1:0", Protocol: "socks5"},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	_, r.addr = startLogged(t, cfg, logger, r.access)
	return r
}

// token mints a GitHub Actions-shaped token for repository and ref.
func (r *identityRig) token(t *testing.T, repo, ref string, mod ...func(jwt.MapClaims)) string {
	t.Helper()
	now := time.Now()
	c := jwt.MapClaims{"iss": githubIssuer, "aud": "rustle", "sub": "repo:" + repo + ":ref:" + ref,
		"repository": repo, "ref": ref, "iat": now.Unix(), "exp": now.Add(10 * time.Minute).Unix()}
	for _, m := range mod {
		m(c)
	}
	return r.key.Mint(t, c)
}

// curlStatus runs curl through the proxy with args and returns the
// status it got: the origin's, or the proxy's refusal.
func curlStatus(t *testing.T, args ...string) int {
	t.Helper()
	path := proxytest.RequireTool(t, "curl", "curl")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	args = append([]string{"-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10", "--noproxy", ""}, args...)
	out, err := exec.CommandContext(ctx, path, args...).Output()
	code, cerr := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil && code == 0 || cerr != nil {
		t.Fatalf("curl %q: %v %q", args, err, out)
	}
	return code
}

// records returns the access log records of one listener.
func (r *identityRig) records(t *testing.T, listener string) []conformRecord {
	t.Helper()
	var got []conformRecord
	for line := range strings.Lines(r.access.String()) {
		var rec conformRecord
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("access log line %q: %v", line, err)
		}
		if rec.Listener == listener {
			got = append(got, rec)
		}
	}
	return got
}

// TestIdentityCurl checks, with curl on the plain port, each kind of
// identity: directory users and their groups in access rules, a
// disabled user, a wrong password, bearer tokens (valid, expired, wrong
// issuer or audience, unknown key id) in Proxy-Authorization and as a
// Basic password, the token's claim group in access rules, and the local
// user beside them; and that neither a password nor a token reaches the
// logs.
func TestIdentityCurl(t *testing.T) {
	r := startIdentityRig(t)
	proxyURL := "http://" + r.addr["plain"]
	main := r.token(t, "octo-org/app", "refs/heads/main")
	dev := r.token(t, "octo-org/app", "refs/heads/dev")
	expired := r.token(t, "octo-org/app", "refs/heads/main", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() })
	wrongIss := r.token(t, "octo-org/app", "refs/heads/main", func(c jwt.MapClaims) { c["iss"] = "https://evil.example" })
	wrongAud := r.token(t, "octo-org/app", "refs/heads/main", func(c jwt.MapClaims) { c["aud"] = "other" })
	foreign := proxytest.NewECSigner(t, "k9").Mint(t, jwt.MapClaims{"iss": githubIssuer, "aud": "rustle",
		"repository": "octo-org/app", "ref": "refs/heads/main", "exp": time.Now().Add(time.Minute).Unix()})
	bearer := func(tok string) []string { return []string{"--proxy-header", "Proxy-Authorization: Bearer " + tok} }
	user := func(u, p string) []string { return []string{"--proxy-user", u + ":" + p} }
	tests := []struct {
		name   string
		auth   []string
		target string // "" = the origin
		want   int
		logged string // the access log's user
		reason string
	}{
		{"directory user in devs", user("alice", "alice-pw"), r.other, 200, "alice", ""},
		{"directory user, the name in another case", user("ALICE", "alice-pw"), r.other, 200, "alice", ""},
		{"directory user outside devs", user("bob", "bob-pw"), "", 403, "bob", "denied"},
		{"disabled directory user", user("carol", "carol-pw"), "", 407, "carol", "auth-failed"},
		{"wrong password", user("alice", "nope"), "", 407, "alice", "auth-failed"},
		{"local user", user("zoe", "zoe-pw"), r.other, 200, "zoe", ""},
		{"token of main", bearer(main), "", 200, "octo-org/app", ""},
		{"token of main, another port", bearer(main), r.other, 403, "octo-org/app", "denied"},
		{"token of another branch", bearer(dev), "", 403, "octo-org/app", "denied"},
		{"token as a Basic password", user("x-access-token", main), "", 200, "octo-org/app", ""},
		{"expired token", bearer(expired), "", 407, "", "auth-failed"},
		{"token of another issuer", bearer(wrongIss), "", 407, "", "auth-failed"},
		{"token for another audience", bearer(wrongAud), "", 407, "", "auth-failed"},
		{"token of an unknown key", bearer(foreign), "", 407, "", "auth-failed"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target := tt.target
			if target == "" {
				target = r.origin
			}
			args := append(append([]string{"-x", proxyURL}, tt.auth...), target+"/curl")
			if got := curlStatus(t, args...); got != tt.want {
				t.Errorf("status %d, want %d", got, tt.want)
			}
			var recs []conformRecord
			waitFor(t, "the access log record", func() bool { recs = r.records(t, "plain"); return len(recs) > i })
			if rec := recs[i]; rec.User != tt.logged || rec.Reason != tt.reason || rec.Status != tt.want {
				t.Errorf("record %+v, want user %q, status %d, reason %q", rec, tt.logged, tt.want, tt.reason)
			}
		})
	}
	for _, secret := range []string{"alice-pw", "bob-pw", "carol-pw", "zoe-pw", main, dev, expired, "svc-pw"} {
		if strings.Contains(r.access.String(), secret) || strings.Contains(r.log.String(), secret) {
			t.Errorf("a password or token is in a log")
		}
	}
}

// TestIdentityGoAndSOCKS checks the same identities with Go's transport
// (Basic with a directory password or a token as the password, a
// Bearer header) and over SOCKS5 (a directory password, a token as the
// password: SOCKS5 passwords are at most 255 bytes, so a short one).
func TestIdentityGoAndSOCKS(t *testing.T) {
	r := startIdentityRig(t)
	get := func(t *testing.T, proxyUser *url.Userinfo, header string) int {
		t.Helper()
		u := &url.URL{Scheme: "http", Host: r.addr["plain"], User: proxyUser}
		client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u)}, Timeout: 10 * time.Second}
		req, err := http.NewRequest("GET", r.origin+"/go", nil)
		if err != nil {
			t.Fatal(err)
		}
		if header != "" {
			req.Header.Set("Proxy-Authorization", header)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("Go's transport: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	main := r.token(t, "octo-org/app", "refs/heads/main")
	if got := get(t, url.UserPassword("alice", "alice-pw"), ""); got != 200 {
		t.Errorf("Go, directory user: %d", got)
	}
	if got := get(t, url.UserPassword("x", main), ""); got != 200 {
		t.Errorf("Go, token as the password: %d", got)
	}
	if got := get(t, nil, "Bearer "+main); got != 200 {
		t.Errorf("Go, Bearer header: %d", got)
	}
	if got := get(t, url.UserPassword("alice", "nope"), ""); got != 407 {
		t.Errorf("Go, wrong password: %d", got)
	}

	short := r.key.Mint(t, jwt.MapClaims{"iss": "https://i.example", "aud": "r", "repository": "o/a",
		"exp": time.Now().Add(5 * time.Minute).Unix()})
	if len(short) > 255 {
		t.Fatalf("the SOCKS5 token has %d bytes, more than a SOCKS5 password holds", len(short))
	}
	target := strings.TrimPrefix(r.origin, "http://")
	for _, tt := range []struct {
		name, user, pass string
		ok               bool
	}{
		{"directory user", "alice", "alice-pw", true},
		{"directory user, wrong password", "alice", "nope", false},
		{"token as the password", "x", short, true},
		{"disabled user", "carol", "carol-pw", false},
	} {
		t.Run("SOCKS5 "+tt.name, func(t *testing.T) {
			d, err := proxy.SOCKS5("tcp", r.addr["socks"], &proxy.Auth{User: tt.user, Password: tt.pass}, proxy.Direct)
			if err != nil {
				t.Fatal(err)
			}
			c, err := d.Dial("tcp", target)
			if (err == nil) != tt.ok {
				t.Fatalf("dial: %v, want ok %v", err, tt.ok)
			}
			if err != nil {
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "GET /socks HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", target)
			body, _ := io.ReadAll(c)
			if !strings.Contains(string(body), "origin says /socks") {
				t.Errorf("through the tunnel: %q", body)
			}
		})
	}
	var users []string
	waitFor(t, "the SOCKS5 records", func() bool {
		users = users[:0]
		for _, rec := range r.records(t, "socks") {
			if rec.Reason == "" {
				users = append(users, rec.User)
			}
		}
		return len(users) >= 2
	})
	if !slices.Contains(users, "alice") || !slices.Contains(users, "o/a") {
		t.Errorf("SOCKS5 tunnels logged as %q, want alice and o/a", users)
	}
}

// TestIdentityH2 checks a bearer token and a directory user over HTTP/2
// (the https listener, h2 by ALPN), a refused token's 407 with its
// challenge, and the 503 of credentials the stopped directory cannot
// check.
func TestIdentityH2(t *testing.T) {
	r := startIdentityRig(t)
	tc, err := tls.Dial("tcp", r.addr["tls"], &tls.Config{RootCAs: r.roots, ServerName: "127.0.0.1", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Fatalf("ALPN: %q, want h2", p)
	}
	cc, err := (&http2.Transport{AllowHTTP: true}).NewClientConn(tc)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	get := func(authz, target string) *http.Response {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", target+"/h2", nil)
		req.Header.Set("Proxy-Authorization", authz)
		resp, err := cc.RoundTrip(req)
		if err != nil {
			t.Fatalf("GET over h2: %v", err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	main := r.token(t, "octo-org/app", "refs/heads/main")
	expired := r.token(t, "octo-org/app", "refs/heads/main", func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Minute).Unix() })
	for _, tt := range []struct {
		name, authz, target string
		want                int
	}{
		{"token of main", "Bearer " + main, r.origin, 200},
		{"token of main, another port", "Bearer " + main, r.other, 403},
		{"expired token", "Bearer " + expired, r.origin, 407},
		{"directory user", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:alice-pw")), r.other, 200},
	} {
		if resp := get(tt.authz, tt.target); resp.StatusCode != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, resp.StatusCode, tt.want)
		} else if tt.want == 407 && resp.Header.Get("Proxy-Authenticate") == "" {
			t.Errorf("%s: a 407 without a challenge", tt.name)
		}
	}
	r.dir.Stop()
	if resp := get("Basic "+base64.StdEncoding.EncodeToString([]byte("bob:bob-pw")), r.origin); resp.StatusCode != 503 {
		t.Errorf("a directory user with the directory stopped: %d, want 503", resp.StatusCode)
	}
}

// TestIdentityDirectoryDown stops the directory mid-run: a user verified
// before goes on (the cached verdict), others are answered 503 with the
// reason auth-unavailable (never let in, never a 407), with one warning
// in the log (naming the provider once) and no cool-down; once the directory is back they get in.
func TestIdentityDirectoryDown(t *testing.T) {
	r := startIdentityRig(t)
	proxyURL := "http://" + r.addr["plain"]
	status := func(user, pass string) int {
		return curlStatus(t, "-x", proxyURL, "--proxy-user", user+":"+pass, r.other+"/curl")
	}
	if got := status("alice", "alice-pw"); got != 200 {
		t.Fatalf("alice before the stop: %d", got)
	}
	r.dir.Stop()
	if got := status("alice", "alice-pw"); got != 200 {
		t.Errorf("alice, verified before the stop: %d, want 200 from the cache", got)
	}
	for i := range 12 { // more than limits.auth_failures: none is a failure
		if got := status("bob", "bob-pw"); got != 503 {
			t.Fatalf("bob with the directory stopped, try %d: %d, want 503", i+1, got)
		}
	}
	if got := status("zoe", "zoe-pw"); got != 200 {
		t.Errorf("the local user with the directory stopped: %d", got)
	}
	waitFor(t, "an auth-unavailable record", func() bool {
		for _, rec := range r.records(t, "plain") {
			if rec.Reason == "auth-unavailable" && rec.Status == 503 && rec.User == "bob" {
				return true
			}
		}
		return false
	})
	if n := strings.Count(r.log.String(), "auth: ldap: unavailable"); n != 1 {
		t.Errorf("%d warnings of the directory being unavailable, want 1", n)
	}
	for line := range strings.Lines(r.log.String()) {
		if strings.Contains(line, "auth: ldap: unavailable") && strings.Count(line, "provider=") != 1 {
			t.Errorf("the warning names the provider %d times, want once: %s", strings.Count(line, "provider="), line)
		}
	}
	r.dir.Start()
	waitFor(t, "bob let in with the directory back", func() bool { return status("bob", "bob-pw") == 403 }) // in, but not in devs
	if got := status("alice", "nope"); got != 407 {
		t.Errorf("a wrong password with the directory back: %d", got)
	}
}

// TestIdentityReloadKeepsProviderUsers reloads a configuration whose
// listener restricts the local users (users = ["zoe"]) and also takes
// tokens: a token user's keep-alive connection is not revoked by the
// reload (the list is not theirs), while a local user the reload takes
// off the list is.
func TestIdentityReloadKeepsProviderUsers(t *testing.T) {
	key := proxytest.NewEdSigner(t, "k")
	jwks := proxytest.StartJWKS(t, key)
	origin := fmt.Sprintf("127.0.0.1:%d", mixedOrigin(t))
	configure := func(users ...string) *config.Config {
		cfg := config.Default()
		cfg.Workers = 1
		cfg.AllowPrivate = []string{"127.0.0.0/8"}
		cfg.Auth.Users = []config.User{{Name: "zoe", Password: "zoe-pw"}, {Name: "yan", Password: "yan-pw"}}
		cfg.Auth.Providers = []config.Provider{{Name: "ci", Type: config.ProviderJWT, Issuer: githubIssuer, Audience: "rustle",
			JWKSURL: jwks.URL, InsecurePlaintext: true, UserClaim: "repository"}}
		cfg.Listen = []config.Listener{{Name: "plain", Address: "127.0.0.1:0", Protocol: "http", Users: users}}
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			t.Fatalf("config: %v", err)
		}
		return cfg
	}
	s, addrs := startLogged(t, configure("zoe", "yan"), nil, &logBuffer{})
	tok := key.Mint(t, jwt.MapClaims{"iss": githubIssuer, "aud": "rustle", "repository": "octo-org/app",
		"exp": time.Now().Add(10 * time.Minute).Unix()})
	get := func(c *proxytest.Client, authz string) (int, error) {
		c.Write("GET http://" + origin + "/k HTTP/1.1\r\nHost: " + origin + "\r\nProxy-Authorization: " + authz + "\r\n\r\n")
		resp, err := c.TryReadResponse("GET")
		if err != nil {
			return 0, err
		}
		return resp.Status, nil
	}
	tokenConn, yanConn := proxytest.Dial(t, addrs["plain"]), proxytest.Dial(t, addrs["plain"])
	yan := "Basic " + base64.StdEncoding.EncodeToString([]byte("yan:yan-pw"))
	for c, authz := range map[*proxytest.Client]string{tokenConn: "Bearer " + tok, yanConn: yan} {
		if st, err := get(c, authz); err != nil || st != 200 {
			t.Fatalf("before the reload: %d %v", st, err)
		}
	}
	if err := s.Reload(configure("zoe")); err != nil {
		t.Fatal(err)
	}
	if err := yanConn.WaitClosed(); err != nil {
		t.Errorf("yan, taken off the list: %v", err)
	}
	if st, err := get(tokenConn, "Bearer "+tok); err != nil || st != 200 {
		t.Errorf("the token user's connection after the reload: %d %v, want 200 on the same connection", st, err)
	}
}
