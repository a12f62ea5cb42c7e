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
	// Forwarded is the client-address header added to forwarded requests:
	// "none", "rfc7239" or "x-forwarded-for"; "" means "none".
	Forwarded string `toml:"forwarded"`
	// Via adds "Via: 1.1 rustle" to forwarded requests and responses;
	// false adds nothing.
	Via bool `toml:"via"`
	// MaxHeaderBytes is the largest request or response head accepted;
	// 0 means 65536.
	MaxHeaderBytes int `toml:"max_header_bytes"`
	// Admin is the host:port of the admin HTTP listener, which serves
	// /metrics, /healthz and /readyz; "" means no admin listener.
	Admin string `toml:"admin"`

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
	// Auth configures proxy authentication.
	Auth Auth `toml:"auth"`
	// Listen holds one entry per listening address. Empty means none: a
	// configuration must get at least one listener from the file or from
	// the command line before it validates.
	Listen []Listener `toml:"listen"`

	// src and lines locate keys in the file the configuration was parsed
	// from, so that Validate's errors can name file and line; both are
	// zero for a configuration not parsed from a file.
	src   string
	lines map[string]int
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
	// Format is "text" (compact, positional) or "json" (JSON lines); ""
	// means "text".
	Format string `toml:"format"`
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
	// (host:port); 0 means 64 and -1 disables upstream keep-alive.
	MaxIdlePerHost int `toml:"max_idle_per_host"`
	// MaxIdle is the number of idle connections kept in all; 0 means 4096.
	MaxIdle int `toml:"max_idle"`
	// IdleTimeout closes a pooled connection unused for this long; zero
	// means 90s.
	IdleTimeout Duration `toml:"idle_timeout"`
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
	// and 4a for CONNECT) or "mixed" (http, socks5 and socks4 on one port,
	// told apart by the first byte). "" means "http".
	Protocol string `toml:"protocol"`
	// Auth is "basic" or "none"; "" means "basic" when any user is
	// configured and "none" otherwise (see [Config.EffectiveAuth]).
	Auth string `toml:"auth"`
	// AllowOpen permits a non-loopback listener without authentication;
	// false refuses such an open proxy.
	AllowOpen bool `toml:"allow_open"`
	// TLS is the certificate of an "https" listener, required for it and
	// refused for the other protocols; its zero value means no TLS.
	TLS ListenerTLS `toml:"tls"`
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
	defaultLogLevel       = "info"
	defaultLogFormat      = "text"
	defaultAccessLogFmt   = "text"
	defaultMaxUsers       = 100
	defaultReadHeader     = 30 * time.Second
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
	defaultRealm          = "rustle"
	defaultCacheTTL       = 5 * time.Minute
	defaultCacheSize      = 10000
	defaultProtocol       = "http"
)

// SetDefaults replaces every zero value that has a documented default with
// that default. It is the one place defaults live, and it is idempotent.
// Values with a meaning at zero (Workers, SocketBufferBytes, Via, Admin,
// AccessLog.Enabled and Path, Metrics.PerUser, a listener's Auth,
// AllowOpen) are left alone.
func (c *Config) SetDefaults() {
	setString(&c.Forwarded, defaultForwarded)
	setInt(&c.MaxHeaderBytes, defaultMaxHeaderBytes)
	setString(&c.Log.Level, defaultLogLevel)
	setString(&c.Log.Format, defaultLogFormat)
	setString(&c.AccessLog.Format, defaultAccessLogFmt)
	setInt(&c.Metrics.MaxUsers, defaultMaxUsers)

	t := &c.Timeouts
	setDuration(&t.ReadHeader, defaultReadHeader)
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

	setString(&c.Auth.Realm, defaultRealm)
	setDuration(&c.Auth.CacheTTL, defaultCacheTTL)
	setInt(&c.Auth.CacheSize, defaultCacheSize)

	for i := range c.Listen {
		l := &c.Listen[i]
		setString(&l.Protocol, defaultProtocol)
		setString(&l.Name, l.Protocol+" "+l.Address)
	}
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
// htpasswd file.
func (c *Config) HasUsers() bool {
	return len(c.Auth.Users) > 0 || len(c.Auth.Htpasswd) > 0
}

// EffectiveAuth returns the authentication a listener uses, "basic" or
// "none": its Auth when set, otherwise "basic" if any user is configured
// (inline or in an htpasswd file) and "none" if not. An unknown Auth value
// is returned unchanged; [Config.Validate] rejects it.
func (c *Config) EffectiveAuth(l Listener) string {
	if l.Auth != "" {
		return l.Auth
	}
	if c.HasUsers() {
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
