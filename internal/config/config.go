// Package config loads rustle's TOML configuration.
//
// The file rustle.example.toml at the root of the repository documents every
// key, its meaning and its default; this package follows it. [Load] and
// [Parse] decode a file strictly: an unknown key, a wrongly typed value or an
// unparsable duration is an [*Error] that names the file, the line and the
// dotted key. Decoding fills defaults ([Config.SetDefaults]) but does not
// check the result: call [Config.Validate] once every source of settings
// (the file, then command-line flags such as [ParseListenURL]) has been
// applied.
package config

import (
	_ "embed"
	"fmt"
	"runtime"
	"strconv"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
)

// Config is the whole of rustle's configuration. Field comments give the
// meaning of a zero value; [Config.SetDefaults] replaces zero values with
// their documented defaults.
type Config struct {
	// Workers is the number of worker loops; 0 means one per CPU core
	// available to the process (see [Config.WorkerCount]).
	Workers int `toml:"workers"`
	// SocketBufferBytes is set as SO_SNDBUF and SO_RCVBUF on client and
	// upstream sockets; 0 leaves the kernel's autotuning alone.
	SocketBufferBytes int `toml:"socket_buffer_bytes"`
	// GCPercent is the garbage collector's target (GOGC) for the process;
	// 0 means 25. A GOGC environment variable overrides it.
	GCPercent int `toml:"gc_percent"`
	// GCFloorBytes is the least the heap may grow over the live data
	// between two collections, whatever GCPercent says: the collector's
	// target is max(live × (1 + gc_percent/100), live + gc_floor_bytes).
	// 0 means 4194304 (4 MiB, what Go's runtime allows a small heap at
	// its default GOGC of 100); -1 means no floor (gc_percent alone). A
	// GOGC environment variable overrides it with gc_percent.
	GCFloorBytes int64 `toml:"gc_floor_bytes"`
	// Forwarded is the client-address header added to forwarded requests:
	// "none", "rfc7239" or "x-forwarded-for"; "" means "none".
	Forwarded string `toml:"forwarded"`
	// Via adds "Via: 1.1 rustle" to forwarded requests and responses;
	// false adds nothing. Requests sent to a parent carry rustle's loop
	// token in Via whatever it says.
	Via bool `toml:"via"`
	// MaxHeaderBytes is the largest request or response head accepted;
	// 0 means 65536.
	MaxHeaderBytes int `toml:"max_header_bytes"`
	// Admin is the host:port of the admin HTTP listener, which serves
	// /metrics, /healthz and /readyz; "" means no admin listener.
	Admin string `toml:"admin"`
	// AdminAccess says who may call the admin listener and which Host
	// names it answers; its zero value means no authentication, which
	// [Config.Validate] accepts only for an admin listener on loopback.
	AdminAccess AdminAccess `toml:"admin_access"`
	// ReadyRequiresParents makes /readyz answer 503 while a route through
	// parents has none up and no direct fallback; false means the routes
	// do not count for readiness (see routes.go).
	ReadyRequiresParents bool `toml:"ready_requires_parents"`
	// AllowPrivate lists destination ranges (IP addresses or CIDR
	// prefixes) that the private-destination guard lets through; empty
	// means the guard refuses every private, local and reserved address.
	AllowPrivate []string `toml:"allow_private"`

	// Log configures logging.
	Log Log `toml:"log"`
	// AccessLog configures the access log, one line per request or
	// tunnel.
	AccessLog AccessLog `toml:"access_log"`
	// Metrics configures optional metric series.
	Metrics Metrics `toml:"metrics"`
	// Timeouts holds every timeout rustle applies.
	Timeouts Timeouts `toml:"timeouts"`
	// Upstream configures the pool of keep-alive upstream connections.
	Upstream Upstream `toml:"upstream"`
	// HTTP2 configures HTTP/2, which https listeners offer with ALPN.
	HTTP2 HTTP2 `toml:"http2"`
	// HTTP3 configures HTTP/3 on the https listeners that turn it on.
	HTTP3 HTTP3 `toml:"http3"`
	// Auth configures proxy authentication.
	Auth Auth `toml:"auth"`
	// ACL is the access policy: ordered allow and deny rules.
	ACL ACL `toml:"acl"`
	// Lists configures the lists of hosts and clients rules and routes
	// load from files and URLs.
	Lists Lists `toml:"lists"`
	// Authz configures the external decision service asked after the
	// access rules; its zero value means none (see authz.go).
	Authz Authz `toml:"authz"`
	// Limits bounds connections, handshakes, failed authentications and
	// per-user byte rates.
	Limits Limits `toml:"limits"`
	// DNS configures rustle's own resolver; its zero value means the
	// system resolver.
	DNS DNS `toml:"dns"`
	// Egress configures the source address of upstream connections; its
	// zero value leaves it to the kernel.
	Egress Egress `toml:"egress"`
	// Quota holds the quotas of bytes and requests per user or group.
	Quota Quota `toml:"quota"`
	// Cluster configures the state instances share through Redis; its
	// zero value means none.
	Cluster Cluster `toml:"cluster"`
	// Listen holds one entry per listening address. Empty means none: a
	// configuration must get at least one listener from the file or from
	// the command line before it validates.
	Listen []Listener `toml:"listen"`
	// Parents are the parent proxies routes may send requests through;
	// empty means none (see routes.go).
	Parents []Parent `toml:"parents"`
	// Routes choose, first match wins, how a request reaches its
	// destination: direct or through parents; empty means every request
	// goes direct.
	Routes []Route `toml:"routes"`
	// Intercept is TLS interception: the CA, the rules naming the
	// tunnels rustle terminates, the bypass list (see intercept.go); its
	// zero value intercepts nothing.
	Intercept Intercept `toml:"intercept"`
	// PAC is the proxy auto-configuration file some listeners serve at
	// /proxy.pac; its zero value serves none (see transparent.go).
	PAC PAC `toml:"pac"`
	// HeaderRules edit the fields of forwarded requests and of their
	// responses for the requests each entry's criteria match (see
	// headers.go); empty means none beyond the routes' own.
	HeaderRules []HeaderRule `toml:"header_rules"`

	// src and lines locate keys in the file the configuration was parsed
	// from, so that Validate's errors can name file and line; both are
	// zero for a configuration not parsed from a file.
	src   string
	lines map[string]int
}

