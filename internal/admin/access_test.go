package admin

import (
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

const testToken = "0123456789abcdef-admin-token"

// startGuarded starts an admin server on addr with the access that c's
// files give, an endpoint GET /quota and POST /revoke, and returns it
// with its log.
func startGuarded(t *testing.T, addr string, c config.AdminAccess) (*Server, *proxytest.LogBuffer) {
	t.Helper()
	access, err := LoadAccess(c)
	if err != nil {
		t.Fatal(err)
	}
	logs := &proxytest.LogBuffer{}
	m := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fake_metric 1\n") })
	s := New(addr, m, nil, slog.New(slog.NewTextHandler(logs, nil)), access)
	s.Handle("GET /quota", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "quota\n") }))
	s.Handle("POST /revoke", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "revoked\n") }))
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, logs
}

// call sends method path to s with Host host and the header lines
// given, and returns the status and body.
func call(t *testing.T, s *Server, method, path, host string, header ...string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.Addr().String()+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for _, h := range header {
		k, v, _ := strings.Cut(h, ": ")
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestAccessAuthentication checks admin_access.token_file and htpasswd:
// every endpoint but /healthz, /readyz and /metrics needs the token or
// a user's password (401 with a challenge per scheme otherwise), and the
// refusals are logged without the credentials.
func TestAccessAuthentication(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(tokenFile, []byte("  "+testToken+"  \nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("op-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	htpasswd := filepath.Join(dir, "admin.htpasswd")
	if err := os.WriteFile(htpasswd, []byte("op:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	basic := func(u, p string) string {
		return "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p))
	}
	s, logs := startGuarded(t, "127.0.0.1:0", config.AdminAccess{TokenFile: tokenFile, Htpasswd: htpasswd})
	const json = "Content-Type: application/json"
	for _, tc := range []struct {
		name, method, path string
		header             []string
		want               int
	}{
		{"healthz open", "GET", "/healthz", nil, 200},
		{"readyz open", "GET", "/readyz", nil, 200},
		{"metrics open", "GET", "/metrics", nil, 200},
		{"quota without credentials", "GET", "/quota", nil, 401},
		{"index without credentials", "GET", "/", nil, 401},
		{"revoke without credentials", "POST", "/revoke", []string{json}, 401},
		{"quota with the token", "GET", "/quota", []string{"Authorization: Bearer " + testToken}, 200},
		{"scheme any case", "GET", "/quota", []string{"Authorization: bearer " + testToken}, 200},
		{"revoke with the token", "POST", "/revoke", []string{json, "Authorization: Bearer " + testToken}, 200},
		{"a wrong token", "GET", "/quota", []string{"Authorization: Bearer " + testToken + "x"}, 401},
		{"a prefix of the token", "GET", "/quota", []string{"Authorization: Bearer " + testToken[:16]}, 401},
		{"the token as Basic", "GET", "/quota", []string{basic("op", testToken)}, 401},
		{"quota with a password", "GET", "/quota", []string{basic("op", "op-pw")}, 200},
		{"revoke with a password", "POST", "/revoke", []string{json, basic("op", "op-pw")}, 200},
		{"a wrong password", "GET", "/quota", []string{basic("op", "wrong-pw")}, 401},
		{"an unknown user", "GET", "/quota", []string{basic("eve", "op-pw")}, 401},
		{"unknown path", "GET", "/nothing", nil, 404},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body, h := call(t, s, tc.method, tc.path, "", tc.header...)
			if code != tc.want {
				t.Fatalf("%s %s = %d %q, want %d", tc.method, tc.path, code, body, tc.want)
			}
			if code == 401 {
				ch := h.Values("WWW-Authenticate")
				if len(ch) != 2 || !strings.HasPrefix(ch[0], "Bearer ") || !strings.HasPrefix(ch[1], "Basic ") {
					t.Errorf("challenges %q, want Bearer and Basic", ch)
				}
				if !strings.Contains(body, "authentication required") {
					t.Errorf("body %q gives no reason", body)
				}
			}
		})
	}
	l := logs.String()
	if !strings.Contains(l, `msg="admin request refused" reason=auth status=401 method=GET path=/quota`) {
		t.Errorf("no log line for the refusals:\n%s", l)
	}
	for _, secret := range []string{testToken[:16], "op-pw", "wrong-pw", base64.StdEncoding.EncodeToString([]byte("op:wrong-pw"))} {
		if strings.Contains(l, secret) {
			t.Errorf("the log shows the credential %q:\n%s", secret, l)
		}
	}
}

// TestAccessHosts checks the Host names the admin listener answers, on
// loopback and on 0.0.0.0: its own address, localhost and loopback,
// the names of admin and admin_access.hosts, and, on an unspecified
// address, any IP address; any other name (DNS rebinding) gets 421,
// logged, except on /healthz and /readyz.
func TestAccessHosts(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		hosts      []string
		ok, refuse []string
	}{
		{"loopback", "127.0.0.1:0", []string{"Rustle-Admin.Example"},
			[]string{"127.0.0.1", "127.0.0.1:1", "localhost:9", "LOCALHOST.", "[::1]:9", "rustle-admin.example", "rustle-admin.example.:9090"},
			[]string{"rebound.example", "localhost.rebound.example", "192.0.2.1", "[2001:db8::1]:9", "rustle-admin.example.rebound.example"}},
		{"wildcard", "0.0.0.0:0", []string{"2001:db8::7"},
			[]string{"192.0.2.1:9090", "10.1.2.3", "[2001:db8::7]:1", "localhost"},
			[]string{"rebound.example", "pod.namespace.svc"}},
		{"a name", "localhost:0", nil,
			[]string{"localhost:9090", "127.0.0.1"},
			[]string{"rebound.example", "192.0.2.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, logs := startGuarded(t, tc.addr, config.AdminAccess{Hosts: tc.hosts, HealthAndMetricsOnly: tc.addr == "0.0.0.0:0"})
			for _, h := range tc.ok {
				if code, body, _ := call(t, s, "GET", "/metrics", h); code != 200 {
					t.Errorf("Host %s: %d %q, want 200", h, code, body)
				}
			}
			for _, h := range tc.refuse {
				code, body, _ := call(t, s, "GET", "/metrics", h)
				if code != http.StatusMisdirectedRequest || !strings.Contains(body, "admin_access.hosts") {
					t.Errorf("Host %s: %d %q, want 421 naming admin_access.hosts", h, code, body)
				}
				if code, _, _ := call(t, s, "GET", "/healthz", h); code != 200 {
					t.Errorf("/healthz with Host %s: %d, want 200", h, code)
				}
			}
			if !strings.Contains(logs.String(), `msg="admin request refused" reason=host status=421`) {
				t.Errorf("no log line for the refused Host:\n%s", logs)
			}
		})
	}
}

// TestAccessHealthAndMetricsOnly checks that with
// health_and_metrics_only the endpoints the server adds answer 404 with
// the reason, and health and metrics are served.
func TestAccessHealthAndMetricsOnly(t *testing.T) {
	s, logs := startGuarded(t, "127.0.0.1:0", config.AdminAccess{HealthAndMetricsOnly: true})
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _, _ := call(t, s, "GET", p, ""); code != 200 {
			t.Errorf("GET %s = %d, want 200", p, code)
		}
	}
	code, body, _ := call(t, s, "GET", "/quota", "")
	if code != 404 || !strings.Contains(body, "health_and_metrics_only") {
		t.Errorf("GET /quota = %d %q, want 404 naming health_and_metrics_only", code, body)
	}
	if code, _, _ := call(t, s, "POST", "/revoke", "", "Content-Type: application/json"); code != 404 {
		t.Errorf("POST /revoke = %d, want 404", code)
	}
	if !strings.Contains(logs.String(), `reason=off status=404`) {
		t.Errorf("no log line for the endpoint turned off:\n%s", logs)
	}
}

// TestLoadAccessErrors checks that a token file missing, short or with a
// blank inside, and an htpasswd file missing or empty, are errors naming
// the key, never the token.
func TestLoadAccessErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name string
		c    config.AdminAccess
		want string
	}{
		{"missing token file", config.AdminAccess{TokenFile: filepath.Join(dir, "none")}, "admin_access.token_file"},
		{"short token", config.AdminAccess{TokenFile: write("short", "hunter2-short\n")}, "at least 16"},
		{"empty token file", config.AdminAccess{TokenFile: write("empty", "")}, "admin_access.token_file"},
		{"blank in the token", config.AdminAccess{TokenFile: write("blank", "hunter2-hunter2 hunter2\n")}, "blank"},
		{"missing htpasswd", config.AdminAccess{Htpasswd: filepath.Join(dir, "none.htpasswd")}, "admin_access.htpasswd"},
		{"empty htpasswd", config.AdminAccess{Htpasswd: write("empty.htpasswd", "# nobody\n")}, "no users"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadAccess(tc.c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadAccess = %v, want an error with %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the error shows the token: %v", err)
			}
		})
	}
}

