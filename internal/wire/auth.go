package wire

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/config"
)

// users loads the configured users, inline and from the htpasswd files.
func (b *builder) users() error {
	cfg := b.cfg
	if !cfg.HasUsers() {
		return nil
	}
	a, err := auth.New(auth.Config{
		Realm:     cfg.Auth.Realm,
		Files:     cfg.Auth.Htpasswd,
		Users:     localUsers(cfg),
		CacheTTL:  cfg.Auth.CacheTTL.Duration,
		CacheSize: cfg.Auth.CacheSize,
	})
	if err != nil {
		return fmt.Errorf("wire: load users: %w", err)
	}
	b.g.Auth, b.g.Users = a, a.Len()
	if b.env.Cluster != nil { // published when a reload removes them
		b.g.Names = userNames(cfg)
	}
	return nil
}

// providers makes the identity providers of [[auth.providers]].
func (b *builder) providers() error {
	ps, err := newProviders(b.cfg, b.log)
	b.byName = ps
	return err
}

// listenerAuth returns the authenticator of cfg.Listen[i], a listener
// that authenticates: its -L URL's user alone, or its identity providers
// (see config.ListenerProviders) in order, with the configured users
// (authr) its users key names, or every configured user, where "local"
// stands among them.
func listenerAuth(cfg *config.Config, i int, authr *auth.Authenticator, providers map[string]auth.Provider,
	chains map[string]*auth.Authenticator) (*auth.Authenticator, error) {
	lc := cfg.Listen[i]
	if names := cfg.ListenerProviders(lc); lc.URLUser == nil && !(len(names) == 1 && names[0] == config.LocalProvider) {
		if len(names) == 0 {
			return nil, fmt.Errorf("wire: listener %s requires basic auth but no users are configured", lc.Name)
		}
		a, err := chainAuth(cfg, names, authr, providers, chains)
		if err != nil {
			return nil, fmt.Errorf("wire: listener %s: %w", lc.Name, err)
		}
		if len(lc.Users) > 0 {
			if err := knownUsers(cfg, i, authr); err != nil {
				return nil, err
			}
			return a.Only(lc.Users), nil
		}
		return a, nil
	}
	switch {
	case lc.URLUser != nil:
		u := lc.URLUser
		a, err := auth.New(auth.Config{
			Realm:     cfg.Auth.Realm,
			Users:     []auth.User{{Name: u.Name, Password: u.Password, Bcrypt: u.Bcrypt}},
			CacheTTL:  cfg.Auth.CacheTTL.Duration,
			CacheSize: cfg.Auth.CacheSize,
		})
		if err != nil {
			return nil, fmt.Errorf("wire: listener %s: load its user: %w", lc.Name, err)
		}
		return a, nil
	case authr == nil:
		return nil, fmt.Errorf("wire: listener %s requires basic auth but no users are configured", lc.Name)
	case len(lc.Users) > 0:
		if err := knownUsers(cfg, i, authr); err != nil {
			return nil, err
		}
		return authr.Only(lc.Users), nil
	}
	return authr, nil
}

// knownUsers checks that the users key of cfg.Listen[i] names users of
// authr, the configured users.
func knownUsers(cfg *config.Config, i int, authr *auth.Authenticator) error {
	lc := cfg.Listen[i]
	for j, name := range lc.Users {
		if !authr.Has(name) {
			return cfg.KeyError(fmt.Sprintf("listen[%d].users[%d]", i, j),
				fmt.Errorf("user %q is neither in [[auth.users]] nor in an auth.htpasswd file", name))
		}
	}
	return nil
}

// userNames returns the names of cfg's users, inline and from the
// htpasswd files (which auth.New has just read: a file that no longer
// reads adds none).
func userNames(cfg *config.Config) []string {
	var names []string
	for _, u := range cfg.Auth.Users {
		names = append(names, u.Name)
	}
	for _, path := range cfg.Auth.Htpasswd {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		users, _ := auth.ParseHtpasswd(f, path)
		f.Close()
		for _, u := range users {
			names = append(names, u.Name)
		}
	}
	return names
}

// newProviders makes the identity providers of [[auth.providers]], by
// name. They connect to nothing until a credential needs them.
func newProviders(cfg *config.Config, log *slog.Logger) (map[string]auth.Provider, error) {
	ps := make(map[string]auth.Provider, len(cfg.Auth.Providers))
	for i, pc := range cfg.Auth.Providers {
		p, err := newProvider(cfg, pc, log) // its log lines name it (provider=NAME)
		if err != nil {
			return nil, fmt.Errorf("wire: auth.providers[%d] (%s): %w", i, pc.Name, err)
		}
		ps[pc.Name] = p
	}
	return ps, nil
}

