package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestCheck checks that Check reports what New would refuse, and that it
// leaves nothing running: no listener, worker, tunnel engine or TLS
// manager goroutine (`rustle check` used to build a whole server with New
// and never close it).
func TestCheck(t *testing.T) {
	tl, _ := proxyCerts(t)
	good := func() *config.Config {
		c := config.Default()
		c.Auth.Users = []config.User{{Name: "alice", Password: "pw"}}
		c.Listen = []config.Listener{
			{Name: "plain", Address: "127.0.0.1:0", Protocol: "http", Auth: config.AuthBasic},
			{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl},
			{Name: "socks", Address: "127.0.0.1:0", Protocol: "socks5"},
		}
		return c
	}
	for _, tt := range []struct {
		name   string
		modify func(c *config.Config)
		want   string // "" = no error
	}{
		{"valid", func(c *config.Config) {}, ""},
		{"missing htpasswd file", func(c *config.Config) { c.Auth.Htpasswd = []string{t.TempDir() + "/none"} }, "load users"},
		{"missing certificate", func(c *config.Config) { c.Listen[1].TLS.Cert = t.TempDir() + "/none.pem" }, "listener tls"},
		{"basic auth without users", func(c *config.Config) { c.Auth.Users = nil }, "requires basic auth"},
		{"listener users", func(c *config.Config) { c.Listen[2].Users = []string{"alice"} }, ""},
		{"listener user not configured", func(c *config.Config) { c.Listen[2].Users = []string{"alice", "mallory"} },
			`config: listen[2].users[1]: user "mallory" is neither in [[auth.users]] nor in an auth.htpasswd file`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := good()
			tt.modify(c)
			err := Check(c)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Check = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Check = %v, want an error with %q", err, tt.want)
			}
			if err := proxytest.CheckGoroutines(proxytest.DefaultTimeout, "internal/tunnel.(*Engine)", "internal/tlsconf.(*Manager)", "internal/server.(*Server)"); err != nil {
				t.Errorf("Check left goroutines running: %v", err)
			}
		})
	}
}

// TestCheckListenerUsersFromFiles checks that a listener's users may come
// from an htpasswd file, and that a name in no file is refused at load
// with the key and its line, by Check and by Reload alike.
func TestCheckListenerUsersFromFiles(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(users, []byte("carol:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load := func(names string) *config.Config {
		t.Helper()
		path := filepath.Join(dir, "rustle.toml")
		src := "workers = 1\n[auth]\nhtpasswd = [\"users\"]\n\n[[listen]]\nname = \"main\"\naddress = \"127.0.0.1:0\"\nusers = [" + names + "]\n"
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		return c
	}
	good := load(`"carol"`)
	if err := Check(good); err != nil {
		t.Fatalf("Check with carol from the users file: %v", err)
	}
	want := filepath.Join(dir, "rustle.toml") + `:10: listen[0].users[1]: user "erin" is neither in [[auth.users]] nor in an auth.htpasswd file`
	bad := load("\n  \"carol\",\n  \"erin\",\n")
	if err := Check(bad); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Check with erin in no file: %v, want an error ending %q", err, want)
	}
	s := startReloadable(t, good)
	if err := s.Reload(bad); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Reload with erin in no file: %v, want an error ending %q", err, want)
	}
}
