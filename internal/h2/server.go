package h2

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// Authenticator checks Proxy-Authorization values; *auth.Authenticator
// implements it (and so does anything that implements
// httpproxy.Authenticator).
type Authenticator interface {
	// Check returns the user and true when value holds valid credentials.
	Check(value []byte) (user string, ok bool)
	// Challenge returns the Proxy-Authenticate value of a 407 answer.
	Challenge() string
}

// Access decides whether a request may proceed; *acl.Policy implements
// it (and so does anything that implements httpproxy.Access).
type Access interface {
	// Decide decides r; see acl.Policy.Decide.
	Decide(r acl.Request) acl.Decision
}

// Limiter enforces the limits that depend on who a stream's client is:
// failed authentications, connections per user and users' byte rates.
// *limits.Limiter implements it (and so does anything that implements
// httpproxy.Limiter).
type Limiter interface {
	// AuthFailed records wrong credentials from client and returns the
	// cool-down left, when positive: the stream is answered 429 with
	// Retry-After and the connection sent GOAWAY.
	AuthFailed(client netip.Addr) time.Duration
	// UserConn counts a connection (or a stream; see the package
	// documentation) as user's; false refuses the stream (429). Each
	// true is matched by one UserDone.
	UserConn(user string) bool
	// UserDone ends a count UserConn made.
	UserDone(user string)
	// Throttle returns user's byte bucket, or nil when user's bytes are
	// not paced.
	Throttle(user string) *limits.Bucket
}

// Forwarded modes: which client-address header forwarded requests carry
// (the same values as the HTTP/1.1 proxy's).
const (
	ForwardedNone = "none"
	ForwardedRFC  = "rfc7239"
	ForwardedXFF  = "x-forwarded-for"
)

// Protocol limits (RFC 9113 §6.5.2, §6.9.1).
const (
	minFrameSize  = 1 << 14
	maxFrameSize  = 1<<24 - 1
	maxWindow     = 1<<31 - 1
	defaultWindow = 65535 // the initial window of every stream and connection
)

// Config configures a Server.
type Config struct {
	// Dialer dials origins and tunnel targets; required.
	Dialer *dialer.Dialer
	// Pool keeps idle upstream connections, shared with the HTTP/1.1
	// proxy; nil = no upstream keep-alive.
	Pool *dialer.Pool
	// Auth checks each stream's proxy-authorization field; nil = no
	// authentication. A connection whose TLS client certificate was
	// verified needs none.
	Auth Authenticator
	// Access decides each stream's request (forwarded HTTP, CONNECT,
	// WebSocket) before it is dialed, and each address it resolves to;
	// refusals are answered 403. nil allows every request.
	Access Access
	// Limiter enforces the authentication cool-down, connections per
	// user and users' byte rates; nil = none.
	Limiter Limiter
	// Forwarded is ForwardedNone (or ""), ForwardedRFC or ForwardedXFF.
	Forwarded string
	// Via adds "Via: 2 rustle" to forwarded requests (they came over
	// HTTP/2) and "via: 1.1 rustle" to their responses (from HTTP/1.1
	// origins). false = none.
	Via bool

	// MaxConcurrentStreams is advertised in SETTINGS_MAX_CONCURRENT_STREAMS;
	// a stream beyond it is refused with REFUSED_STREAM. 0 = 100.
	MaxConcurrentStreams uint32
	// MaxHeaderListSize bounds a request's header list (RFC 9113 §6.5.2
	// size: names, values and 32 bytes per field); a larger one is
	// answered 431. 0 = 65536.
	MaxHeaderListSize uint32
	// InitialStreamWindow is the flow-control window of each stream the
	// client opens: how many request-body or tunnel bytes rustle buffers
	// per stream. 0 = 256 KiB; at least 65535.
	InitialStreamWindow uint32
	// InitialConnWindow is the connection's flow-control window. Bytes
	// buffered for all streams of a connection together stay under
	// about twice this. 0 = 1 MiB; at least 65535.
	InitialConnWindow uint32
	// MaxFrameSize is the largest frame payload rustle accepts and sends.
	// 0 = 16384.
	MaxFrameSize uint32

	// MaxHeaderBytes bounds a response head from an origin. 0 = 64 KiB.
	MaxHeaderBytes int
	// HandshakeTimeout bounds the wait for the client's connection
	// preface and first SETTINGS frame. 0 = 30s.
	HandshakeTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for an origin's response
	// head. 0 = 60s.
	ResponseHeaderTimeout time.Duration
	// IdleTimeout closes (with GOAWAY) a connection that has had no open
	// stream for this long. 0 = 60s.
	IdleTimeout time.Duration
	// WriteTimeout bounds each blocked write to the client or an origin.
	// 0 = 60s.
	WriteTimeout time.Duration
	// TunnelIdleTimeout resets a CONNECT stream with no bytes either way
	// for this long. 0 = 1h.
	TunnelIdleTimeout time.Duration
	// Logger receives connection-level events; nil = discard.
	Logger *slog.Logger

	// Listener names the listener in access log records; "" = none.
	Listener string
	// Metrics counts the streams' requests, bytes, tunnels, refusals and
	// dials; nil = none.
	Metrics *metrics.ListenerMetrics
	// UserMetrics returns an authenticated user's series, nil when there
	// are none; a nil func = no per-user series.
	UserMetrics func(user string) *metrics.UserMetrics
	// AccessLog receives one record per stream: a forwarded request when
	// its answer is over, a tunnel when it ends; nil = none.
	AccessLog *accesslog.Logger
}