// AdminAccess guards the admin listener. With a token file or an
// htpasswd file, every endpoint but /healthz, /readyz and /metrics needs
// an Authorization header that one of them accepts. Whatever it says,
// the listener answers only the Host names of its own (see Hosts), and
// takes a call that changes state (POST /revoke) only with
// Content-Type: application/json and no foreign Origin.
type AdminAccess struct {
	// TokenFile is a file whose first line is the bearer token admin
	// clients send as "Authorization: Bearer TOKEN" (at least
	// MinAdminTokenLen characters, read at start); "" means no token.
	// [Load] resolves a relative path against the configuration file's
	// directory.
	TokenFile string `toml:"token_file"`
	// Htpasswd is an htpasswd file (bcrypt lines, as auth.htpasswd takes)
	// whose users admin clients name with Basic authorization; "" means
	// none. [Load] resolves a relative path.
	Htpasswd string `toml:"htpasswd"`
	// Hosts are further names (DNS names or IP addresses, without a
	// port) the admin listener answers in the Host header, beside its own
	// address, the host of admin, localhost and loopback addresses (and
	// any IP address when it is bound to 0.0.0.0 or ::); empty means no
	// further names. Another Host is answered 421 (DNS rebinding).
	Hosts []string `toml:"hosts"`
	// HealthAndMetricsOnly serves only /healthz, /readyz and /metrics:
	// /quota and /revoke answer 404. An admin listener off loopback needs
	// no authentication then. false serves every endpoint.
	HealthAndMetricsOnly bool `toml:"health_and_metrics_only"`
}

// MinAdminTokenLen is the shortest bearer token admin_access.token_file
// may hold.
const MinAdminTokenLen = 16

// AdminAuthenticates reports whether the admin listener requires
// authentication: admin_access names a token file or an htpasswd file.
func (c *Config) AdminAuthenticates() bool {
	return c.AdminAccess.TokenFile != "" || c.AdminAccess.Htpasswd != ""
}

// Log configures logging.
type Log struct {
	// Level is "debug", "info", "warn" or "error"; "" means "info".
	Level string `toml:"level"`
	// Format is "text" (logfmt) or "json"; "" means "text".
	Format string `toml:"format"`
}

// AccessLog configures the access log.
type AccessLog struct {
	// Enabled writes one line per request or tunnel; false writes none.
	Enabled bool `toml:"enabled"`
	// Format is "text" (compact, positional), "json" (JSON lines),
	// "squid" (Squid's native access.log), "common" or "combined" (NCSA
	// Common and Combined Log Format), or "template" (Template); ""
	// means "template" when Template is set, "text" otherwise.
	Format string `toml:"format"`
	// Template is the line of format "template": literal text with
	// {name} fields (accesslog.TemplateFields), such as "{combined}
	// {upstream} {source}"; "" means none, and is refused with format
	// "template". It is refused with any other format.
	Template string `toml:"template"`
	// Path is the file lines are appended to, reopened on SIGUSR1; ""
	// means standard output. [Load] resolves a relative path against the
	// configuration file's directory.
	Path string `toml:"path"`
}

// Metrics configures optional metric series; the others are always
// served when an admin listener is configured.
type Metrics struct {
	// PerUser adds request and byte counters labelled by user name;
	// false means none.
	PerUser bool `toml:"per_user"`
	// MaxUsers bounds the users with series of their own; the rest share
	// one "_other" series. 0 means 100.
	MaxUsers int `toml:"max_users"`
}

// Timeouts holds every timeout rustle applies. A zero field means its
// documented default; negative values are rejected by [Config.Validate].
type Timeouts struct {
	// ReadHeader is the time a client has to send a complete request head,
	// counted from its first byte; zero means 30s.
	ReadHeader Duration `toml:"read_header"`
	// ClientHello is the time a client of an https listener has, from
	// its connection, to send the first record of its TLS handshake (the
	// ClientHello) whole; no handshake slot is held meanwhile. It is also
	// the time a tunnel's client has, from the tunnel's answer, to send
	// its whole ClientHello when the SNI check reads it (see
	// [Listener.SNI]). Zero means 10s.
	ClientHello Duration `toml:"client_hello"`
	// QUICHandshake is the time a QUIC client of an https listener with
	// http3 on has to complete its handshake, from its first Initial; a
	// handshake that receives nothing from the client for half of it is
	// given up sooner. Zero means 10s.
	QUICHandshake Duration `toml:"quic_handshake"`
	// Connect is the time to resolve and connect to an upstream; zero
	// means 10s.
	Connect Duration `toml:"connect"`
	// ResponseHeader is the time an upstream has to send its response head
	// after the request was sent; zero means 60s.
	ResponseHeader Duration `toml:"response_header"`
	// IdleClient is how long a keep-alive client connection may sit idle
	// between requests; zero means 60s.
	IdleClient Duration `toml:"idle_client"`
	// IdleTunnel is how long a CONNECT tunnel may carry no bytes in either
	// direction; zero means 1h.
	IdleTunnel Duration `toml:"idle_tunnel"`
	// Write is the time a single write to a client or upstream may block;
	// zero means 60s.
	Write Duration `toml:"write"`
	// Drain is how long in-flight requests and tunnels get to finish after
	// SIGTERM or SIGINT; zero means 15s.
	Drain Duration `toml:"drain"`
	// UDPIdle closes a SOCKS5 UDP association when no datagram has passed
	// through it in either direction for this long; zero means 60s.
	UDPIdle Duration `toml:"udp_idle"`
}

