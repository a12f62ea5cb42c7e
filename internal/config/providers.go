package config

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Identity provider types, the values of a provider's type key.
const (
	// ProviderHtpasswd is a set of users in htpasswd files of its own.
	ProviderHtpasswd = "htpasswd"
	// ProviderLDAP is an LDAP directory.
	ProviderLDAP = "ldap"
	// ProviderJWT is a token issuer: bearer tokens (JWTs) verified
	// against its key set (JWKS).
	ProviderJWT = "jwt"
)

// LocalProvider is the name a listener's providers list gives the
// users of [[auth.users]] and auth.htpasswd; no [[auth.providers]]
// entry may take it.
const LocalProvider = "local"

var providerTypes = []string{ProviderHtpasswd, ProviderLDAP, ProviderJWT}

// Defaults of [[auth.providers]], applied by [Config.SetDefaults].
const (
	defaultProviderNegativeTTL = 30 * time.Second
	defaultProviderTimeout     = 5 * time.Second
	defaultLDAPConnections     = 8
	defaultUserClaim           = "sub"
	defaultJWKSRefresh         = time.Hour
	defaultJWKSMinInterval     = 10 * time.Second
	defaultJWTLeeway           = 30 * time.Second
)

// Provider is one identity provider, an [[auth.providers]] entry: a
// source of users beside [[auth.users]] and auth.htpasswd, tried by the
// listeners that name it (see [Listener.Providers]) in their order.
// Keys of another type than the provider's are refused.
type Provider struct {
	// Name names the provider in listeners' providers lists and in
	// logs: letters, digits, '-', '_' and '.', not "local". Required.
	Name string `toml:"name"`
	// Type is "htpasswd", "ldap" or "jwt". Required.
	Type string `toml:"type"`

	// Htpasswd (htpasswd) lists the provider's files of
	// "user:bcrypt-hash" lines; [Load] resolves relative paths against
	// the configuration file's directory. Required for htpasswd.
	Htpasswd []string `toml:"htpasswd"`

	// URL (ldap) is the directory, ldaps://host[:port] or
	// ldap://host[:port]. Required for ldap.
	URL string `toml:"url"`
	// StartTLS (ldap) upgrades an ldap:// URL's connections to TLS;
	// false sends nothing over ldap:// unless InsecurePlaintext.
	StartTLS bool `toml:"start_tls"`
	// InsecurePlaintext (ldap, jwt) allows an ldap:// URL without
	// StartTLS, or an http:// JWKS URL: passwords in clear, keys anyone on
	// the path can replace. Only for a loopback host; false refuses both.
	InsecurePlaintext bool `toml:"insecure_plaintext"`
	// TLSCA (ldap, jwt) is a PEM bundle of the CAs that sign the
	// directory's or the JWKS URL's certificate; [Load] resolves a
	// relative path. "" means the system's roots.
	TLSCA string `toml:"tls_ca"`
	// BindDN (ldap) is the service account that searches for users; ""
	// searches anonymously.
	BindDN string `toml:"bind_dn"`
	// BindPassword (ldap) is the service account's password; "" means
	// none, or BindPasswordFile.
	BindPassword string `toml:"bind_password"`
	// BindPasswordFile (ldap) is a file holding the service account's
	// password (a trailing newline is dropped), read at start and on
	// reload; [Load] resolves a relative path. "" means BindPassword.
	BindPasswordFile string `toml:"bind_password_file"`
	// BaseDN (ldap) is where users are searched for. Required unless
	// UserDN.
	BaseDN string `toml:"base_dn"`
	// UserFilter (ldap) finds a user, {user} standing for the name, as
	// "(&(objectClass=inetOrgPerson)(uid={user}))": users it does not
	// find (a disabled one, if the filter leaves them out) are refused.
	// Required unless UserDN; with UserDN it is checked on the bound
	// user's entry, "" checking nothing.
	UserFilter string `toml:"user_filter"`
	// UserDN (ldap) is a DN template for a direct bind, as
	// "uid={user},ou=people,dc=example,dc=org"; "" means search then bind.
	UserDN string `toml:"user_dn"`
	// NameAttribute (ldap) is the user entry's attribute whose value is
	// the user name, as "uid": one name per user however the client
	// spells it (a directory's matching ignores case), for access rules,
	// limits and the logs; an entry without it is refused. "" means the
	// name as the client typed it.
	NameAttribute string `toml:"name_attribute"`
	// GroupAttribute (ldap) is the user entry's attribute listing its
	// groups' DNs, as "memberOf"; "" reads none.
	GroupAttribute string `toml:"group_attribute"`
	// GroupBaseDN (ldap) is where GroupFilter searches; "" means BaseDN.
	GroupBaseDN string `toml:"group_base_dn"`
	// GroupFilter (ldap) finds the user's groups, {dn} standing for the
	// user's DN and {user} for the name, as
	// "(&(objectClass=groupOfNames)(member={dn}))"; "" searches none.
	GroupFilter string `toml:"group_filter"`
	// MaxConnections (ldap) bounds the verifications in progress at
	// once, each on a connection of its own; 0 means 8.
	MaxConnections int `toml:"max_connections"`

	// Issuer (jwt) is the iss claim tokens must carry. Required for jwt.
	Issuer string `toml:"issuer"`
	// Audience (jwt) is a value tokens' aud claim must hold. Required for
	// jwt.
	Audience string `toml:"audience"`
	// JWKSURL (jwt) is where the issuer's public keys are fetched.
	// Required for jwt.
	JWKSURL string `toml:"jwks_url"`
	// UserClaim (jwt) is the claim that becomes the user name, or a
	// template of claims in braces ("{repository}"); "" means "sub".
	UserClaim string `toml:"user_claim"`
	// GroupClaim (jwt) is the claim whose values Groups maps (a string
	// or an array of strings), or a template giving one value
	// ("{repository}@{ref}"); "" means none.
	GroupClaim string `toml:"group_claim"`
	// BasicUser (jwt) is the Basic user name whose password is taken as
	// a token; "" means any user name.
	BasicUser string `toml:"basic_user"`
	// Algorithms (jwt) are the signature algorithms accepted; empty
	// means RS256/384/512, PS256/384/512, ES256/384/512 and EdDSA.
	Algorithms []string `toml:"algorithms"`
	// JWKSRefresh (jwt) is how old the key set may get before it is
	// fetched again; zero means 1h.
	JWKSRefresh Duration `toml:"jwks_refresh"`
	// JWKSMinInterval (jwt) is the least time between two fetches for
	// an unknown key id; zero means 10s.
	JWKSMinInterval Duration `toml:"jwks_min_interval"`
	// Leeway (jwt) is the clock skew allowed on nbf and iat; zero means
	// 30s.
	Leeway Duration `toml:"leeway"`

	// Groups (ldap, jwt) maps a rustle group, which access rules may
	// name, to the directory groups' DNs (ldap) or the GroupClaim values
	// (jwt) whose users are in it; nil means none.
	Groups map[string][]string `toml:"groups"`
	// Timeout (ldap, jwt) bounds a verification against the directory
	// as a whole (dial, TLS, binds and searches), or a key set fetch;
	// zero means 5s.
	Timeout Duration `toml:"timeout"`
	// CacheTTL is how long an accepted verdict is cached (a token's at
	// most until its exp); zero means auth.cache_ttl.
	CacheTTL Duration `toml:"cache_ttl"`
	// NegativeCacheTTL (ldap, jwt) is how long a refusal is cached; zero
	// means 30s.
	NegativeCacheTTL Duration `toml:"negative_cache_ttl"`
}

