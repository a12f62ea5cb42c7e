package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/crypto/bcrypt"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// ErrOpenProxy is wrapped by the [Config.Validate] error for a listener on
// a non-loopback address without authentication and without allow_open.
var ErrOpenProxy = errors.New("open proxy refused")

// protocols lists the listener protocols rustle speaks: the valid values
// of a listener's protocol key and of a -L URL's scheme.
var protocols = []string{"http", "https", "socks5", "mixed", ProtocolTransparent}

// Choices for the keys that take one of a few strings.
var (
	forwardedModes = []string{"none", "rfc7239", "x-forwarded-for"}
	logLevels      = []string{"debug", "info", "warn", "error"}
	logFormats     = []string{"text", "json"}
	// accessLogFormats are the accesslog package's formats.
	accessLogFormats = []string{"text", "json", "squid", "common", "combined", accessLogTemplate}
	authModes        = []string{"", AuthBasic, AuthNone}
	bcryptPrefixes   = []string{"$2a$", "$2b$", "$2y$"}
)

// Validate checks a configuration whose defaults are set (see
// [Config.SetDefaults]) and reports every problem, joined with
// [errors.Join], each an [*Error] whose Key names the key, as in
// "listen[1].address". It returns nil for a usable configuration.
//
// Beyond the type and range of each key, it refuses duplicate listener
// names and addresses, auth = "basic" with no users, user names that are
// empty, repeated or contain ':', users with not exactly one of password
// and bcrypt, a listener's users list on a listener that does not
// authenticate with the configured users, and an open proxy by accident: a listener whose host is not
// loopback (127.0.0.0/8, ::1 or "localhost"; ":3128", "0.0.0.0" and "[::]"
// are not) whose effective auth is "none", unless its allow_open is true.
// The admin address must be host:port and differ from every listener's;
// off loopback, the admin listener needs admin_access.token_file or
// htpasswd, or health_and_metrics_only.
func (c *Config) Validate() error {
	v := &validator{c: c}

	v.check(c.Workers >= 0, "workers", "%d is negative", c.Workers)
	v.check(c.SocketBufferBytes >= 0, "socket_buffer_bytes", "%d is negative", c.SocketBufferBytes)
	v.oneOf("forwarded", c.Forwarded, forwardedModes)
	v.check(c.MaxHeaderBytes > 0, "max_header_bytes", "%d is not positive", c.MaxHeaderBytes)
	v.check(c.GCPercent > 0, "gc_percent", "%d is not positive", c.GCPercent)
	v.check(c.GCFloorBytes > 0 || c.GCFloorBytes == -1, "gc_floor_bytes", "%d is neither positive nor -1 (no floor)", c.GCFloorBytes)
	v.oneOf("log.level", c.Log.Level, logLevels)
	v.oneOf("log.format", c.Log.Format, logFormats)
	v.oneOf("access_log.format", c.AccessLog.Format, accessLogFormats)
	switch al := c.AccessLog; {
	case al.Format == accessLogTemplate && al.Template == "":
		v.add("access_log.format", errors.New(`"template" needs access_log.template`))
	case al.Format == accessLogTemplate:
		if err := accesslog.ValidateTemplate(al.Template); err != nil {
			v.add("access_log.template", err)
		}
	case al.Template != "":
		v.add("access_log.template", fmt.Errorf(`is only for format = "template", not %q`, al.Format))
	}
	v.check(!strings.ContainsRune(c.AccessLog.Path, 0), "access_log.path", "contains a NUL byte")
	v.check(c.Metrics.MaxUsers > 0, "metrics.max_users", "%d is not positive", c.Metrics.MaxUsers)

	t := c.Timeouts
	v.positive("timeouts.read_header", t.ReadHeader)
	v.positive("timeouts.quic_handshake", t.QUICHandshake)
	v.positive("timeouts.connect", t.Connect)
	v.positive("timeouts.response_header", t.ResponseHeader)
	v.positive("timeouts.idle_client", t.IdleClient)
	v.positive("timeouts.idle_tunnel", t.IdleTunnel)
	v.positive("timeouts.write", t.Write)
	v.positive("timeouts.drain", t.Drain)
	v.positive("timeouts.udp_idle", t.UDPIdle)

	u := c.Upstream
	v.check(u.MaxIdlePerHost > 0 || u.MaxIdlePerHost == -1, "upstream.max_idle_per_host",
		"%d is neither positive nor -1 (no keep-alive)", u.MaxIdlePerHost)
	v.check(u.MaxIdle > 0, "upstream.max_idle", "%d is not positive", u.MaxIdle)
	v.positive("upstream.idle_timeout", u.IdleTimeout)

	c.validateHTTP2(v)
	c.validateHTTP3(v)
	c.validateAuth(v)
	c.validateProviders(v)
	c.validateListeners(v)
	c.validateAdmin(v)
	for i, p := range c.AllowPrivate {
		if _, err := acl.ParsePrefix(p); err != nil {
			v.add(fmt.Sprintf("allow_private[%d]", i), err)
		}
	}
	c.validateACL(v)
	c.validateLists(v)
	c.validateAuthz(v)
	c.validateLimits(v)
	c.validateDNS(v)
	c.validateEgress(v)
	c.validateRoutes(v)
	c.validateHeaderRules(v)
	c.validateQuota(v)
	c.validateIntercept(v)
	c.validateTransparent(v)
	return v.err()
}