// Upstream configures the pool of keep-alive upstream connections.
type Upstream struct {
	// MaxIdlePerHost is the number of idle connections kept per origin
	// (host:port), those of every user (each connection is reused only
	// by its own) counted together; 0 means 64 and -1 disables upstream
	// keep-alive.
	MaxIdlePerHost int `toml:"max_idle_per_host"`
	// MaxIdle is the number of idle connections kept in all; 0 means 4096.
	MaxIdle int `toml:"max_idle"`
	// IdleTimeout closes a pooled connection unused for this long; zero
	// means 90s.
	IdleTimeout Duration `toml:"idle_timeout"`
}

// HTTP2 configures HTTP/2 on https listeners: its limits and
// flow-control windows, per client connection.
type HTTP2 struct {
	// MaxConcurrentStreams is the number of streams a client may have open
	// at once; a stream beyond it is refused (REFUSED_STREAM). 0 means 100.
	MaxConcurrentStreams int `toml:"max_concurrent_streams"`
	// MaxHeaderListSize is the largest request header list accepted, as
	// HTTP/2 counts it (names, values and 32 bytes per field); a larger
	// one is answered 431. 0 means 65536.
	MaxHeaderListSize int `toml:"max_header_list_size"`
	// InitialStreamWindow is each stream's flow-control window: the
	// request-body or tunnel bytes a client may send ahead of the
	// upstream taking them. 0 means 262144 (256 KiB).
	InitialStreamWindow int `toml:"initial_stream_window"`
	// InitialConnWindow is the connection's flow-control window; the bytes
	// buffered for all of a connection's streams stay under about twice
	// it. 0 means 1048576 (1 MiB).
	InitialConnWindow int `toml:"initial_conn_window"`
	// MaxFrameSize is the largest frame payload rustle accepts. 0 means
	// 16384.
	MaxFrameSize int `toml:"max_frame_size"`
}

// Auth configures proxy authentication.
type Auth struct {
	// Realm is the realm sent in Proxy-Authenticate; "" means "rustle".
	Realm string `toml:"realm"`
	// Htpasswd lists files of "user:bcrypt-hash" lines. [Load] resolves
	// relative paths against the configuration file's directory. Empty
	// means no files.
	Htpasswd []string `toml:"htpasswd"`
	// CacheTTL is how long a verdict on a Proxy-Authorization value is
	// cached; zero means 5m.
	CacheTTL Duration `toml:"cache_ttl"`
	// CacheSize is the most verdicts cached; 0 means 10000.
	CacheSize int `toml:"cache_size"`
	// Users are inline users, in addition to those in the htpasswd files.
	Users []User `toml:"users"`
	// Providers are identity providers beside the users above (LDAP
	// directories, token issuers, htpasswd files of their own); see
	// providers.go. Empty means none.
	Providers []Provider `toml:"providers"`
}

// User is one inline user. Exactly one of Password and Bcrypt is set.
type User struct {
	// Name is the user name; it is not empty and has no ':'.
	Name string `toml:"name"`
	// Password is a plain-text password, compared in constant time; ""
	// means the user has a Bcrypt hash instead.
	Password string `toml:"password"`
	// Bcrypt is a bcrypt hash ($2a$, $2b$ or $2y$); "" means the user has
	// a plain Password instead.
	Bcrypt string `toml:"bcrypt"`
}

// ACL is the access policy: rules tried in order, the first that matches
// deciding (see package acl). With no rules every request is allowed, as
// far as authentication and the private-destination guard let it through.
type ACL struct {
	// Default is the action when rules exist and none matches: "allow" or
	// "deny"; "" means "deny".
	Default string `toml:"default"`
	// Mode is "enforce" (refuse what the rules deny) or "audit" (let it
	// through, logged with would_deny, as if every deny rule and the
	// default were report rules); "" means "enforce". A listener's
	// acl_mode replaces it for the listener. The private-destination
	// guard is never in audit mode.
	Mode string `toml:"mode"`
	// Groups maps a group name to its members' user names, for rules'
	// groups criterion; nil means no groups.
	Groups map[string][]string `toml:"groups"`
	// Rules are tried in order; empty means no policy.
	Rules []ACLRule `toml:"rules"`
}

// ACLRule is one access rule. Every criterion is a list of alternatives;
// an empty list matches anything, and a rule matches when all its
// criteria do.
type ACLRule struct {
	// Name names the rule in logs; "" means "rules[N]" (N from 0).
	Name string `toml:"name"`
	// Action is "allow", "deny" or "report" (a deny rule in audit mode:
	// the requests it would deny are let through, logged with
	// would_deny); "" is refused by Validate.
	Action string `toml:"action"`
	// Criteria are what the rule matches a request by.
	Criteria
	// AllowPrivate lists private destination ranges that requests this
	// (allow) rule matches may reach; empty means none beyond the
	// top-level allow_private.
	AllowPrivate []string `toml:"allow_private"`
	// SNI is the SNI check of the tunnels this (allow) rule allows:
	// "off", "log" or "match" (see [Listener.SNI]); it replaces the
	// listener's. "" means the listener's.
	SNI string `toml:"sni"`
}

