package h2

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/masque"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/tunnel"
	"github.com/rustle-proxy/rustle/internal/workpool"
)

// Protocol limits (RFC 9113 §6.5.2, §6.9.1).
const (
	minFrameSize  = 1 << 14
	maxFrameSize  = 1<<24 - 1
	maxWindow     = 1<<31 - 1
	defaultWindow = 65535 // the initial window of every stream and connection
	maxHeaderList = 16 << 20
)

// Config configures a Server: the HTTP/2 wire settings and what forwarded
// requests carry. Who may send what, the upstreams and the observation of
// requests are the gate.Policy of each connection's session.
//
// New fills no defaults: the configuration (config.SetDefaults) resolves
// every value, and New rejects those out of range.
type Config struct {
	// Origin is the listener's origin client: how forwarded requests go
	// upstream (the Forwarded field; Via, "Via: 2 rustle" on requests
	// that came over HTTP/2 and "via: 1.1 rustle" on their responses from
	// HTTP/1.1 origins; the response head's bound and timeout; the
	// upstream's write timeout). New rejects nil.
	Origin *origin.Client

	// MaxConcurrentStreams is advertised in SETTINGS_MAX_CONCURRENT_STREAMS;
	// a stream beyond it is refused with REFUSED_STREAM. Between 1 and
	// 2^31-1.
	MaxConcurrentStreams uint32
	// MaxHeaderListSize bounds a request's header list (RFC 9113 §6.5.2
	// size: names, values and 32 bytes per field); a larger one is
	// answered 431. Between 1 and 16 MiB.
	MaxHeaderListSize uint32
	// InitialStreamWindow is the flow-control window of each stream the
	// client opens: how many request-body or tunnel bytes rustle buffers
	// per stream. Between 65535 and 2^31-1.
	InitialStreamWindow uint32
	// InitialConnWindow is the connection's flow-control window. Bytes
	// buffered for all streams of a connection together stay under
	// about twice this. Between 65535 and 2^31-1.
	InitialConnWindow uint32
	// MaxFrameSize is the largest frame payload rustle accepts and sends.
	// Between 16384 and 2^24-1.
	MaxFrameSize uint32

	// HandshakeTimeout bounds the wait for the client's connection
	// preface and first SETTINGS frame, and each header block (a HEADERS
	// frame and its CONTINUATION frames) from its HEADERS frame on, as
	// timeouts.read_header bounds an HTTP/1.1 request head; 0 = no limit
	// (the configuration always sets one).
	HandshakeTimeout time.Duration
	// IdleTimeout closes (with GOAWAY) a connection that has had no open
	// stream for this long; 0 = no limit (the configuration always sets
	// one).
	IdleTimeout time.Duration
	// WriteTimeout bounds each blocked write to the client, each wait for
	// more of a request body or of a tunnel's bytes from the client, and
	// each read of a frame the client has begun to send; 0 = no limit
	// (the configuration always sets one). Origin's bounds the upstream
	// side.
	WriteTimeout time.Duration
	// TunnelIdleTimeout resets a CONNECT stream with no bytes either way
	// for this long; 0 = no limit (the configuration always sets one).
	TunnelIdleTimeout time.Duration
	// UDPTemplate is the CONNECT-UDP URI template's path (RFC 9298)
	// that extended CONNECT with :protocol connect-udp is matched
	// against; nil = masque.DefaultTemplate.
	UDPTemplate *masque.Template
	// UDPIdleTimeout ends a CONNECT-UDP flow that passed no datagram
	// either way for this long; 0 = no limit.
	UDPIdleTimeout time.Duration
	// Logger receives connection-level events; nil = discard.
	Logger *slog.Logger
}

// Server serves HTTP/2 proxy connections. It is safe for concurrent use
// by many connections.
type Server struct {
	cfg   Config
	log   *slog.Logger
	start time.Time // the origin of tunnels' activity clocks
	pool  *workpool.Pool[*stream]

	// windowChanges counts the stream send windows that SETTINGS frames
	// changed (one per open stream per frame that moves the initial
	// window), for TestSettingsDuplicates.
	windowChanges atomic.Uint64
}