// validateACL checks the access rules: actions, every criterion's
// entries, groups that exist, unique rule names, and allow_private on
// allow rules only.
func (c *Config) validateACL(v *validator) {
	a := c.ACL
	v.check(a.Default == acl.Allow || a.Default == acl.Deny, "acl.default", "%q is neither \"allow\" nor \"deny\"", a.Default)
	v.check(a.Mode == ACLEnforce || a.Mode == ACLAudit, "acl.mode", "%q is neither %q nor %q", a.Mode, ACLEnforce, ACLAudit)
	for _, g := range slices.Sorted(maps.Keys(a.Groups)) {
		members := a.Groups[g]
		key := "acl.groups." + g
		if g == "" || strings.ContainsFunc(g, func(r rune) bool {
			return !(r == '-' || r == '_' || '0' <= r && r <= '9' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z')
		}) {
			v.add("acl.groups", fmt.Errorf("group name %q: use letters, digits, '-' and '_'", g))
			continue
		}
		for j, u := range members {
			if err := acl.ParseUser(u); err != nil {
				v.add(fmt.Sprintf("%s[%d]", key, j), err)
			}
		}
	}
	names := make(map[string]int)
	for i, r := range a.Rules {
		key := fmt.Sprintf("acl.rules[%d]", i)
		if j, dup := names[r.Name]; dup {
			v.add(key+".name", fmt.Errorf("%q is also the name of acl.rules[%d]", r.Name, j))
		} else {
			names[r.Name] = i
		}
		switch r.Action {
		case acl.Allow:
		case acl.Deny, acl.Report:
			v.check(len(r.AllowPrivate) == 0, key+".allow_private", "is only for allow rules")
			v.check(r.SNI == "", key+".sni", "is only for allow rules")
		case "":
			v.add(key, errors.New(`action is required: "allow", "deny" or "report"`))
		default:
			v.add(key+".action", fmt.Errorf("%q is not \"allow\", \"deny\" or \"report\"", r.Action))
		}
		c.validateCriteria(v, key, r.Criteria)
		if _, err := sni.ParseMode(r.SNI); err != nil {
			v.add(key+".sni", err)
		}
		for j, s := range r.AllowPrivate {
			if _, err := acl.ParsePrefix(s); err != nil {
				v.add(fmt.Sprintf("%s.allow_private[%d]", key, j), err)
			}
		}
	}
}

// validateCriteria checks the criteria of the access rule or route at
// key with package acl's parsers.
func (c *Config) validateCriteria(v *validator, key string, cr Criteria) {
	each := func(field string, list []string, check func(string) error) {
		for j, s := range list {
			if err := check(s); err != nil {
				v.add(fmt.Sprintf("%s.%s[%d]", key, field, j), err)
			}
		}
	}
	each("clients", cr.Clients, func(s string) error { _, err := acl.ParsePrefix(s); return err })
	c.validateWho(v, key, cr.Who, true)
	each("hosts", cr.Hosts, acl.ParseHost)
	validateListSources(v, key, cr)
	each("ports", cr.Ports, func(s string) error { _, _, err := acl.ParsePorts(s); return err })
	each("methods", cr.Methods, acl.ParseMethod)
	each("protocols", cr.Protocols, func(s string) error { _, err := acl.ParseProtocol(s); return err })
	each("paths", cr.Paths, acl.ParsePath)
	validateSNIHosts(v, key, cr.SNIHosts)
}

// validateSNIHosts checks the sni_hosts of the table at key: host names,
// "*.suffix" and ".suffix", no addresses.
func validateSNIHosts(v *validator, key string, list []string) {
	for j, s := range list {
		if err := acl.ParseSNIHost(s); err != nil {
			v.add(fmt.Sprintf("%s.sni_hosts[%d]", key, j), err)
		}
	}
}

// validateWho checks the users and groups of the table at key: user
// names acl.ParseUser takes ("*" among them), and groups of [acl.groups]
// or, when providers is set, of an [[auth.providers]] entry's groups.
func (c *Config) validateWho(v *validator, key string, w Who, providers bool) {
	for j, u := range w.Users {
		if err := acl.ParseUser(u); err != nil {
			v.add(fmt.Sprintf("%s.users[%d]", key, j), err)
		}
	}
	for j, g := range w.Groups {
		if _, ok := c.ACL.Groups[g]; ok || providers && c.providerGroup(g) {
			continue
		}
		err := fmt.Errorf("group %q is not defined in [acl.groups]", g)
		if providers {
			err = fmt.Errorf("group %q is not defined in [acl.groups] nor by an [[auth.providers]] entry's groups", g)
		}
		v.add(fmt.Sprintf("%s.groups[%d]", key, j), err)
	}
}

// validateHTTP2 checks the [http2] table against the ranges RFC 9113
// allows (§6.5.2, §6.9.1); windows are at least the protocol's initial
// 65535, which clients may use before they see rustle's settings.
func (c *Config) validateHTTP2(v *validator) {
	h := c.HTTP2
	const maxWindow = 1<<31 - 1
	v.check(h.MaxConcurrentStreams > 0 && h.MaxConcurrentStreams <= maxWindow, "http2.max_concurrent_streams",
		"%d is not between 1 and %d", h.MaxConcurrentStreams, maxWindow)
	v.check(h.MaxHeaderListSize > 0 && h.MaxHeaderListSize <= 16<<20, "http2.max_header_list_size",
		"%d is not between 1 and %d", h.MaxHeaderListSize, 16<<20)
	v.check(h.InitialStreamWindow >= 65535 && h.InitialStreamWindow <= maxWindow, "http2.initial_stream_window",
		"%d is not between 65535 and %d", h.InitialStreamWindow, maxWindow)
	v.check(h.InitialConnWindow >= 65535 && h.InitialConnWindow <= maxWindow, "http2.initial_conn_window",
		"%d is not between 65535 and %d", h.InitialConnWindow, maxWindow)
	v.check(h.MaxFrameSize >= 16384 && h.MaxFrameSize <= 1<<24-1, "http2.max_frame_size",
		"%d is not between 16384 and %d", h.MaxFrameSize, 1<<24-1)
}

// validateLimits checks the [limits] table.
func (c *Config) validateLimits(v *validator) {
	l := c.Limits
	v.check(l.MaxConnections >= -1, "limits.max_connections", "%d is neither positive, 0 (derived) nor -1 (no limit)", l.MaxConnections)
	v.check(l.MaxConnectionsPerClient >= 0, "limits.max_connections_per_client", "%d is negative", l.MaxConnectionsPerClient)
	v.check(l.MaxConnectionsPerUser >= 0, "limits.max_connections_per_user", "%d is negative", l.MaxConnectionsPerUser)
	v.check(l.ConnectionRate >= 0, "limits.connection_rate", "%d is negative", l.ConnectionRate)
	v.check(l.ConnectionBurst >= 1 || l.ConnectionBurst == 0 && l.ConnectionRate <= 0, "limits.connection_burst",
		"%d is less than 1", l.ConnectionBurst)
	v.check(l.MaxTLSHandshakes > 0, "limits.max_tls_handshakes", "%d is not positive", l.MaxTLSHandshakes)
	v.check(l.AuthFailures > 0 || l.AuthFailures == -1, "limits.auth_failures", "%d is neither positive nor -1 (off)", l.AuthFailures)
	v.check(l.AuthFailuresPerAddress > 0 || l.AuthFailuresPerAddress == -1, "limits.auth_failures_per_address",
		"%d is neither positive nor -1 (off)", l.AuthFailuresPerAddress)
	v.positive("limits.auth_failure_window", l.AuthFailureWindow)
	v.positive("limits.auth_cooldown", l.AuthCooldown)
	v.check(l.UserBytesPerSecond >= 0, "limits.user_bytes_per_second", "%d is negative", l.UserBytesPerSecond)
	v.check(l.UserBytesBurst >= 1 || l.UserBytesBurst == 0 && l.UserBytesPerSecond <= 0, "limits.user_bytes_burst",
		"%d is less than 1", l.UserBytesBurst)
	c.validateSchedules(v)
}

// validateAdmin checks the admin listener's address: host:port like a
// listener's, and not the address of a listener; off loopback, with
// authentication (admin_access.token_file or htpasswd) unless it serves
// only health and metrics. It checks admin_access's keys too.
func (c *Config) validateAdmin(v *validator) {
	a := c.AdminAccess
	v.check(!strings.ContainsRune(a.TokenFile, 0), "admin_access.token_file", "contains a NUL byte")
	v.check(!strings.ContainsRune(a.Htpasswd, 0), "admin_access.htpasswd", "contains a NUL byte")
	for i, h := range a.Hosts {
		if err := checkAdminHost(h); err != nil {
			v.add(fmt.Sprintf("admin_access.hosts[%d]", i), err)
		}
	}
	if c.Admin == "" {
		return
	}
	host, canon, err := splitListenAddress(c.Admin)
	if err != nil {
		v.add("admin", err)
		return
	}
	if !isLoopback(host) && !c.AdminAuthenticates() && !a.HealthAndMetricsOnly {
		v.add("admin", fmt.Errorf("%q is not on loopback and the admin listener has no authentication: "+
			"anyone who reaches it could read every user's quota and revoke users; set admin_access.token_file "+
			"or admin_access.htpasswd, or admin_access.health_and_metrics_only = true to serve only /healthz, /readyz and /metrics",
			c.Admin))
	}
	if canon == "" {
		return
	}
	for i, l := range c.Listen {
		if _, lc, err := splitListenAddress(l.Address); err == nil && lc == canon {
			v.add("admin", fmt.Errorf("%q is also the address of listen[%d]", c.Admin, i))
		}
	}
}

func (c *Config) validateAuth(v *validator) {
	a := c.Auth
	v.check(a.Realm != "", "auth.realm", "is empty")
	v.check(!strings.ContainsFunc(a.Realm, func(r rune) bool { return r < ' ' || r == 0x7f || r == '"' || r == '\\' }),
		"auth.realm", "%q has a control character, '\"' or '\\'", a.Realm)
	for i, p := range a.Htpasswd {
		v.check(p != "", fmt.Sprintf("auth.htpasswd[%d]", i), "is empty")
	}
	v.positive("auth.cache_ttl", a.CacheTTL)
	v.check(a.CacheSize > 0, "auth.cache_size", "%d is not positive", a.CacheSize)

	seen := make(map[string]int)
	for i, u := range a.Users {
		key := fmt.Sprintf("auth.users[%d]", i)
		switch {
		case u.Name == "":
			v.add(key+".name", errors.New("is empty"))
		case strings.Contains(u.Name, ":"):
			v.add(key+".name", fmt.Errorf("%q contains ':'", u.Name))
		default:
			if j, dup := seen[u.Name]; dup {
				v.add(key+".name", fmt.Errorf("%q is also auth.users[%d]", u.Name, j))
			} else {
				seen[u.Name] = i
			}
		}
		switch {
		case (u.Password == "") == (u.Bcrypt == ""):
			v.add(key, errors.New("give exactly one of password and bcrypt"))
		case u.Bcrypt != "":
			if err := checkBcrypt(u.Bcrypt); err != nil {
				v.add(key+".bcrypt", err)
			}
		}
	}
}

// checkBcrypt checks that h looks like a bcrypt hash rustle accepts.
// The error does not quote h: it is a secret, if a weak one.
func checkBcrypt(h string) error {
	if !slices.ContainsFunc(bcryptPrefixes, func(p string) bool { return strings.HasPrefix(h, p) }) {
		return fmt.Errorf("not a bcrypt hash: want a $2a$, $2b$ or $2y$ prefix")
	}
	if _, err := bcrypt.Cost([]byte(h)); err != nil {
		return fmt.Errorf("not a bcrypt hash: %w", err)
	}
	return nil
}

func (c *Config) validateListeners(v *validator) {
	if len(c.Listen) == 0 {
		v.add("listen", errors.New("no listeners: add a [[listen]] table or a -L flag"))
	}
	names := make(map[string]int)
	addrs := make(map[string]int)
	for i, l := range c.Listen {
		key := fmt.Sprintf("listen[%d]", i)
		if l.Name != "" {
			if j, dup := names[l.Name]; dup {
				v.add(key+".name", fmt.Errorf("%q is also the name of listen[%d]", l.Name, j))
			} else {
				names[l.Name] = i
			}
		}
		v.check(l.ACLMode == "" || l.ACLMode == ACLEnforce || l.ACLMode == ACLAudit, key+".acl_mode",
			"%q is neither %q nor %q", l.ACLMode, ACLEnforce, ACLAudit)
		if !slices.Contains(protocols, l.Protocol) {
			v.add(key+".protocol", fmt.Errorf("%q is not one of %s", l.Protocol, strings.Join(protocols, ", ")))
		}
		if l.Protocol == "https" {
			v.check(l.TLS.Cert != "", key+".tls.cert", "is required on an https listener")
			v.check(l.TLS.Key != "", key+".tls.key", "is required on an https listener")
		} else if l.TLS.Set() {
			v.add(key+".tls", fmt.Errorf("is only for https listeners, not %q", l.Protocol))
		}
		c.validateALPN(v, key, l)
		c.validateKeyExchanges(v, key, l)
		c.validateProxyProtocolFrom(v, key, l)
		if !slices.Contains(authModes, l.Auth) {
			v.add(key+".auth", fmt.Errorf("%q is not \"basic\", \"none\" or \"\"", l.Auth))
		} else if l.Auth == AuthBasic && !c.HasUsers() && !c.HasProviders() && l.URLUser == nil {
			v.add(key+".auth", errors.New(`"basic" but no users: add [[auth.users]] or auth.htpasswd files`))
		}
		c.validateListenerUsers(v, key, l)
		c.validateListenerProviders(v, key, l)
		if _, err := sni.ParseMode(l.SNI); err != nil {
			v.add(key+".sni", err)
		}

		host, canon, err := splitListenAddress(l.Address)
		if err != nil {
			v.add(key+".address", err)
			continue
		}
		if canon != "" {
			if j, dup := addrs[canon]; dup {
				v.add(key+".address", fmt.Errorf("%q is also the address of listen[%d]", l.Address, j))
			} else {
				addrs[canon] = i
			}
		}
		// A transparent listener names no destination a client chose:
		// only the kernel's redirection gives it one (see
		// validateTransparent), so it is no open proxy.
		if !isLoopback(host) && c.EffectiveAuth(l) == AuthNone && !l.AllowOpen && l.Protocol != ProtocolTransparent {
			v.add(key, fmt.Errorf("%w: %q is not a loopback address and its auth is \"none\"; configure users, or set allow_open = true",
				ErrOpenProxy, l.Address))
		}
	}
}

// validateListenerUsers checks the users key of the listener at key:
// user names, none repeated, on a listener that authenticates with the
// configured users. Whether each name is a configured user is known only
// once the htpasswd files are read; the server checks it, reporting it
// with [Config.KeyError].
func (c *Config) validateListenerUsers(v *validator, key string, l Listener) {
	if len(l.Users) == 0 {
		return
	}
	switch {
	case l.URLUser != nil:
		v.add(key+".users", errors.New("is not for a -L listener: its user is the URL's"))
		return
	case l.Auth == AuthNone:
		v.add(key+".users", errors.New(`is for a listener that authenticates, and its auth is "none"`))
		return
	case !c.HasUsers():
		v.add(key+".users", errors.New("names users but none are configured: add [[auth.users]] or auth.htpasswd files"))
		return
	}
	seen := make(map[string]int)
	for j, name := range l.Users {
		k := fmt.Sprintf("%s.users[%d]", key, j)
		if err := acl.ParseUser(name); err != nil {
			v.add(k, err)
			continue
		}
		if i, dup := seen[name]; dup {
			v.add(k, fmt.Errorf("%q is also %s.users[%d]", name, key, i))
			continue
		}
		seen[name] = j
	}
}

// validateALPN checks a listener's alpn key: https only, not empty, each
// entry "h2" or "http/1.1" and none twice.
func (c *Config) validateALPN(v *validator, key string, l Listener) {
	if l.ALPN == nil {
		return
	}
	key += ".alpn"
	if l.Protocol != "https" {
		v.add(key, fmt.Errorf("is only for https listeners, not %q", l.Protocol))
		return
	}
	if len(l.ALPN) == 0 {
		v.add(key, fmt.Errorf("is empty: list %q, %q or both, or leave the key out for both", ALPNH2, ALPNHTTP1))
	}
	for i, p := range l.ALPN {
		switch {
		case p != ALPNH2 && p != ALPNHTTP1:
			v.add(fmt.Sprintf("%s[%d]", key, i), fmt.Errorf("%q is neither %q nor %q", p, ALPNH2, ALPNHTTP1))
		case slices.Index(l.ALPN, p) < i:
			v.add(fmt.Sprintf("%s[%d]", key, i), fmt.Errorf("%q is listed twice", p))
		}
	}
}

// validateProxyProtocolFrom checks a listener's proxy_protocol_from:
// only with proxy_protocol, not empty, each entry an address or prefix.
func (c *Config) validateProxyProtocolFrom(v *validator, key string, l Listener) {
	if l.ProxyProtocolFrom == nil {
		return
	}
	key += ".proxy_protocol_from"
	if !l.ProxyProtocol {
		v.add(key, errors.New("is only for listeners with proxy_protocol = true"))
		return
	}
	if len(l.ProxyProtocolFrom) == 0 {
		v.add(key, errors.New("is empty: list the balancers' addresses, or leave the key out to take the header from every peer"))
	}
	for i, p := range l.ProxyProtocolFrom {
		if _, err := acl.ParsePrefix(p); err != nil {
			v.add(fmt.Sprintf("%s[%d]", key, i), err)
		}
	}
}

// splitListenAddress checks a listen address, host:port with a numeric
// port and a bracketed IPv6 host, and returns its host and a canonical form
// for finding duplicates ("" for port 0, which never collides).
func splitListenAddress(addr string) (host, canon string, err error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			err = errors.New(ae.Err)
		}
		return "", "", fmt.Errorf("%q is not host:port (an IPv6 host is bracketed, as in \"[::1]:3128\"): %w", addr, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return "", "", fmt.Errorf("%q: port %q is not a number from 0 to 65535", addr, port)
	}
	if strings.HasPrefix(addr, "[") && !strings.Contains(host, ":") {
		return "", "", fmt.Errorf("%q: only an IPv6 host is bracketed", addr)
	}
	canonHost := strings.ToLower(host)
	if ip, err := netip.ParseAddr(host); err == nil {
		canonHost = ip.String()
	} else if host != "" && !isHostname(host) {
		return "", "", fmt.Errorf("%q: host %q is neither an IP address nor a host name", addr, host)
	}
	if n == 0 {
		return host, "", nil
	}
	return host, net.JoinHostPort(canonHost, strconv.FormatUint(n, 10)), nil
}