// Rule returns r as package acl compiles it.
func (r ACLRule) Rule() acl.Rule {
	ar := r.Criteria.Rule()
	ar.Name, ar.Action, ar.AllowPrivate, ar.SNI = r.Name, r.Action, r.AllowPrivate, r.SNI
	return ar
}

// Criteria are what an access rule and a route match a request by (see
// package acl), with one syntax and meaning for both. Every criterion is
// a list of alternatives; an empty list matches anything, and a request
// matches when all criteria do.
type Criteria struct {
	// Clients are client IP addresses and CIDR prefixes.
	Clients []string `toml:"clients"`
	// ClientsFile is a file of more client addresses and prefixes, one
	// a line, as HostsFile; "" means none.
	ClientsFile string `toml:"clients_file"`
	// ClientsURL is a URL of such a list, as HostsURL; "" means none.
	ClientsURL string `toml:"clients_url"`
	// Who is the users and groups criterion; groups may be those of
	// [acl.groups] or of an [[auth.providers]] entry's groups. Both empty
	// match any request, unauthenticated ones too; otherwise a request
	// without authentication matches neither.
	Who
	// Hosts are destinations: "example.com", "*.example.com" (names
	// under it), ".example.com" (it and names under it), IP addresses
	// and CIDR prefixes.
	Hosts []string `toml:"hosts"`
	// HostsFile is a file of more hosts entries, one a line (and
	// hosts-file lines, "0.0.0.0 ads.example"; see acl.ParseList), read
	// at start and on every reload; "" means none. [Load] resolves a
	// relative path against the configuration file's directory.
	HostsFile string `toml:"hosts_file"`
	// HostsURL is an http or https URL of such a list, fetched at start
	// and every lists.refresh; a "#sha256=HEX" fragment pins its content.
	// "" means none. Until it first loads, an allow rule matches nothing
	// by it and a deny or report rule everything (a route: nothing).
	HostsURL string `toml:"hosts_url"`
	// Ports are destination ports ("443") and ranges ("8000-8999").
	Ports []string `toml:"ports"`
	// Methods are request methods ("GET", "CONNECT").
	Methods []string `toml:"methods"`
	// Protocols are "http", "connect", "websocket", "socks5", "socks5-udp",
	// "socks4", "udp" (an HTTP/3 CONNECT-UDP flow) and "https" (a request
	// inside a tunnel rustle intercepts, see [Intercept]).
	Protocols []string `toml:"protocols"`
	// Paths are request paths: "/v1/models" exactly, or "/v1/*", every
	// path that begins with "/v1/"; matched against an HTTP request's
	// path (plain or intercepted) without its query, its dot segments
	// resolved and its percent-encoded unreserved characters decoded, as
	// an origin reads it. A tunnel has no path and matches none. Empty
	// means any.
	Paths []string `toml:"paths"`
	// SNIHosts are server names, as hosts without IP addresses and
	// prefixes, matched against the server_name of a tunnel's TLS
	// ClientHello (CONNECT, SOCKS CONNECT): a tunnel such a rule or route
	// could match reads its hello before it is dialled, whatever its
	// listener's sni (see [Listener.SNI]); a request without a hello (plain
	// HTTP, WebSocket, UDP, a tunnel whose first bytes are not TLS or
	// whose hello names no server) matches none. Empty means any.
	SNIHosts []string `toml:"sni_hosts"`
}

// Rule returns c as the criteria of an acl.Rule (no name, action,
// allow_private or sni, and no lists: the caller loads those, see
// ListSources).
func (c Criteria) Rule() acl.Rule {
	return acl.Rule{Clients: c.Clients, Users: c.Users, Groups: c.Groups, Hosts: c.Hosts,
		Ports: c.Ports, Methods: c.Methods, Protocols: c.Protocols, Paths: c.Paths, SNIHosts: c.SNIHosts}
}

// Who selects users: the users and groups keys of every table that
// applies to some users ([[acl.rules]], [[routes]], [[egress.rules]],
// [[quota.rules]], [[limits.schedules]]), which mean the same in each,
// matched by one matcher (acl.Selector): a users entry is a user name,
// compared exactly (case and a session key included), or "*", every
// authenticated user; a group's members are selected as if listed. Each
// table says what it does when both are empty and which groups it may
// name.
type Who struct {
	// Users are user names, or "*" for every authenticated user; empty
	// means none by name.
	Users []string `toml:"users"`
	// Groups are names of groups whose members are selected; empty means
	// none.
	Groups []string `toml:"groups"`
}

// Selector returns w compiled with the configuration's groups: those of
// [acl.groups], and, when providers is set, those [[auth.providers]]
// entries give.
func (c *Config) Selector(w Who, providers bool) acl.Selector {
	var pg []string
	if providers {
		pg = c.ProviderGroups()
	}
	return acl.NewSelector(acl.Who(w), c.ACL.Groups, pg)
}

