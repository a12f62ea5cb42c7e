// Package httpproxy serves the HTTP/1.1 forward-proxy protocol on a client
// connection: absolute-form requests of every method forwarded to origins
// over pooled keep-alive connections, and CONNECT tunnels handed to the
// splice engine.
//
// The per-request path is written by hand rather than on net/http: a head
// parser that works on spans of the connection's read buffer and allocates
// nothing per request, heads rebuilt into a reused buffer, head and body
// sent with one writev, and large bodies moved with splice. Everything a
// client controls is bounded (head size, header count, chunk lines,
// trailers) and every wait has a deadline.
package httpproxy

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// Authenticator checks Proxy-Authorization values; *auth.Authenticator
// implements it.
type Authenticator interface {
	// Check returns the user and true when value holds valid credentials.
	Check(value []byte) (user string, ok bool)
	// Challenge returns the Proxy-Authenticate value of a 407 answer.
	Challenge() string
}

// Access decides whether a request may proceed; *acl.Policy implements
// it.
type Access interface {
	// Decide decides r; see acl.Policy.Decide.
	Decide(r acl.Request) acl.Decision
}

// Limiter enforces the limits that depend on what a client connection
// says: failed authentications, connections per user, users' byte rates,
// and the end of connections handed to the tunnel engine.
type Limiter interface {
	// AuthFailed records wrong credentials from client and returns the
	// cool-down left, when positive: the request is answered 429 with
	// Retry-After and the connection closed.
	AuthFailed(client netip.Addr) time.Duration
	// UserConn counts the connection as user's; false refuses it (429).
	// Each true is matched by one UserDone.
	UserConn(user string) bool
	// UserDone ends a count UserConn made.
	UserDone(user string)
	// Throttle returns user's byte bucket, or nil when user's bytes are
	// not paced.
	Throttle(user string) *limits.Bucket
	// Handoff is called before client is handed to the tunnel engine,
	// after which ServeConn returns while the tunnel lives on; the
	// function it returns (nil = none) is called once the tunnel ends.
	Handoff(client net.Conn) func()
}

// Forwarded modes: which client-address header forwarded requests carry.
const (
	ForwardedNone = "none"
	ForwardedRFC  = "rfc7239"
	ForwardedXFF  = "x-forwarded-for"
)

// Config configures a Proxy.
type Config struct {
	// Auth checks credentials; nil = no authentication.
	Auth Authenticator
	// Dialer dials upstreams; required.
	Dialer *dialer.Dialer
	// Pool keeps idle upstream connections; nil = no upstream keep-alive.
	Pool *dialer.Pool
	// Access decides each request (HTTP, CONNECT, WebSocket) before it
	// is dialed, and each address it resolves to; refusals are answered
	// 403. nil allows every request.
	Access Access
	// Limiter enforces per-user and authentication-failure limits; nil =
	// none.
	Limiter Limiter
	// Forwarded is ForwardedNone (or ""), ForwardedRFC or ForwardedXFF.
	Forwarded string
	// Via adds "Via: 1.1 rustle" to forwarded messages. false = none.
	Via bool
	// MaxHeaderBytes bounds a request or response head. 0 = 64 KiB.
	MaxHeaderBytes int
	// ReadHeaderTimeout bounds reading a request head from its first byte.
	// 0 = 30s.
	ReadHeaderTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for a response head. 0 = 60s.
	ResponseHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive client connection idle this long.
	// 0 = 60s.
	IdleTimeout time.Duration
	// WriteTimeout bounds each blocked write. 0 = 60s.
	WriteTimeout time.Duration
	// TunnelIdleTimeout closes a TLS client's tunnel with no bytes either
	// way for this long (plain tunnels follow their engine's setting).
	// 0 = 1h.
	TunnelIdleTimeout time.Duration
	// SocketBufferBytes sets SO_SNDBUF/SO_RCVBUF on client sockets.
	// 0 = kernel autotuning.
	SocketBufferBytes int
	// Logger receives connection-level events; nil = discard.
	Logger *slog.Logger
	// Listener names the listener in access log records; "" = none.
	Listener string
	// Metrics counts this listener's requests, bytes, tunnels and
	// refusals; nil = none.
	Metrics *metrics.ListenerMetrics
	// UserMetrics returns an authenticated user's series, nil when there
	// are none; a nil func = no per-user series.
	UserMetrics func(user string) *metrics.UserMetrics
	// AccessLog receives one record per request or tunnel; nil = none.
	AccessLog *accesslog.Logger
}

