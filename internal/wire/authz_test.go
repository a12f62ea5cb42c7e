package wire

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/gate"
)

// TestAuthzBuild checks the decision service's part of a build: every
// listener's policy asks the one client; a token or CA file that does
// not load is an error naming its key; a reload that leaves [authz] and
// its token alone keeps the client (and its cache), one that changes
// either makes another.
func TestAuthzBuild(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "opa.token")
	if err := os.WriteFile(token, []byte("first-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := func(modify func(a *config.Authz)) *config.Config {
		c := config.Default()
		c.Listen = append(c.Listen, config.Listener{Name: "socks", Address: "127.0.0.1:0", Protocol: "socks5"})
		c.Authz = config.Authz{URL: "http://127.0.0.1:8181/v1/data/rustle/authz", InsecurePlaintext: true, TokenFile: token}
		if modify != nil {
			modify(&c.Authz)
		}
		c.SetDefaults()
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	env := &Env{Revoked: new(gate.Registry)}
	g, err := Build(conf(nil), env, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Drop)
	if g.Authz == nil || g.Listeners[0].Policy.Authz != g.Authz || g.Listeners[1].Policy.Authz != g.Authz {
		t.Fatal("the listeners' policies do not ask the generation's client")
	}
	same, err := Build(conf(nil), env, g)
	if err != nil {
		t.Fatal(err)
	}
	if same.Authz != g.Authz {
		t.Error("a reload that changes nothing made another client")
	}
	changed, err := Build(conf(func(a *config.Authz) { a.OnError = config.AuthzAllow }), env, same)
	if err != nil {
		t.Fatal(err)
	}
	if changed.Authz == same.Authz {
		t.Error("a reload that changes on_error kept the client")
	}
	if err := os.WriteFile(token, []byte("second-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rotated, err := Build(conf(func(a *config.Authz) { a.OnError = config.AuthzAllow }), env, changed)
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Authz == changed.Authz {
		t.Error("a reload after the token changed kept the client")
	}
	off, err := Build(conf(func(a *config.Authz) { *a = config.Authz{} }), env, rotated)
	if err != nil {
		t.Fatal(err)
	}
	if off.Authz != nil || off.Listeners[0].Policy.Authz != nil {
		t.Error("a configuration without [authz] has a client")
	}

	for _, tt := range []struct {
		name   string
		modify func(a *config.Authz)
		want   string
	}{
		{"missing token file", func(a *config.Authz) { a.TokenFile = filepath.Join(dir, "none") }, "authz.token_file"},
		{"empty token file", func(a *config.Authz) {
			a.TokenFile = filepath.Join(dir, "empty")
			os.WriteFile(a.TokenFile, []byte("\n"), 0o600)
		}, "authz.token_file"},
		{"missing CA file", func(a *config.Authz) {
			a.URL, a.InsecurePlaintext, a.TLSCA = "https://opa.example/v1/data/rustle/authz", false, filepath.Join(dir, "none.pem")
		}, "authz.tls_ca"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := Check(conf(tt.modify)); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Check = %v, want an error naming %s", err, tt.want)
			}
		})
	}
}

// TestAuthzHeaderCheck checks which fields the service may ask to add.
func TestAuthzHeaderCheck(t *testing.T) {
	for _, tt := range []struct {
		name, value string
		ok          bool
	}{
		{"X-Tenant", "team-a", true},
		{"Authorization", "Bearer abc", true},
		{"Proxy-Authorization", "Basic abc", false},
		{"connection", "close", false},
		{"Transfer-Encoding", "chunked", false},
		{"TE", "trailers", false},
		{"Upgrade", "websocket", false},
		{"Host", "evil.example", false},
		{"Content-Length", "0", false},
		{"X Bad", "v", false},
		{"X-Injected", "a\r\nX-B: b", false},
	} {
		err := authzHeader(tt.name, tt.value)
		if (err == nil) != tt.ok {
			t.Errorf("authzHeader(%q) = %v, want ok %v", tt.name, err, tt.ok)
		}
		if err != nil && strings.Contains(err.Error(), tt.value) {
			t.Errorf("authzHeader(%q)'s error %q holds the value", tt.name, err)
		}
	}
}
