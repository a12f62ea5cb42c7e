package wire

import (
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
)

// testCert returns the files of a self-signed certificate for an https
// listener.
func testCert(t *testing.T) config.ListenerTLS {
	t.Helper()
	_, crt, key, err := tlsconf.WriteSelfSigned(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	return config.ListenerTLS{Cert: crt, Key: key}
}

// TestCheck checks that Check reports what Build would refuse, and that it
// leaves nothing running: no listener, worker, tunnel engine or TLS
// manager goroutine (`rustle check` used to build a whole server with New
// and never close it).
func TestCheck(t *testing.T) {
	tl := testCert(t)
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
			if err := proxytest.CheckGoroutines(proxytest.DefaultTimeout, "internal/tunnel.(*Engine)", "internal/tlsconf.(*Manager)"); err != nil {
				t.Errorf("Check left goroutines running: %v", err)
			}
		})
	}
}

// githubIssuer is the issuer of GitHub Actions' OIDC tokens.
const githubIssuer = "https://token.actions.githubusercontent.com"

// TestEgressTableProviderGroups checks that [[egress.rules]] naming an
// identity provider's group build that group's source for the listeners'
// egress, and keep [acl.groups] members as users.
func TestEgressTableProviderGroups(t *testing.T) {
	cfg := config.Default()
	cfg.Auth.Providers = []config.Provider{{Name: "ci", Type: config.ProviderJWT, Issuer: githubIssuer, Audience: "rustle",
		JWKSURL: "https://token.actions.githubusercontent.com/.well-known/jwks", GroupClaim: "ref",
		Groups: map[string][]string{"ci-main": {"refs/heads/main"}}}}
	cfg.ACL.Groups = map[string][]string{"ops": {"olga"}}
	cfg.Egress.Rules = []config.EgressRule{
		{Who: config.Who{Groups: []string{"ci-main"}}, Bind: []string{"192.0.2.11"}, Freebind: true},
		{Who: config.Who{Groups: []string{"ops"}}, Bind: []string{"192.0.2.12"}, Freebind: true},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	tbl, err := newEgress(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := listenerEgress(cfg, 0, tbl)
	if err != nil || e == nil {
		t.Fatalf("listenerEgress: %v %v", e, err)
	}
	if len(e.Rules) != 2 || e.For("octo-org/app", []string{"ci-main"}) != e.Rules[0].Source {
		t.Errorf("the provider group's source: %+v", e.Rules)
	}
	if e.For("olga", nil) == nil || e.For("olga", nil) == e.Rules[0].Source {
		t.Errorf("the [acl.groups] member's source is not its rule's")
	}
	if e.For("someone", []string{"ci-other"}) != nil {
		t.Errorf("a user in no rule's group has a source")
	}
}

// TestDNSResolverLoadErrors: a resolver URL rustle cannot use is
// refused with the key and its line.
func TestDNSResolverLoadErrors(t *testing.T) {
	src := fmt.Sprintf("[dns]\nresolvers = [\"tls://127.0.0.1\"]\nca = %q\n\n[[listen]]\naddress = \"127.0.0.1:0\"\n", t.TempDir()+"/none.pem")
	cfg, err := config.Parse([]byte(src), "d.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	err = Check(cfg)
	if err == nil || !strings.Contains(err.Error(), "d.toml:3: dns.ca:") {
		t.Fatalf("Check = %v, want d.toml:3: dns.ca", err)
	}
}

// TestEgressLoadErrors: a bind address the host does not have (without
// freebind) and an interface it does not have are refused at load,
// naming the key and its line; with freebind the address is accepted.
func TestEgressLoadErrors(t *testing.T) {
	const listen = "[[listen]]\naddress = \"127.0.0.1:0\"\n"
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ifc := range ifs {
		names = append(names, ifc.Name)
	}
	if len(names) > maxInterfacesNamed {
		names = append(names[:maxInterfacesNamed], fmt.Sprintf("and %d more", len(ifs)-maxInterfacesNamed))
	}
	noSuch := func(name string) string {
		return fmt.Sprintf("%q is not a network interface of this host (it has %s)", name, strings.Join(names, ", "))
	}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"global address", listen + "[egress]\nbind = [\"127.0.0.1\",\n  \"198.51.100.254\"]\n",
			"e.toml:5: egress.bind[1]: 198.51.100.254 is not an address of this host"},
		{"listener address", listen + "egress = { bind = [\"203.0.113.254\"] }\n",
			"e.toml:3: listen[0].egress.bind[0]: 203.0.113.254 is not an address of this host"},
		{"rule address", listen + "[[egress.rules]]\nusers = [\"alice\"]\nbind = [\"127.0.0.1\", \"192.0.2.254\"]\n",
			"e.toml:5: egress.rules[0].bind[1]: 192.0.2.254 is not an address of this host"},
		{"interface", listen + "[egress]\ninterface = \"nosuch0\"\n",
			"e.toml:4: egress.interface: " + noSuch("nosuch0")},
		{"listener interface", listen + "egress = { interface = \"nosuch1\" }\n",
			"e.toml:3: listen[0].egress.interface: " + noSuch("nosuch1")},
		{"rule interface", listen + "[[egress.rules]]\nusers = [\"alice\"]\ninterface = \"nosuch2\"\n",
			"e.toml:5: egress.rules[0].interface: " + noSuch("nosuch2")},
		{"freebind", listen + "[egress]\nbind = [\"198.51.100.254\"]\nfreebind = true\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := config.Parse([]byte(tc.src), "e.toml")
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			err = Check(cfg)
			if runtime.GOOS != "linux" && (strings.HasSuffix(tc.name, "interface") || tc.name == "freebind") {
				tc.want = "only supported on Linux" // SO_BINDTODEVICE, IP_FREEBIND
			}
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want %q", err, tc.want)
			}
			if strings.HasSuffix(tc.name, "interface") && runtime.GOOS == "linux" && err.Error() != tc.want {
				t.Fatalf("Check = %q, want exactly %q", err, tc.want)
			}
		})
	}
}

// TestEgressRuleSNIHosts: an [[egress.rules]] entry's sni_hosts reach
// its rule, whose source then goes to its users' tunnels whose hello
// names one of them, and to nothing without a hello.
func TestEgressRuleSNIHosts(t *testing.T) {
	cfg := config.Default()
	cfg.Egress.Rules = []config.EgressRule{
		{Who: config.Who{Users: []string{"alice"}}, Bind: []string{"192.0.2.11"}, Freebind: true, SNIHosts: []string{"*.cdn.example"}},
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	tbl, err := newEgress(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e, err := listenerEgress(cfg, 0, tbl)
	if err != nil || e == nil || len(e.Rules) != 1 {
		t.Fatalf("listenerEgress: %v %v", e, err)
	}
	if r := e.Rules[0]; r.SNI == nil || !r.SNI.Match("www.cdn.example") || r.SNI.Match("cdn.example") {
		t.Errorf("the rule's sni_hosts: %+v", r.SNI)
	}
	if e.For("alice", nil) != nil {
		t.Error("a request without a hello took the rule on sni_hosts")
	}
}
