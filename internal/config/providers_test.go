package config

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// providersTOML configures one provider of each type, a listener that
// picks two of them and one that takes the default order.
const providersTOML = `
[[auth.users]]
name = "alice"
password = "pw"

[[auth.providers]]
name = "corp"
type = "ldap"
url = "ldaps://ldap.example.org"
tls_ca = "ldap-ca.pem"
bind_dn = "cn=rustle,dc=example,dc=org"
bind_password_file = "ldap.secret"
base_dn = "ou=people,dc=example,dc=org"
user_filter = "(&(objectClass=inetOrgPerson)(uid={user}))"
group_attribute = "memberOf"
[auth.providers.groups]
devs = ["cn=developers,ou=groups,dc=example,dc=org"]

[[auth.providers]]
name = "github-actions"
type = "jwt"
issuer = "https://token.actions.githubusercontent.com"
audience = "https://github.com/octo-org"
jwks_url = "https://token.actions.githubusercontent.com/.well-known/jwks"
user_claim = "repository"
group_claim = "{repository}@{ref}"
cache_ttl = "1m"
[auth.providers.groups]
ci-release = ["octo-org/app@refs/heads/main"]

[[auth.providers]]
name = "contractors"
type = "htpasswd"
htpasswd = ["contractors.htpasswd"]

[[acl.rules]]
action = "allow"
groups = ["devs", "ci-release"]

[[listen]]
name = "ci"
address = "127.0.0.1:3128"
providers = ["github-actions", "local"]

[[listen]]
name = "all"
address = "127.0.0.1:3129"
`

// TestProviders checks that [[auth.providers]] decode with their
// defaults, relative paths resolve, listeners get their providers (the
// default order: local, then the file's), rules may name the
// providers' groups, and a configuration without providers is
// unchanged.
func TestProviders(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rustle.toml")
	writeTestFile(t, path, providersTOML)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	ps := c.Auth.Providers
	if len(ps) != 3 {
		t.Fatalf("%d providers", len(ps))
	}
	if ps[0].TLSCA != filepath.Join(dir, "ldap-ca.pem") || ps[0].BindPasswordFile != filepath.Join(dir, "ldap.secret") ||
		ps[2].Htpasswd[0] != filepath.Join(dir, "contractors.htpasswd") {
		t.Errorf("paths not resolved: %q %q %q", ps[0].TLSCA, ps[0].BindPasswordFile, ps[2].Htpasswd)
	}
	if ps[0].Timeout.Duration != 5*time.Second || ps[0].MaxConnections != 8 || ps[0].CacheTTL.Duration != 5*time.Minute ||
		ps[0].NegativeCacheTTL.Duration != 30*time.Second {
		t.Errorf("ldap defaults: %+v", ps[0])
	}
	if ps[1].CacheTTL.Duration != time.Minute || ps[1].JWKSRefresh.Duration != time.Hour || ps[1].JWKSMinInterval.Duration != 10*time.Second {
		t.Errorf("jwt defaults: %+v", ps[1])
	}
	if got := c.ListenerProviders(c.Listen[0]); !slices.Equal(got, []string{"github-actions", "local"}) {
		t.Errorf("listener ci's providers: %q", got)
	}
	if got := c.ListenerProviders(c.Listen[1]); !slices.Equal(got, []string{"local", "corp", "github-actions", "contractors"}) {
		t.Errorf("listener all's providers: %q", got)
	}
	if diff := cmp.Diff([]string{"ci-release", "devs"}, c.ProviderGroups()); diff != "" {
		t.Errorf("ProviderGroups (-want +got):\n%s", diff)
	}
	if got := c.EffectiveAuth(c.Listen[1]); got != AuthBasic {
		t.Errorf("EffectiveAuth = %q", got)
	}

	plain := Default()
	if got := plain.ListenerProviders(plain.Listen[0]); got != nil {
		t.Errorf("without users or providers: %q", got)
	}
}