// Limits bounds what clients may hold and how fast they may come. A zero
// field means its documented default; see each field.
type Limits struct {
	// MaxConnections bounds the client connections open at once, tunnels
	// included, each HTTP/2 stream holding an upstream beyond a
	// connection's first counting as one more; 0 means derived from the
	// open-file limit at start, two descriptors each after a small reserve
	// and a pool of splice pipes for tunnels in flight (see
	// [Limits.DescriptorBudget]), and -1 means no limit. A limit the
	// open-file limit cannot hold is lowered to what it holds, with a
	// warning. The splice pipes get the descriptors the connections leave.
	MaxConnections int `toml:"max_connections"`
	// MaxConnectionsPerClient bounds the connections of one client IP
	// address; 0 means no limit.
	MaxConnectionsPerClient int `toml:"max_connections_per_client"`
	// MaxConnectionsPerUser bounds the connections authenticated as one
	// user, HTTP/2 streams counted as for MaxConnections; 0 means no
	// limit.
	MaxConnectionsPerUser int `toml:"max_connections_per_user"`
	// ConnectionRate is the new connections per second one client IP
	// address may open (a token bucket); 0 means no limit.
	ConnectionRate int `toml:"connection_rate"`
	// ConnectionBurst is that bucket's size; 0 means twice
	// ConnectionRate.
	ConnectionBurst int `toml:"connection_burst"`
	// MaxTLSHandshakes bounds the TLS handshakes in progress at once on
	// https listeners, over TCP and QUIC together; 0 means 256.
	MaxTLSHandshakes int `toml:"max_tls_handshakes"`
	// AuthFailures is the number of failed authentications from one
	// client address with one user name within AuthFailureWindow after
	// which that name is refused from that address for AuthCooldown
	// (other names from the address are not); 0 means 10 and -1 turns
	// the check off.
	AuthFailures int `toml:"auth_failures"`
	// AuthFailuresPerAddress is the number of failed authentications from
	// one client address, whatever the user names, within
	// AuthFailureWindow after which the whole address is refused for
	// AuthCooldown; 0 means 5 × AuthFailures (50), or off when
	// AuthFailures is -1; -1 turns the check off.
	AuthFailuresPerAddress int `toml:"auth_failures_per_address"`
	// AuthFailureWindow is the window failures are counted in; zero
	// means 1m.
	AuthFailureWindow Duration `toml:"auth_failure_window"`
	// AuthCooldown is how long an address, or a user name at an address,
	// that reached its bound is refused; zero means 5m.
	AuthCooldown Duration `toml:"auth_cooldown"`
	// UserBytesPerSecond bounds the bytes each user moves per second, both
	// directions together (a token bucket); 0 means no limit.
	UserBytesPerSecond int `toml:"user_bytes_per_second"`
	// UserBytesBurst is that bucket's size; 0 means UserBytesPerSecond
	// (one second's worth).
	UserBytesBurst int `toml:"user_bytes_burst"`
	// Schedules set the byte rate of the users they select on some days
	// and hours, in place of UserBytesPerSecond: the first schedule
	// selecting a user whose window holds decides. Empty means none.
	Schedules []Schedule `toml:"schedules"`
}

// Descriptor budget of [Limits.DescriptorBudget]: descriptorReserve
// descriptors are kept for listeners, logs, users and certificate files,
// the splice pipes get a pool of nofile/pipeShare (at least minPipes,
// two descriptors each), and the connections (two descriptors each) the
// rest.
const (
	descriptorReserve = 128
	pipeShare         = 64 // nofile/64 pipes, nofile/32 descriptors
	minDerivedConns   = 64
	minPipes          = 16
)

// ConnectionLimit returns the connection limit in effect for a process
// whose soft open-file limit is nofile: the first result of
// [Limits.DescriptorBudget].
func (l Limits) ConnectionLimit(nofile uint64) int {
	conns, _ := l.DescriptorBudget(nofile)
	return conns
}

// DescriptorBudget splits the soft open-file limit nofile between client
// connections and the splice pipes of tunnels in flight, so that new
// clients are refused before descriptors run out. An idle tunnel holds
// its two sockets and no pipe, so the connections get nearly all of
// them: the connections that fit are (nofile - 128 - 2*(nofile/64)) / 2,
// at least 64, which leaves a pool of nofile/64 pipes (at least 16). conns
// is the connection limit: those that fit when MaxConnections is 0,
// MaxConnections when it is positive and fits, those that fit when it
// does not (see [Limits.Lowered]), and 0 (no limit) when it is -1. pipes
// is how many splice pipes (two descriptors each, idle pooled ones
// included) the tunnel engines may hold together: what the connections
// leave, (nofile - 128 - 2*conns) / 2, at least 16, or the pool with no
// connection limit. A tunnel direction past it relays through memory
// instead.
func (l Limits) DescriptorBudget(nofile uint64) (conns, pipes int) {
	n := int64(min(nofile, 1<<40))
	pool := max(n/pipeShare, minPipes)
	if l.MaxConnections < 0 {
		return 0, int(pool)
	}
	fit := int(max((n-descriptorReserve-2*pool)/2, minDerivedConns))
	conns = fit
	if l.MaxConnections > 0 {
		conns = min(l.MaxConnections, fit)
	}
	return conns, int(max((n-descriptorReserve-2*int64(conns))/2, minPipes))
}

// Lowered reports whether a process whose soft open-file limit is nofile
// holds fewer connections than MaxConnections asks for, and how many it
// holds: the connection limit [Limits.DescriptorBudget] puts in its place.
func (l Limits) Lowered(nofile uint64) (conns int, lowered bool) {
	conns, _ = l.DescriptorBudget(nofile)
	return conns, l.MaxConnections > 0 && conns < l.MaxConnections
}