// TestAccessRemote checks that without admin_access authentication only
// loopback clients are answered (but /healthz, /readyz and /metrics),
// a refusal logged with reason=remote, and that with authentication a
// client anywhere gets the challenge, then its answer with its identity.
func TestAccessRemote(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		access config.AdminAccess
		remote string
		path   string
		header []string
		want   int
		who    string
	}{
		{"no auth, loopback", config.AdminAccess{}, "127.0.0.1:4000", "/quota", nil, 200, ""},
		{"no auth, loopback v6", config.AdminAccess{}, "[::1]:4000", "/quota", nil, 200, ""},
		{"no auth, mapped loopback", config.AdminAccess{}, "[::ffff:127.0.0.1]:4000", "/quota", nil, 200, ""},
		{"no auth, another host", config.AdminAccess{}, "192.0.2.1:4000", "/quota", nil, 403, ""},
		{"no auth, another host, index", config.AdminAccess{}, "192.0.2.1:4000", "/", nil, 403, ""},
		{"no auth, another host, metrics", config.AdminAccess{}, "192.0.2.1:4000", "/metrics", nil, 200, ""},
		{"no auth, another host, healthz", config.AdminAccess{}, "192.0.2.1:4000", "/healthz", nil, 200, ""},
		{"health and metrics only, another host, index", config.AdminAccess{HealthAndMetricsOnly: true}, "192.0.2.1:4000", "/", nil, 200, ""},
		{"health and metrics only, another host", config.AdminAccess{HealthAndMetricsOnly: true}, "192.0.2.1:4000", "/quota", nil, 404, ""},
		{"token, another host, none sent", config.AdminAccess{TokenFile: tokenFile}, "192.0.2.1:4000", "/quota", nil, 401, ""},
		{"token, another host", config.AdminAccess{TokenFile: tokenFile}, "192.0.2.1:4000", "/quota",
			[]string{"Authorization: Bearer " + testToken}, 200, "token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			access, err := LoadAccess(tc.access)
			if err != nil {
				t.Fatal(err)
			}
			logs := &proxytest.LogBuffer{}
			m := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "fake_metric 1\n") })
			s := New("127.0.0.1:0", m, nil, slog.New(slog.NewTextHandler(logs, nil)), access)
			var who string
			s.Handle("GET /quota", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { who = Caller(r) }))
			req := httptest.NewRequest("GET", tc.path, nil)
			req.RemoteAddr = tc.remote
			req.Host = "127.0.0.1"
			for _, h := range tc.header {
				k, v, _ := strings.Cut(h, ": ")
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			s.Handler().ServeHTTP(rec, req)
			if code := rec.Code; code != tc.want || who != tc.who {
				t.Fatalf("GET %s from %s: %d (caller %q) %q, want %d (caller %q)", tc.path, tc.remote, rec.Code, who, rec.Body, tc.want, tc.who)
			}
			if tc.want == 403 && (!strings.Contains(rec.Body.String(), "only loopback") ||
				!strings.Contains(logs.String(), `reason=remote status=403`)) {
				t.Errorf("refusal %q, log:\n%s", rec.Body, logs)
			}
		})
	}
}