// TestValidateProviders checks the refusals of [[auth.providers]] and of
// a listener's providers key, each naming its key.
func TestValidateProviders(t *testing.T) {
	ldap := Provider{Name: "corp", Type: ProviderLDAP, URL: "ldaps://ldap.example.org", BaseDN: "dc=example,dc=org",
		UserFilter: "(uid={user})"}
	jwt := Provider{Name: "ci", Type: ProviderJWT, Issuer: "https://issuer.example", Audience: "rustle",
		JWKSURL: "https://issuer.example/jwks"}
	tests := []struct {
		name   string
		modify func(c *Config)
		want   []string
	}{
		{"ldap", func(c *Config) { c.Auth.Providers = []Provider{ldap} }, nil},
		{"jwt", func(c *Config) { c.Auth.Providers = []Provider{jwt} }, nil},
		{"no name", func(c *Config) { p := ldap; p.Name = ""; c.Auth.Providers = []Provider{p} }, []string{"auth.providers[0].name"}},
		{"name local", func(c *Config) { p := ldap; p.Name = "local"; c.Auth.Providers = []Provider{p} }, []string{"auth.providers[0].name"}},
		{"same name twice", func(c *Config) { p := jwt; p.Name = "corp"; c.Auth.Providers = []Provider{ldap, p} }, []string{"auth.providers[1].name"}},
		{"unknown type", func(c *Config) { p := ldap; p.Type = "radius"; c.Auth.Providers = []Provider{p} }, []string{"auth.providers[0].type"}},
		{"a jwt key on ldap", func(c *Config) { p := ldap; p.Issuer = "x"; c.Auth.Providers = []Provider{p} }, []string{"auth.providers[0].issuer"}},
		{"an ldap key on jwt", func(c *Config) { p := jwt; p.BaseDN = "x"; c.Auth.Providers = []Provider{p} }, []string{"auth.providers[0].base_dn"}},
		{"plain ldap", func(c *Config) { p := ldap; p.URL = "ldap://ldap.example.org"; c.Auth.Providers = []Provider{p} }, []string{"auth.providers[0].url"}},
		{"plain ldap allowed, remote", func(c *Config) {
			p := ldap
			p.URL, p.InsecurePlaintext = "ldap://ldap.example.org", true
			c.Auth.Providers = []Provider{p}
		}, []string{"auth.providers[0].insecure_plaintext"}},
		{"plain ldap allowed, loopback", func(c *Config) {
			p := ldap
			p.URL, p.InsecurePlaintext = "ldap://127.0.0.1:389", true
			c.Auth.Providers = []Provider{p}
		}, nil},
		{"StartTLS", func(c *Config) {
			p := ldap
			p.URL, p.StartTLS = "ldap://ldap.example.org", true
			c.Auth.Providers = []Provider{p}
		}, nil},
		{"StartTLS on ldaps", func(c *Config) { p := ldap; p.StartTLS = true; c.Auth.Providers = []Provider{p} }, []string{"auth.providers[0].start_tls"}},
		{"no filter", func(c *Config) { p := ldap; p.UserFilter = ""; c.Auth.Providers = []Provider{p} }, []string{"auth.providers[0].user_filter"}},
		{"filter without {user}", func(c *Config) { p := ldap; p.UserFilter = "(uid=x)"; c.Auth.Providers = []Provider{p} }, []string{"auth.providers[0].user_filter"}},
		{"both bind passwords", func(c *Config) {
			p := ldap
			p.BindDN, p.BindPassword, p.BindPasswordFile = "cn=svc", "x", "/f"
			c.Auth.Providers = []Provider{p}
		}, []string{"auth.providers[0].bind_password"}},
		{"jwt without audience", func(c *Config) { p := jwt; p.Audience = ""; c.Auth.Providers = []Provider{p} }, []string{"auth.providers[0].audience"}},
		{"jwt over http", func(c *Config) { p := jwt; p.JWKSURL = "http://issuer.example/jwks"; c.Auth.Providers = []Provider{p} }, []string{"auth.providers[0].jwks_url"}},
		{"jwt groups without a claim", func(c *Config) {
			p := jwt
			p.Groups = map[string][]string{"ci": {"x"}}
			c.Auth.Providers = []Provider{p}
		}, []string{"auth.providers[0].groups"}},
		{"htpasswd without files", func(c *Config) { c.Auth.Providers = []Provider{{Name: "h", Type: ProviderHtpasswd}} }, []string{"auth.providers[0].htpasswd"}},
		{"listener providers", func(c *Config) { c.Auth.Providers = []Provider{ldap, jwt}; c.Listen[0].Providers = []string{"ci"} }, nil},
		{"listener unknown provider", func(c *Config) { c.Auth.Providers = []Provider{ldap}; c.Listen[0].Providers = []string{"nope"} }, []string{"listen[0].providers[0]"}},
		{"listener local without users", func(c *Config) { c.Auth.Providers = []Provider{ldap}; c.Listen[0].Providers = []string{"local"} }, []string{"listen[0].providers[0]"}},
		{"listener provider twice", func(c *Config) {
			c.Auth.Providers = []Provider{ldap}
			c.Listen[0].Providers = []string{"corp", "corp"}
		}, []string{"listen[0].providers[1]"}},
		{"listener providers empty", func(c *Config) { c.Auth.Providers = []Provider{ldap}; c.Listen[0].Providers = []string{} }, []string{"listen[0].providers"}},
		{"listener users without local", func(c *Config) {
			c.Auth.Users = []User{{Name: "alice", Password: "pw"}}
			c.Auth.Providers = []Provider{ldap}
			c.Listen[0].Providers, c.Listen[0].Users = []string{"corp"}, []string{"alice"}
		}, []string{"listen[0].users"}},
		{"a rule on a provider group", func(c *Config) {
			p := ldap
			p.Groups = map[string][]string{"devs": {"cn=devs,dc=example,dc=org"}}
			c.Auth.Providers = []Provider{p}
			c.ACL.Rules = []ACLRule{{Name: "r", Action: "allow", Criteria: Criteria{Who: Who{Groups: []string{"devs"}}}}}
		}, nil},
		{"a rule on a group nobody defines", func(c *Config) {
			c.Auth.Providers = []Provider{ldap}
			c.ACL.Rules = []ACLRule{{Name: "r", Action: "allow", Criteria: Criteria{Who: Who{Groups: []string{"devs"}}}}}
		}, []string{"acl.rules[0].groups[0]"}},
		{"auth basic with providers only", func(c *Config) { c.Auth.Providers = []Provider{jwt}; c.Listen[0].Auth = AuthBasic }, nil},
		{"an egress rule on a provider group", func(c *Config) {
			p := ldap
			p.Groups = map[string][]string{"devs": {"cn=devs,dc=example,dc=org"}}
			c.Auth.Providers = []Provider{p}
			c.Egress.Rules = []EgressRule{{Who: Who{Groups: []string{"devs"}}, Bind: []string{"127.0.0.1"}}}
		}, nil},
		{"an egress rule on a group nobody defines", func(c *Config) {
			c.Auth.Providers = []Provider{ldap}
			c.Egress.Rules = []EgressRule{{Who: Who{Groups: []string{"devs"}}, Bind: []string{"127.0.0.1"}}}
		}, []string{"egress.rules[0].groups[0]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.modify(c)
			c.SetDefaults()
			got := errorKeys(t, c.Validate())
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("error keys (-want +got):\n%s", diff)
			}
		})
	}
}

func writeTestFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}