// OpenFilesFor returns the smallest soft open-file limit under which
// [Limits.DescriptorBudget] holds conns connections, the pipes' pool
// included: what to raise the limit to for a max_connections it lowered.
func OpenFilesFor(conns int) uint64 {
	need := func(n int64) bool { return (n-descriptorReserve-2*max(n/pipeShare, minPipes))/2 >= int64(conns) }
	n := (2*int64(max(conns, 0)) + descriptorReserve) * pipeShare / (pipeShare - 2)
	for n > 0 && need(n-1) {
		n--
	}
	for !need(n) {
		n++
	}
	return uint64(n)
}

// Listener is one listening address.
type Listener struct {
	// Name is used in logs; "" means protocol and address, as in
	// "http 127.0.0.1:3128".
	Name string `toml:"name"`
	// Address is the host:port to listen on; an IPv6 host is bracketed
	// ("[::1]:3128") and an empty host (":3128") means every address.
	Address string `toml:"address"`
	// Protocol is what the listener speaks: "http" (an HTTP proxy),
	// "https" (the same over TLS: set TLS), "socks5" (SOCKS5, and SOCKS4
	// and 4a for CONNECT), "mixed" (http, socks5 and socks4 on one port,
	// told apart by the first byte) or "transparent" (connections the
	// kernel redirected to rustle, from clients that know of no proxy:
	// see Mode). "" means "http".
	Protocol string `toml:"protocol"`
	// Mode is how a "transparent" listener's connections reach it:
	// "redirect" (nftables/iptables REDIRECT or DNAT: the original
	// destination is read with SO_ORIGINAL_DST) or "tproxy" (TPROXY: the
	// socket is IP_TRANSPARENT and the destination is the connection's
	// local address; needs CAP_NET_ADMIN). "" means "redirect" on a
	// transparent listener; refused on the other protocols.
	Mode string `toml:"mode"`
	// Auth is "basic" or "none"; "" means "basic" when any user is
	// configured, or the listener has a URLUser, and "none" otherwise (see
	// [Config.EffectiveAuth]).
	Auth string `toml:"auth"`
	// Users restricts the listener to these configured users (names from
	// [[auth.users]] or the htpasswd files): another user's credentials,
	// and a client certificate naming another user, are refused on it as
	// unknown. Empty means every configured user. The users of
	// [[auth.providers]] are not restricted by it.
	Users []string `toml:"users"`
	// Providers names the identity providers the listener tries, in
	// order: [[auth.providers]] names, and "local" for the users of
	// [[auth.users]] and auth.htpasswd. nil means "local" (when users
	// are configured) and then every provider (see
	// [Config.ListenerProviders]); an empty list is refused.
	Providers []string `toml:"providers"`
	// URLUser is the user a -L URL's userinfo names (see
	// [ParseListenURL]): the listener's only user, who authenticates on
	// no other listener; the configured users do not authenticate on it.
	// nil means none: the listener takes the configured users. It cannot
	// be set in a file.
	URLUser *User `toml:"-"`
	// AllowOpen permits a non-loopback listener without authentication;
	// false refuses such an open proxy.
	AllowOpen bool `toml:"allow_open"`
	// ProxyProtocol makes the listener expect a PROXY protocol header (v1
	// or v2, from a load balancer) first on every connection, within
	// timeouts.read_header, and take the client address it carries for
	// ACLs, limits, Forwarded fields and the access log; connections
	// without a valid header are closed. false (the default) reads no
	// header: the client address is the socket's peer.
	ProxyProtocol bool `toml:"proxy_protocol"`
	// ProxyProtocolFrom lists the peers (IP addresses or CIDR prefixes:
	// the load balancers) a proxy_protocol listener takes connections
	// from; a connection from any other peer is closed before a byte of
	// it is read, header or not. nil means every peer, trusted to send
	// the header; an empty list is refused, and so is the key without
	// proxy_protocol = true.
	ProxyProtocolFrom []string `toml:"proxy_protocol_from"`
	// TLS is the certificate of an "https" listener, required for it and
	// refused for the other protocols; its zero value means no TLS.
	TLS ListenerTLS `toml:"tls"`
	// ALPN lists the protocols an "https" listener offers in the TLS
	// handshake, "h2" and "http/1.1", in the order it prefers them: a
	// client offering both gets the first. nil means ["h2", "http/1.1"]
	// (see [Listener.EffectiveALPN]); an empty list is refused, and so is
	// the key on the other protocols. With "http/1.1" in the list, a
	// client that chose "h2" and then speaks HTTP/1.1 is served HTTP/1.1.
	ALPN []string `toml:"alpn"`
	// KeyExchanges lists the TLS key exchanges an "https" listener
	// offers, most preferred first, named as Go names them
	// ("X25519MLKEM768", "X25519", "CurveP256"; see
	// tlsconf.KeyExchangeNames): a client gets the first one it supports.
	// nil means Go's default, the post-quantum hybrid X25519MLKEM768 for
	// every client that supports it; an empty list is refused, and so is
	// the key on the other protocols.
	KeyExchanges []string `toml:"key_exchanges"`
	// Egress is the listener's source of upstream connections, replacing
	// the global [egress] when any of its keys is set.
	Egress ListenerEgress `toml:"egress"`
	// ACLMode is "enforce" or "audit" (see [ACL.Mode]) for the
	// listener's requests; "" means acl.mode.
	ACLMode string `toml:"acl_mode"`
	// HTTP3 serves HTTP/3 (QUIC) on an "https" listener's port number
	// over UDP, with its certificate and users (see [HTTP3]); false
	// serves TCP only. Refused on the other protocols.
	HTTP3 bool `toml:"http3"`
	// SNI is the SNI check of the listener's tunnels (CONNECT on every
	// HTTP version, SOCKS CONNECT): "log" reads each tunnel's TLS
	// ClientHello before the tunnel is dialled (the client is answered
	// first, since it sends its hello only then) and logs its
	// server_name; "match" also closes, before any byte reaches the
	// origin, a tunnel whose hello names another host than the tunnel's,
	// none where the tunnel named a host, or that is no ClientHello;
	// "off" reads nothing. An [[acl.rules]] entry's sni replaces it for
	// the tunnels the rule allows. "" means "off".
	SNI string `toml:"sni"`
}