// setProviderDefaults fills the defaults of [[auth.providers]]; the
// Auth defaults must be set first.
func (c *Config) setProviderDefaults() {
	for i := range c.Auth.Providers {
		p := &c.Auth.Providers[i]
		setDuration(&p.CacheTTL, c.Auth.CacheTTL.Duration)
		if p.Type == ProviderHtpasswd {
			continue
		}
		setDuration(&p.NegativeCacheTTL, defaultProviderNegativeTTL)
		setDuration(&p.Timeout, defaultProviderTimeout)
		switch p.Type {
		case ProviderLDAP:
			setInt(&p.MaxConnections, defaultLDAPConnections)
		case ProviderJWT:
			setString(&p.UserClaim, defaultUserClaim)
			setDuration(&p.JWKSRefresh, defaultJWKSRefresh)
			setDuration(&p.JWKSMinInterval, defaultJWKSMinInterval)
			setDuration(&p.Leeway, defaultJWTLeeway)
		}
	}
}

// HasProviders reports whether any [[auth.providers]] entry is
// configured.
func (c *Config) HasProviders() bool { return len(c.Auth.Providers) > 0 }

// ListenerProviders returns the identity providers a listener that
// authenticates tries, in order, by name ("local" for the users of
// [[auth.users]] and auth.htpasswd): its providers key, or "local" when
// local users are configured followed by every [[auth.providers]] entry
// in the file's order. A listener with a URL's user (-L) has none: its
// user alone authenticates on it.
func (c *Config) ListenerProviders(l Listener) []string {
	if l.URLUser != nil {
		return nil
	}
	if l.Providers != nil {
		return l.Providers
	}
	var names []string
	if c.HasUsers() {
		names = append(names, LocalProvider)
	}
	for _, p := range c.Auth.Providers {
		names = append(names, p.Name)
	}
	return names
}

