package server

import (
	"strings"
	"testing"

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