// New returns a Server for cfg, or an error naming the first field out of
// its range (see Config). It fills no defaults.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.UDPTemplate == nil {
		t, err := masque.ParseTemplate(masque.DefaultTemplate)
		if err != nil {
			return nil, err
		}
		cfg.UDPTemplate = t
	}
	return &Server{cfg: cfg, log: log, start: time.Now(), pool: newWorkerPool()}, nil
}

// Close ends the stream workers that wait for a stream (see workpool)
// and waits for them, once the server is handed no more connections (its
// generation retired by a reload, or rustle stopping): idle, they would
// otherwise end only after workerIdle, unjoined. Connections it still
// serves go on; their streams then run on goroutines that end with them.
// Close is idempotent.
func (s *Server) Close() { s.pool.Close() }

// validate checks the fields that have no meaning at zero or a range in
// RFC 9113, as config's validation does.
func (cfg *Config) validate() error {
	if cfg.Origin == nil {
		return errors.New("h2: Origin must be set")
	}
	for _, f := range [...]struct {
		name      string
		v, lo, hi uint32
	}{
		{"MaxConcurrentStreams", cfg.MaxConcurrentStreams, 1, maxWindow},
		{"MaxHeaderListSize", cfg.MaxHeaderListSize, 1, maxHeaderList},
		{"InitialStreamWindow", cfg.InitialStreamWindow, defaultWindow, maxWindow},
		{"InitialConnWindow", cfg.InitialConnWindow, defaultWindow, maxWindow},
		{"MaxFrameSize", cfg.MaxFrameSize, minFrameSize, maxFrameSize},
	} {
		if f.v < f.lo || f.v > f.hi {
			return fmt.Errorf("h2: %s must be between %d and %d, got %d", f.name, f.lo, f.hi, f.v)
		}
	}
	return nil
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
	s.serveConn(c, sess, false)
}

// ServePrefaced is ServeConn for a connection whose client connection
// preface ("PRI * HTTP/2.0…", RFC 9113 §3.4) the caller has already read
// and checked: the server starts with the client's SETTINGS.
func (s *Server) ServePrefaced(c *tls.Conn, sess *gate.Session) {
	s.serveConn(c, sess, true)
}

// ServeConnThen is ServeConn, except that it returns at once: the
// connection is served on goroutines of its own, and done is called
// once, on one of them, when ServeConn would have returned. While the
// connection is idle with only tunnels open, no goroutine of it waits
// for the client where the platform allows (Linux: tunnel.Parker's
// Notify), so that an idle tunnel costs no goroutine of the connection.
func (s *Server) ServeConnThen(c *tls.Conn, sess *gate.Session, done func()) {
	s.serveConnThen(c, sess, false, done)
}

// ServePrefacedThen is ServePrefaced as ServeConnThen is ServeConn.
func (s *Server) ServePrefacedThen(c *tls.Conn, sess *gate.Session, done func()) {
	s.serveConnThen(c, sess, true, done)
}

// serveConn is ServeConn for any net.Conn speaking HTTP/2 with prior
// knowledge (the fuzz tests serve a net.Pipe); prefaced says the client
// preface has been read.
func (s *Server) serveConn(nc net.Conn, sess *gate.Session, prefaced bool) {
	ended := make(chan struct{})
	s.serveConnThen(nc, sess, prefaced, func() { close(ended) })
	<-ended
}

// serveConnThen is ServeConnThen for any net.Conn (see serveConn).
func (s *Server) serveConnThen(nc net.Conn, sess *gate.Session, prefaced bool, done func()) {
	cn := newConn(s, nc, sess)
	cn.prefaced = prefaced
	cn.inspect()
	cn.serve(sess.Context(), done)
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