// Server serves HTTP/2 proxy connections. It is safe for concurrent use
// by many connections.
type Server struct {
	cfg     Config
	log     *slog.Logger
	start   time.Time // the origin of tunnels' activity clocks
	observe bool      // Metrics or AccessLog is set
}

// New returns a Server for cfg, with its zero values replaced by their
// defaults.
func New(cfg Config) *Server {
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = 100
	}
	if cfg.MaxHeaderListSize == 0 {
		cfg.MaxHeaderListSize = 64 << 10
	}
	cfg.InitialStreamWindow = clampWindow(cfg.InitialStreamWindow, 256<<10)
	cfg.InitialConnWindow = clampWindow(cfg.InitialConnWindow, 1<<20)
	switch {
	case cfg.MaxFrameSize == 0:
		cfg.MaxFrameSize = minFrameSize
	case cfg.MaxFrameSize < minFrameSize:
		cfg.MaxFrameSize = minFrameSize
	case cfg.MaxFrameSize > maxFrameSize:
		cfg.MaxFrameSize = maxFrameSize
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 64 << 10
	}
	setDuration(&cfg.HandshakeTimeout, 30*time.Second)
	setDuration(&cfg.ResponseHeaderTimeout, 60*time.Second)
	setDuration(&cfg.IdleTimeout, 60*time.Second)
	setDuration(&cfg.WriteTimeout, 60*time.Second)
	setDuration(&cfg.TunnelIdleTimeout, time.Hour)
	if cfg.Forwarded == "" {
		cfg.Forwarded = ForwardedNone
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, log: log, start: time.Now(), observe: cfg.Metrics != nil || cfg.AccessLog != nil}
}

func clampWindow(v, def uint32) uint32 {
	switch {
	case v == 0:
		return def
	case v < defaultWindow:
		return defaultWindow
	case v > maxWindow:
		return maxWindow
	}
	return v
}

func setDuration(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// ServeConn serves one HTTP/2 connection until the client closes it, a
// connection error ends it, or ctx is done: then it sends GOAWAY, lets
// the streams in progress (tunnels included) finish, and closes. It
// returns when the connection and every goroutine it started are done.
// ServeConn owns c and closes it.
//
// c is the client connection after its TLS handshake negotiated "h2"
// (any net.Conn speaking HTTP/2 with prior knowledge works too). When c
// is a *tls.Conn made over tunnel.RecordConn, an idle connection waits on
// socket readiness and holds no read buffer.
func (s *Server) ServeConn(ctx context.Context, c net.Conn) {
	s.ServeConnFrom(ctx, c, netip.AddrPort{})
}

// ServeConnFrom is ServeConn for a client whose address is not c's peer:
// the one a PROXY protocol header gave, used for the access policy, the
// Forwarded and X-Forwarded-For fields, logs and the access log. An
// invalid client means c's peer.
func (s *Server) ServeConnFrom(ctx context.Context, c net.Conn, client netip.AddrPort) {
	cn := newConn(s, c)
	cn.inspect()
	if client.IsValid() {
		cn.clientAddrPort, cn.clientAddr = client, client.Addr().Unmap()
	}
	// The connection's reader runs on this goroutine: kept shallow, its
	// stack shrinks to 4 KiB while the connection is idle.
	cn.serve(ctx)
}

// inspect notes what the connection is: its socket, addresses and TLS
// client certificate.
//
//go:noinline
func (c *conn) inspect() {
	if tc, ok := c.nc.(*tls.Conn); ok {
		if raw, ok := tunnel.RawTCP(tc); ok {
			c.raw = raw
		}
		if cs := tc.ConnectionState(); len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
			c.certAuth = true
			c.certUser = cs.VerifiedChains[0][0].Subject.CommonName
		}
	} else if tcp, ok := c.nc.(*net.TCPConn); ok {
		c.raw = tcp
	}
	if a, ok := c.nc.RemoteAddr().(*net.TCPAddr); ok {
		c.clientAddrPort = a.AddrPort()
		c.clientAddr = c.clientAddrPort.Addr().Unmap()
	}
	if a, ok := c.nc.LocalAddr().(*net.TCPAddr); ok {
		c.localAddr = netip.AddrPortFrom(a.AddrPort().Addr().Unmap(), a.AddrPort().Port())
	}
}