// providerGroup reports whether a provider maps users to group g.
func (c *Config) providerGroup(g string) bool {
	for _, p := range c.Auth.Providers {
		if _, ok := p.Groups[g]; ok {
			return true
		}
	}
	return false
}

// ProviderGroups returns the rustle groups the providers map users to,
// sorted, for the access rules.
func (c *Config) ProviderGroups() []string {
	var gs []string
	for _, p := range c.Auth.Providers {
		for g := range p.Groups {
			gs = append(gs, g)
		}
	}
	slices.Sort(gs)
	return slices.Compact(gs)
}

// validateProviders checks [[auth.providers]].
func (c *Config) validateProviders(v *validator) {
	seen := make(map[string]int)
	for i, p := range c.Auth.Providers {
		key := fmt.Sprintf("auth.providers[%d]", i)
		switch {
		case p.Name == "":
			v.add(key+".name", errors.New("is required"))
		case p.Name == LocalProvider:
			v.add(key+".name", fmt.Errorf("%q names the users of [[auth.users]] and auth.htpasswd; choose another", p.Name))
		case !validGroupName(p.Name, "."):
			v.add(key+".name", fmt.Errorf("%q: use letters, digits, '-', '_' and '.'", p.Name))
		default:
			if j, dup := seen[p.Name]; dup {
				v.add(key+".name", fmt.Errorf("%q is also the name of auth.providers[%d]", p.Name, j))
			} else {
				seen[p.Name] = i
			}
		}
		if !slices.Contains(providerTypes, p.Type) {
			v.add(key+".type", fmt.Errorf("%q is not one of %s", p.Type, strings.Join(providerTypes, ", ")))
			continue
		}
		for _, k := range p.foreignKeys() {
			v.add(key+"."+k, fmt.Errorf("is not a key of a %q provider", p.Type))
		}
		v.check(p.CacheTTL.Duration > 0, key+".cache_ttl", "%s is not positive", p.CacheTTL.Duration)
		for g, values := range p.Groups {
			if !validGroupName(g, "") {
				v.add(key+".groups", fmt.Errorf("group name %q: use letters, digits, '-' and '_'", g))
			}
			for j, val := range values {
				v.check(val != "", fmt.Sprintf("%s.groups.%s[%d]", key, g, j), "is empty")
			}
		}
		switch p.Type {
		case ProviderHtpasswd:
			v.check(len(p.Htpasswd) > 0, key+".htpasswd", "is required for an htpasswd provider")
			for j, f := range p.Htpasswd {
				v.check(f != "", fmt.Sprintf("%s.htpasswd[%d]", key, j), "is empty")
			}
		case ProviderLDAP:
			c.validateLDAP(v, key, p)
		case ProviderJWT:
			c.validateJWT(v, key, p)
		}
		if p.Type != ProviderHtpasswd {
			v.positive(key+".timeout", p.Timeout)
			v.positive(key+".negative_cache_ttl", p.NegativeCacheTTL)
		}
	}
}