func newProvider(cfg *config.Config, pc config.Provider, log *slog.Logger) (auth.Provider, error) {
	switch pc.Type {
	case config.ProviderHtpasswd:
		return auth.New(auth.Config{Files: pc.Htpasswd, CacheTTL: pc.CacheTTL.Duration, CacheSize: cfg.Auth.CacheSize})
	case config.ProviderLDAP:
		tc, err := providerTLS(pc.TLSCA)
		if err != nil {
			return nil, err
		}
		pass := pc.BindPassword
		if pc.BindPasswordFile != "" {
			if pass, err = readSecret(pc.BindPasswordFile); err != nil {
				return nil, fmt.Errorf("read bind_password_file: %w", err)
			}
		}
		return auth.NewLDAP(auth.LDAPConfig{
			Name: pc.Name, URL: pc.URL, StartTLS: pc.StartTLS, InsecurePlaintext: pc.InsecurePlaintext, TLS: tc,
			BindDN: pc.BindDN, BindPassword: pass, UserDN: pc.UserDN, BaseDN: pc.BaseDN, UserFilter: pc.UserFilter,
			NameAttribute: pc.NameAttribute, GroupAttribute: pc.GroupAttribute, GroupBaseDN: pc.GroupBaseDN, GroupFilter: pc.GroupFilter, Groups: pc.Groups,
			Timeout: pc.Timeout.Duration, MaxConnections: pc.MaxConnections,
			CacheTTL: pc.CacheTTL.Duration, NegativeCacheTTL: pc.NegativeCacheTTL.Duration, Logger: log,
		})
	case config.ProviderJWT:
		tc, err := providerTLS(pc.TLSCA)
		if err != nil {
			return nil, err
		}
		return auth.NewJWT(auth.JWTConfig{
			Name: pc.Name, Issuer: pc.Issuer, Audience: pc.Audience, JWKSURL: pc.JWKSURL,
			InsecurePlaintext: pc.InsecurePlaintext, TLS: tc, UserClaim: pc.UserClaim, GroupClaim: pc.GroupClaim,
			Groups: pc.Groups, BasicUser: pc.BasicUser, Algorithms: nilIfEmpty(pc.Algorithms),
			JWKSRefresh: pc.JWKSRefresh.Duration, JWKSMinInterval: pc.JWKSMinInterval.Duration,
			Timeout: pc.Timeout.Duration, Leeway: pc.Leeway.Duration,
			CacheTTL: pc.CacheTTL.Duration, NegativeCacheTTL: pc.NegativeCacheTTL.Duration, Logger: log,
		})
	}
	return nil, fmt.Errorf("unknown type %q", pc.Type)
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// providerTLS returns the TLS configuration towards a provider's
// server: the CAs of the PEM file ca, or nil (the system's roots) for "".
func providerTLS(ca string) (*tls.Config, error) {
	if ca == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, fmt.Errorf("read tls_ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("tls_ca %s: no PEM certificate", ca)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// chainAuth returns the authenticator of a listener that tries the
// providers names (config.LocalProvider for the local users, whose
// authenticator is local) in order: local itself when that is all, and
// otherwise one made for the chain, shared by the listeners with the same
// chain (in made) so that they share its verdict cache.
func chainAuth(cfg *config.Config, names []string, local *auth.Authenticator, providers map[string]auth.Provider,
	made map[string]*auth.Authenticator) (*auth.Authenticator, error) {
	if len(names) == 1 && names[0] == config.LocalProvider {
		return local, nil
	}
	key := strings.Join(names, "\x00")
	if a := made[key]; a != nil {
		return a, nil
	}
	chain := make([]auth.Provider, len(names))
	withLocal := false
	for i, n := range names {
		if n == config.LocalProvider {
			chain[i], withLocal = auth.Local, true
			continue
		}
		chain[i] = providers[n]
	}
	ac := auth.Config{
		Realm: cfg.Auth.Realm, CacheTTL: cfg.Auth.CacheTTL.Duration, CacheSize: cfg.Auth.CacheSize, Providers: chain,
	}
	if withLocal {
		ac.Files = cfg.Auth.Htpasswd
		ac.Users = localUsers(cfg)
	}
	a, err := auth.New(ac)
	if err != nil {
		return nil, fmt.Errorf("wire: providers %s: %w", strings.Join(names, ", "), err)
	}
	made[key] = a
	return a, nil
}

// localUsers returns the users of [[auth.users]].
func localUsers(cfg *config.Config) []auth.User {
	users := make([]auth.User, len(cfg.Auth.Users))
	for i, u := range cfg.Auth.Users {
		users[i] = auth.User{Name: u.Name, Password: u.Password, Bcrypt: u.Bcrypt}
	}
	return users
}

// readSecret returns the secret a file holds (a password), without its
// trailing newline.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}