// Proxy serves HTTP/1.1 proxy connections. It is safe for concurrent use
// by many connections.
type Proxy struct {
	cfg Config
	log *slog.Logger

	conns sync.Pool // *conn, reused across client connections
}

// Metrics returns the listener metrics the Proxy reports to, or nil.
func (p *Proxy) Metrics() *metrics.ListenerMetrics { return p.cfg.Metrics }

// New returns a Proxy for cfg.
func New(cfg Config) *Proxy {
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 64 << 10
	}
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = 30 * time.Second
	}
	if cfg.ResponseHeaderTimeout <= 0 {
		cfg.ResponseHeaderTimeout = 60 * time.Second
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = 60 * time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 60 * time.Second
	}
	if cfg.TunnelIdleTimeout <= 0 {
		cfg.TunnelIdleTimeout = time.Hour
	}
	if cfg.Forwarded == "" {
		cfg.Forwarded = ForwardedNone
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{cfg: cfg, log: log}
	p.conns.New = func() any { return &conn{bodyErr: make(chan error, 1)} }
	return p
}

// ServeConn serves one client connection until it closes, fails, is
// handed to the tunnel engine eng, or ctx is done (checked between
// requests: a request in progress finishes first). ServeConn owns c: it
// closes it or hands it on. c is a *net.TCPConn on a plain port, or a
// connection whose handshake is done on a TLS port. Tunnels of a plain
// connection go to eng; with eng nil, or for other connections, they are
// relayed by goroutines instead.
func (p *Proxy) ServeConn(ctx context.Context, c net.Conn, eng *tunnel.Engine) {
	var client netip.AddrPort
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		client = ta.AddrPort()
	}
	p.ServeConnFrom(ctx, c, eng, client)
}

// ServeConnFrom is ServeConn for a client whose address is not c's peer:
// the one a PROXY protocol header gave. client is used for the access
// policy, the authentication-failure limits, the Forwarded and
// X-Forwarded-For fields and the access log.
func (p *Proxy) ServeConnFrom(ctx context.Context, c net.Conn, eng *tunnel.Engine, client netip.AddrPort) {
	if tc, ok := c.(*net.TCPConn); ok && p.cfg.SocketBufferBytes > 0 {
		if rc, err := tc.SyscallConn(); err == nil {
			dialer.SetBuffers(rc, p.cfg.SocketBufferBytes)
		}
	}
	cn := p.conns.Get().(*conn)
	cn.p = p
	cn.eng = eng
	cn.ctx = ctx
	cn.client.attach(c, &clientBufs)
	cn.clientAddrPort = client
	cn.clientAddr = client.Addr().Unmap()
	cn.obs.on = p.cfg.Metrics != nil || p.cfg.AccessLog != nil
	if tc, ok := c.(*tls.Conn); ok {
		// A client certificate verified during the handshake (the
		// listener's client_ca) authenticates every request.
		if cs := tc.ConnectionState(); len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0 {
			cn.certUser = cs.VerifiedChains[0][0].Subject.CommonName
			cn.certAuth = true
		}
	}
	// On shutdown, a connection waiting for its next request is woken so
	// that it closes; one in the middle of a request finishes it first.
	stop := context.AfterFunc(ctx, func() {
		if cn.idle.Load() {
			c.SetReadDeadline(time.Unix(1, 0))
		}
	})
	handedOff := cn.serve()
	stop()
	if !handedOff {
		c.Close()
	}
	if cn.limUser != "" {
		p.cfg.Limiter.UserDone(cn.limUser)
	}
	cn.releaseUpstream()
	cn.client.release()
	cn.reset()
	p.conns.Put(cn)
}