// isHostname reports whether s is a plausible DNS name: dot-separated
// labels of letters, digits and hyphens.
func isHostname(s string) bool {
	if len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(strings.TrimSuffix(s, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := range len(label) {
			if c := label[i]; !isBareKeyByte(c) || c == '_' {
				return false
			}
		}
	}
	return true
}

// isLoopback reports whether a listen host only accepts local clients:
// "localhost" or an address in 127.0.0.0/8 or ::1. The empty host (every
// address) is not loopback.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// checkAdminHost checks a name of admin_access.hosts: an IP address or
// a DNS name (letters, digits, '-', '_' and '.'), without a port.
func checkAdminHost(h string) error {
	if _, err := netip.ParseAddr(h); err == nil {
		return nil
	}
	if h == "" || len(h) > 253 {
		return fmt.Errorf("%q is not a host name", h)
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("%q is not a host name (an IP address or a DNS name, without a port)", h)
		}
	}
	return nil
}

// validator collects Validate's errors.
type validator struct {
	c    *Config
	errs []error
}

// add records a problem with key ("listen[1].address"), located in the
// configuration's file when it came from one.
func (v *validator) add(key string, err error) {
	v.errs = append(v.errs, v.c.KeyError(key, err))
}

// KeyError returns err as an [*Error] about key, a key as Validate names
// it ("listen[1].users[0]"), located at the key's line in the file c was
// parsed from, as Validate's errors are. It is for a problem found only
// once what the configuration names is loaded, such as a listener's user
// that no htpasswd file defines.
func (c *Config) KeyError(key string, err error) *Error {
	e := &Error{Key: key, Err: err}
	if c.src != "" {
		e.File = c.src
		e.Line = c.lines[pathString(keyPath(key))]
	}
	return e
}

// keyPath turns a Validate key such as "listen[1].address" into the path
// form the key locator records.
func keyPath(key string) []string {
	var path []string
	for _, part := range strings.Split(key, ".") {
		if i := strings.IndexByte(part, '['); i > 0 && strings.HasSuffix(part, "]") {
			path = append(path, part[:i], indexPrefix+part[i+1:len(part)-1])
			continue
		}
		path = append(path, part)
	}
	return path
}

func (v *validator) check(ok bool, key, format string, args ...any) {
	if !ok {
		v.add(key, fmt.Errorf(format, args...))
	}
}

func (v *validator) oneOf(key, val string, choices []string) {
	if !slices.Contains(choices, val) {
		v.add(key, fmt.Errorf("%q is not one of %s", val, strings.Join(choices, ", ")))
	}
}

func (v *validator) positive(key string, d Duration) {
	v.check(d.Duration > 0, key, "%s is not positive", d.Duration)
}

func (v *validator) err() error {
	return errors.Join(v.errs...)
}