// ALPN protocol names, the values a listener's alpn key takes.
const (
	// ALPNH2 is HTTP/2 over TLS.
	ALPNH2 = "h2"
	// ALPNHTTP1 is HTTP/1.1.
	ALPNHTTP1 = "http/1.1"
)

// defaultALPN is what an https listener offers without an alpn key.
var defaultALPN = []string{ALPNH2, ALPNHTTP1}

// EffectiveALPN returns the ALPN protocols the listener offers: its ALPN,
// or ["h2", "http/1.1"] when that is nil. The result must not be
// modified.
func (l Listener) EffectiveALPN() []string {
	if l.ALPN == nil {
		return defaultALPN
	}
	return l.ALPN
}

// ListenerTLS configures TLS towards the clients of an "https" listener.
type ListenerTLS struct {
	// Cert and Key are PEM files of the certificate chain and its key;
	// relative paths are resolved against the config file's directory.
	// Both are required on an "https" listener; "" means unset.
	Cert string `toml:"cert"`
	Key  string `toml:"key"`
	// ClientCA is a PEM bundle of CAs whose client certificates
	// authenticate a connection, as an alternative to Basic credentials;
	// "" means client certificates are not asked for.
	ClientCA string `toml:"client_ca"`
	// KTLS asks for kernel TLS. false (the default) uses Go's TLS; true
	// is refused at start with the reason, as this build has no kTLS.
	KTLS bool `toml:"ktls"`
}

// Set reports whether any TLS key is set.
func (t ListenerTLS) Set() bool {
	return t.Cert != "" || t.Key != "" || t.ClientCA != "" || t.KTLS
}

// Duration is a [time.Duration] written in TOML as a Go duration string
// such as "10s", "1m30s" or "2h".
type Duration struct {
	time.Duration
}

// UnmarshalText parses a Go duration string.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := parseDuration(string(text))
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	d.Duration = v
	return nil
}

// MarshalText formats the duration as a Go duration string.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.Duration.String()), nil
}

// parseDuration is [time.ParseDuration] with a message that says what is
// expected.
func parseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %s: want a Go duration such as \"10s\", \"1m30s\" or \"2h\"", strconv.Quote(s))
	}
	return v, nil
}

// Documented defaults, applied by [Config.SetDefaults].
const (
	defaultForwarded      = "none"
	defaultMaxHeaderBytes = 65536
	defaultGCPercent      = 25
	defaultGCFloorBytes   = 4 << 20
	defaultLogLevel       = "info"
	defaultLogFormat      = "text"
	defaultAccessLogFmt   = "text"
	accessLogTemplate     = "template" // the format when only a template is set
	defaultMaxUsers       = 100
	defaultReadHeader     = 30 * time.Second
	defaultClientHello    = 10 * time.Second
	defaultQUICHandshake  = 10 * time.Second
	defaultConnect        = 10 * time.Second
	defaultResponseHeader = 60 * time.Second
	defaultIdleClient     = 60 * time.Second
	defaultIdleTunnel     = time.Hour
	defaultWrite          = 60 * time.Second
	defaultDrain          = 15 * time.Second
	defaultUDPIdle        = 60 * time.Second
	defaultMaxIdlePerHost = 64
	defaultMaxIdle        = 4096
	defaultIdleTimeout    = 90 * time.Second
	defaultH2Streams      = 100
	defaultH2HeaderList   = 65536
	defaultH2StreamWindow = 256 << 10
	defaultH2ConnWindow   = 1 << 20
	defaultH2FrameSize    = 16384
	defaultRealm          = "rustle"
	defaultCacheTTL       = 5 * time.Minute
	defaultCacheSize      = 10000
	defaultProtocol       = "http"
	defaultACLDefault     = "deny"
	defaultTLSHandshakes  = 256
	defaultAuthFailures   = 10
	// defaultAuthPerAddress is how many times auth_failures an address
	// may fail, whatever the names, before it cools down as a whole.
	defaultAuthPerAddress = 5
	defaultAuthWindow     = time.Minute
	defaultAuthCooldown   = 5 * time.Minute
)

