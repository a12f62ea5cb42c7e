package h2

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

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

// Config configures a Server: the HTTP/2 wire settings and what forwarded
// requests carry. Who may send what, the upstreams and the observation of
// requests are the gate.Policy of each connection's session.
type Config struct {
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
}

// Server serves HTTP/2 proxy connections. It is safe for concurrent use
// by many connections.
type Server struct {
	cfg   Config
	log   *slog.Logger
	start time.Time // the origin of tunnels' activity clocks
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
	return &Server{cfg: cfg, log: log, start: time.Now()}
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
// connection error ends it, or the session's context is done: then it
// sends GOAWAY, lets the streams in progress (tunnels included) finish,
// and closes. It returns when the connection and every goroutine it
// started are done. ServeConn owns c and closes it; sess, whose policy
// decides each stream, stays the caller's to close.
//
// c is the client connection after its TLS handshake negotiated "h2";
// the caller has given sess the handshake's client certificate
// (Session.SetTLS): ServeConn does not read it. When c is made over
// tunnel.RecordConn, an idle connection waits on socket readiness and
// holds no read buffer.
func (s *Server) ServeConn(c *tls.Conn, sess *gate.Session) {
	s.serveConn(c, sess)
}

// serveConn is ServeConn for any net.Conn speaking HTTP/2 with prior
// knowledge (the fuzz tests serve a net.Pipe).
func (s *Server) serveConn(nc net.Conn, sess *gate.Session) {
	cn := newConn(s, nc, sess)
	cn.inspect()
	// The connection's reader runs on this goroutine: kept shallow, its
	// stack shrinks to 4 KiB while the connection is idle.
	cn.serve(sess.Context())
}

// inspect notes what the connection is: its socket and addresses.
//
//go:noinline
func (c *conn) inspect() {
	if tc, ok := c.nc.(*tls.Conn); ok {
		if raw, ok := tunnel.RawTCP(tc); ok {
			c.raw = raw
		}
	} else if tcp, ok := c.nc.(*net.TCPConn); ok {
		c.raw = tcp
	}
	c.clientAddr = c.sess.ClientIP()
	if a, ok := c.nc.LocalAddr().(*net.TCPAddr); ok {
		c.localAddr = netip.AddrPortFrom(a.AddrPort().Addr().Unmap(), a.AddrPort().Port())
	}
}