func (c *Config) validateLDAP(v *validator, key string, p Provider) {
	u, err := url.Parse(p.URL)
	switch {
	case p.URL == "":
		v.add(key+".url", errors.New("is required for an ldap provider"))
	case err != nil || u.Host == "" || (u.Scheme != "ldap" && u.Scheme != "ldaps"):
		v.add(key+".url", fmt.Errorf("%q: want ldaps://host[:port] or ldap://host[:port]", p.URL))
	case u.Scheme == "ldaps" && p.StartTLS:
		v.add(key+".start_tls", errors.New("is for ldap:// URLs; ldaps:// is TLS already"))
	case u.Scheme == "ldap" && !p.StartTLS && !p.InsecurePlaintext:
		v.add(key+".url", errors.New("ldap:// sends passwords in clear: use ldaps://, start_tls = true, or insecure_plaintext = true for a loopback address"))
	case u.Scheme == "ldap" && !p.StartTLS && !isLoopback(u.Hostname()):
		v.add(key+".insecure_plaintext", fmt.Errorf("is only for a loopback address, not %q", u.Hostname()))
	}
	if p.UserDN == "" {
		v.check(p.BaseDN != "", key+".base_dn", "is required without user_dn")
		v.check(p.UserFilter != "", key+".user_filter", "is required without user_dn")
		v.check(p.UserFilter == "" || strings.Contains(p.UserFilter, "{user}"), key+".user_filter", "%q has no {user}", p.UserFilter)
	} else {
		v.check(strings.Contains(p.UserDN, "{user}"), key+".user_dn", "%q has no {user}", p.UserDN)
		v.check(p.BindDN == "" && p.BindPassword == "" && p.BindPasswordFile == "", key+".bind_dn",
			"is for search then bind; with user_dn the user binds directly")
	}
	v.check(p.BindPassword == "" || p.BindPasswordFile == "", key+".bind_password", "give bind_password or bind_password_file, not both")
	v.check(p.GroupFilter == "" || p.GroupBaseDN != "" || p.BaseDN != "", key+".group_filter", "needs group_base_dn or base_dn")
	v.check(p.MaxConnections > 0, key+".max_connections", "%d is not positive", p.MaxConnections)
}

func (c *Config) validateJWT(v *validator, key string, p Provider) {
	v.check(p.Issuer != "", key+".issuer", "is required for a jwt provider")
	v.check(p.Audience != "", key+".audience", "is required for a jwt provider")
	u, err := url.Parse(p.JWKSURL)
	switch {
	case p.JWKSURL == "":
		v.add(key+".jwks_url", errors.New("is required for a jwt provider"))
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		v.add(key+".jwks_url", fmt.Errorf("%q: want https://host/path", p.JWKSURL))
	case u.Scheme == "http" && !p.InsecurePlaintext:
		v.add(key+".jwks_url", errors.New("an http:// key set lets anyone on the path forge tokens: use https://, or insecure_plaintext = true for a loopback address"))
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		v.add(key+".insecure_plaintext", fmt.Errorf("is only for a loopback address, not %q", u.Hostname()))
	}
	v.check(len(p.Groups) == 0 || p.GroupClaim != "", key+".groups", "needs a group_claim")
	v.check(!strings.Contains(p.BasicUser, ":"), key+".basic_user", "%q contains ':'", p.BasicUser)
	v.positive(key+".jwks_refresh", p.JWKSRefresh)
	v.positive(key+".jwks_min_interval", p.JWKSMinInterval)
	v.check(p.Leeway.Duration >= 0, key+".leeway", "%s is negative", p.Leeway.Duration)
}