// SetDefaults replaces every zero value that has a documented default with
// that default. It is the one place defaults live, and it is idempotent.
// Values with a meaning at zero (Workers, SocketBufferBytes, Via, Admin,
// AccessLog.Enabled and Path, Metrics.PerUser, a listener's Auth,
// AllowOpen, AllowPrivate, the connection limits) are left alone.
func (c *Config) SetDefaults() {
	setString(&c.Forwarded, defaultForwarded)
	setInt(&c.MaxHeaderBytes, defaultMaxHeaderBytes)
	setInt(&c.GCPercent, defaultGCPercent)
	if c.GCFloorBytes == 0 {
		c.GCFloorBytes = defaultGCFloorBytes
	}
	setString(&c.Log.Level, defaultLogLevel)
	setString(&c.Log.Format, defaultLogFormat)
	if c.AccessLog.Template != "" {
		setString(&c.AccessLog.Format, accessLogTemplate)
	}
	setString(&c.AccessLog.Format, defaultAccessLogFmt)
	setInt(&c.Metrics.MaxUsers, defaultMaxUsers)

	t := &c.Timeouts
	setDuration(&t.ReadHeader, defaultReadHeader)
	setDuration(&t.ClientHello, defaultClientHello)
	setDuration(&t.QUICHandshake, defaultQUICHandshake)
	setDuration(&t.Connect, defaultConnect)
	setDuration(&t.ResponseHeader, defaultResponseHeader)
	setDuration(&t.IdleClient, defaultIdleClient)
	setDuration(&t.IdleTunnel, defaultIdleTunnel)
	setDuration(&t.Write, defaultWrite)
	setDuration(&t.Drain, defaultDrain)
	setDuration(&t.UDPIdle, defaultUDPIdle)

	setInt(&c.Upstream.MaxIdlePerHost, defaultMaxIdlePerHost)
	setInt(&c.Upstream.MaxIdle, defaultMaxIdle)
	setDuration(&c.Upstream.IdleTimeout, defaultIdleTimeout)

	h := &c.HTTP2
	setInt(&h.MaxConcurrentStreams, defaultH2Streams)
	setInt(&h.MaxHeaderListSize, defaultH2HeaderList)
	setInt(&h.InitialStreamWindow, defaultH2StreamWindow)
	setInt(&h.InitialConnWindow, defaultH2ConnWindow)
	setInt(&h.MaxFrameSize, defaultH2FrameSize)

	setString(&c.Auth.Realm, defaultRealm)
	setDuration(&c.Auth.CacheTTL, defaultCacheTTL)
	setInt(&c.Auth.CacheSize, defaultCacheSize)
	c.setProviderDefaults()

	setString(&c.ACL.Default, defaultACLDefault)
	setString(&c.ACL.Mode, ACLEnforce)
	c.Lists.setDefaults()
	c.Authz.setDefaults()
	for i := range c.ACL.Rules {
		setString(&c.ACL.Rules[i].Name, "rules["+strconv.Itoa(i)+"]")
	}

	lim := &c.Limits
	if lim.ConnectionBurst == 0 {
		lim.ConnectionBurst = 2 * lim.ConnectionRate
	}
	setInt(&lim.MaxTLSHandshakes, defaultTLSHandshakes)
	c.setHTTP3Defaults() // after MaxTLSHandshakes, which RetryThreshold derives from
	setInt(&lim.AuthFailures, defaultAuthFailures)
	if lim.AuthFailuresPerAddress == 0 {
		lim.AuthFailuresPerAddress = -1
		if lim.AuthFailures > 0 {
			lim.AuthFailuresPerAddress = defaultAuthPerAddress * lim.AuthFailures
		}
	}
	setDuration(&lim.AuthFailureWindow, defaultAuthWindow)
	setDuration(&lim.AuthCooldown, defaultAuthCooldown)
	if lim.UserBytesBurst == 0 {
		lim.UserBytesBurst = lim.UserBytesPerSecond
	}
	c.setScheduleDefaults()

	c.DNS.setDefaults()
	c.setQuotaDefaults()

	for i := range c.Listen {
		l := &c.Listen[i]
		setString(&l.Protocol, defaultProtocol)
		if l.Protocol == ProtocolTransparent {
			setString(&l.Mode, ModeRedirect)
		}
		setString(&l.Name, l.Protocol+" "+l.Address)
	}
	c.setRouteDefaults()
	c.setInterceptDefaults()
	c.setHeaderRuleDefaults()
}

func setString(p *string, def string) {
	if *p == "" {
		*p = def
	}
}

func setInt(p *int, def int) {
	if *p == 0 {
		*p = def
	}
}

func setDuration(p *Duration, def time.Duration) {
	if p.Duration == 0 {
		p.Duration = def
	}
}

// WorkerCount returns the number of worker loops to run: Workers, or
// runtime.GOMAXPROCS(0) (the CPUs available to the process) when Workers is
// not positive.
func (c *Config) WorkerCount() int {
	if c.Workers > 0 {
		return c.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// HasUsers reports whether any user is configured, inline or through an
// htpasswd file; a listener's URLUser is not one.
func (c *Config) HasUsers() bool {
	return len(c.Auth.Users) > 0 || len(c.Auth.Htpasswd) > 0
}

// EffectiveAuth returns the authentication a listener uses, "basic" or
// "none": its Auth when set, otherwise "basic" if it has a URLUser or any
// user is configured (inline, in an htpasswd file, or an identity
// provider) and "none" if not. An unknown Auth value is returned
// unchanged; [Config.Validate] rejects it.
func (c *Config) EffectiveAuth(l Listener) string {
	if l.Protocol == ProtocolTransparent && l.Auth == "" {
		return AuthNone // its clients know of no proxy: identity is their address
	}
	if l.Auth != "" {
		return l.Auth
	}
	if l.URLUser != nil || c.HasUsers() || c.HasProviders() {
		return AuthBasic
	}
	return AuthNone
}

// Listener authentication modes, the values [Config.EffectiveAuth] returns.
const (
	// AuthBasic requires HTTP Basic proxy authentication.
	AuthBasic = "basic"
	// AuthNone lets every client through.
	AuthNone = "none"
)

//go:embed default.toml
var defaultTOML []byte

// Default returns the built-in configuration (one plain HTTP listener on
// 127.0.0.1:3128, no users) with defaults set. Each call returns a new
// value.
func Default() *Config {
	c, err := Parse(defaultTOML, "default.toml")
	if err != nil {
		panic("config: embedded default.toml: " + err.Error())
	}
	c.src, c.lines = "", nil // errors in it come from flags, not a file
	return c
}