// foreignKeys returns the keys set on p that are not of its type.
func (p Provider) foreignKeys() []string {
	ldap := p.Type == ProviderLDAP
	jwt := p.Type == ProviderJWT
	net := ldap || jwt
	var out []string
	for _, k := range []struct {
		name string
		set  bool
		ok   bool
	}{
		{"htpasswd", len(p.Htpasswd) > 0, p.Type == ProviderHtpasswd},
		{"url", p.URL != "", ldap}, {"start_tls", p.StartTLS, ldap},
		{"insecure_plaintext", p.InsecurePlaintext, net}, {"tls_ca", p.TLSCA != "", net},
		{"bind_dn", p.BindDN != "", ldap}, {"bind_password", p.BindPassword != "", ldap},
		{"bind_password_file", p.BindPasswordFile != "", ldap}, {"base_dn", p.BaseDN != "", ldap},
		{"user_filter", p.UserFilter != "", ldap}, {"user_dn", p.UserDN != "", ldap},
		{"name_attribute", p.NameAttribute != "", ldap},
		{"group_attribute", p.GroupAttribute != "", ldap}, {"group_base_dn", p.GroupBaseDN != "", ldap},
		{"group_filter", p.GroupFilter != "", ldap}, {"max_connections", p.MaxConnections != 0, ldap},
		{"issuer", p.Issuer != "", jwt}, {"audience", p.Audience != "", jwt}, {"jwks_url", p.JWKSURL != "", jwt},
		{"user_claim", p.UserClaim != "", jwt}, {"group_claim", p.GroupClaim != "", jwt},
		{"basic_user", p.BasicUser != "", jwt}, {"algorithms", p.Algorithms != nil, jwt},
		{"jwks_refresh", p.JWKSRefresh.Duration != 0, jwt}, {"jwks_min_interval", p.JWKSMinInterval.Duration != 0, jwt},
		{"leeway", p.Leeway.Duration != 0, jwt},
		{"groups", p.Groups != nil, net}, {"timeout", p.Timeout.Duration != 0, net},
		{"negative_cache_ttl", p.NegativeCacheTTL.Duration != 0, net},
	} {
		if k.set && !k.ok {
			out = append(out, k.name)
		}
	}
	return out
}

// validateListenerProviders checks a listener's providers key: names of
// [[auth.providers]] entries or "local" (with local users configured),
// none repeated, on a listener that authenticates with them.
func (c *Config) validateListenerProviders(v *validator, key string, l Listener) {
	if l.Providers == nil {
		return
	}
	switch {
	case l.URLUser != nil:
		v.add(key+".providers", errors.New("is not for a -L listener: its user is the URL's"))
		return
	case l.Auth == AuthNone:
		v.add(key+".providers", errors.New(`is for a listener that authenticates, and its auth is "none"`))
		return
	case len(l.Providers) == 0:
		v.add(key+".providers", errors.New(`is empty: name "local" or [[auth.providers]] entries, or leave the key out`))
		return
	}
	seen := make(map[string]int)
	for j, name := range l.Providers {
		k := fmt.Sprintf("%s.providers[%d]", key, j)
		if i, dup := seen[name]; dup {
			v.add(k, fmt.Errorf("%q is also %s.providers[%d]", name, key, i))
			continue
		}
		seen[name] = j
		switch {
		case name == LocalProvider:
			v.check(c.HasUsers(), k, `"local" but no users are configured: add [[auth.users]] or auth.htpasswd files`)
		case !slices.ContainsFunc(c.Auth.Providers, func(p Provider) bool { return p.Name == name }):
			v.add(k, fmt.Errorf("%q is not the name of an [[auth.providers]] entry", name))
		}
	}
	if len(l.Users) > 0 && !slices.Contains(l.Providers, LocalProvider) {
		v.add(key+".users", errors.New(`restricts the local users, and the listener's providers leave out "local"`))
	}
}

// validGroupName reports whether s is a group (or, with extra ".",
// provider) name: letters, digits, '-', '_' and extra.
func validGroupName(s, extra string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '-' || r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || strings.ContainsRune(extra, r))
	})
}

// resolveProviderPaths resolves the relative paths of [[auth.providers]]
// with resolve, for [Load].
func (c *Config) resolveProviderPaths(resolve func(*string)) {
	for i := range c.Auth.Providers {
		p := &c.Auth.Providers[i]
		for j := range p.Htpasswd {
			resolve(&p.Htpasswd[j])
		}
		resolve(&p.TLSCA)
		resolve(&p.BindPasswordFile)
	}
}
