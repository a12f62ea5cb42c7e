package h3

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/masque"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/workpool"
)

// Config configures a Server: the HTTP/3 and QUIC settings, what
// forwarded requests carry and the bounds on connections, streams and
// flows. Who may send what is the gate.Policy of each connection's
// session. New fills no defaults: the configuration resolves every value.
type Config struct {
	// Origin is the listener's origin client: how forwarded requests go
	// upstream (the Forwarded field; Via, "Via: 3 rustle" on requests and
	// "Via: 1.1 rustle" on their responses; the response head's bound and
	// timeout; the upstream's write timeout). Its MaxHeaderBytes bounds a
	// request's header section too. New rejects nil.
	Origin *origin.Client
	// Template is the CONNECT-UDP URI template's path; nil =
	// masque.DefaultTemplate.
	Template *masque.Template
	// HandshakeTimeout bounds the QUIC handshake, which is given up
	// sooner when it receives nothing from the client for half of it
	// (quic-go's HandshakeIdleTimeout, which bounds the whole handshake
	// to twice itself); 0 = quic-go's default, 5s silent and 10s in all
	// (the configuration always sets one).
	HandshakeTimeout time.Duration
	// IdleTimeout closes a connection without a request for this long;
	// 0 = no limit (the configuration always sets one).
	IdleTimeout time.Duration
	// UDPIdleTimeout ends a CONNECT-UDP flow that passed no datagram
	// either way for this long; 0 = no limit.
	UDPIdleTimeout time.Duration
	// MaxConns bounds the QUIC connections served at once; 0 = no
	// limit.
	MaxConns int
	// MaxStreams is the request streams a connection may have open at
	// once (QUIC stream credit). Positive.
	MaxStreams int
	// MaxFlows bounds a connection's CONNECT-UDP flows; 0 = no limit.
	MaxFlows int
	// MaxListenerFlows bounds the CONNECT-UDP flows of all connections
	// together; 0 = no limit.
	MaxListenerFlows int
	// Logger receives connection-level events; nil = discard.
	Logger *slog.Logger
}

// Server serves HTTP/3 proxy connections. It is safe for concurrent use.
type Server struct {
	cfg            Config
	log            *slog.Logger
	tmpl           *masque.Template
	quic           *quic.Config
	maxHeaderBytes int
	pool           *workpool.Pool[*reqStream]

	nconns atomic.Int64 // connections served
	flows  atomic.Int64 // flows of all connections
}

// Request stream workers (package workpool): a worker that has served a
// stream waits this long for the next, of any connection, and at most
// maxIdleWorkers wait at once.
const (
	maxIdleWorkers = 256
	workerIdle     = 2 * time.Second
)

// New returns a Server for cfg, or an error naming a field out of range.
func New(cfg Config) (*Server, error) {
	if cfg.Origin == nil {
		return nil, errors.New("h3: Origin must be set")
	}
	if cfg.MaxStreams <= 0 {
		return nil, fmt.Errorf("h3: MaxStreams must be positive, got %d", cfg.MaxStreams)
	}
	if cfg.MaxConns < 0 || cfg.MaxFlows < 0 || cfg.MaxListenerFlows < 0 {
		return nil, errors.New("h3: MaxConns, MaxFlows and MaxListenerFlows must not be negative")
	}
	s := &Server{cfg: cfg, log: cfg.Logger, tmpl: cfg.Template, maxHeaderBytes: cfg.Origin.Config().MaxHeaderBytes}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.tmpl == nil {
		t, err := masque.ParseTemplate(masque.DefaultTemplate)
		if err != nil {
			return nil, err
		}
		s.tmpl = t
	}
	s.quic = &quic.Config{
		HandshakeIdleTimeout:  cfg.HandshakeTimeout / 2,
		MaxIdleTimeout:        cfg.IdleTimeout,
		MaxIncomingStreams:    int64(cfg.MaxStreams),
		MaxIncomingUniStreams: maxUniStreams,
		EnableDatagrams:       true,
	}
	s.pool = workpool.New((*reqStream).run, maxIdleWorkers, workerIdle)
	return s, nil
}

// Close ends the request stream workers that wait for a stream (see
// workpool) and waits for them, once the server is handed no more
// connections (its generation retired by a reload, or rustle stopping):
// idle, they would otherwise end only after workerIdle, unjoined.
// Connections it still serves go on; their streams then run on
// goroutines that end with them. Close is idempotent.
func (s *Server) Close() { s.pool.Close() }

// QUICConfig returns the QUIC settings of the server's connections: the
// listener hands it to quic-go for each connection it accepts.
func (s *Server) QUICConfig() *quic.Config { return s.quic }

// TLSConfig returns the TLS settings of a QUIC listener whose
// certificate is what current returns at each handshake (a listener's
// tlsconf.Manager, which a reload may replace): its certificate, client
// CAs and session tickets, with ALPN "h3" only.
func TLSConfig(current func() *tls.Config) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{NextProto},
		GetConfigForClient: func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
			base := current()
			conf := base
			if base.GetConfigForClient != nil {
				c, err := base.GetConfigForClient(hi)
				if err != nil {
					return nil, err
				}
				if c != nil {
					conf = c
				}
			}
			conf = conf.Clone()
			conf.NextProtos = []string{NextProto}
			conf.MinVersion = tls.VersionTLS13
			conf.GetConfigForClient = nil
			return conf, nil
		},
	}
}

// NextProto is HTTP/3's ALPN protocol ID (RFC 9114 §3.1).
const NextProto = "h3"

// ServeConn serves one QUIC connection, accepted with QUICConfig and a
// TLSConfig, until it closes and its request streams have been served;
// it closes the connection with H3_EXCESSIVE_LOAD at once when MaxConns
// are served already. sess decides each request; ServeConn gives it the
// handshake's client certificate, and sess stays the caller's to close.
// When sess's context is done ServeConn sends GOAWAY and closes the
// connection once its requests have ended (at once for a revoked user);
// when the policy's Cut is done after that (the end of a shutdown's
// drain), it closes it.
func (s *Server) ServeConn(qc *quic.Conn, sess *gate.Session) {
	if n := s.nconns.Add(1); s.cfg.MaxConns > 0 && n > int64(s.cfg.MaxConns) {
		s.nconns.Add(-1)
		s.refuseConn(qc, sess)
		return
	}
	defer s.nconns.Add(-1)
	c := newConn(s, qc, sess)
	c.serve()
	qc.CloseWithError(codeNoError, "")
}

// refuseConn logs a connection refused past MaxConns and closes it with
// H3_EXCESSIVE_LOAD. It is never inlined: its gate.Grant (over 1 KB)
// would sit in ServeConn's frame, on the stack of every connection's
// goroutine while it idles, which kept that stack from shrinking.
//
//go:noinline
func (s *Server) refuseConn(qc *quic.Conn, sess *gate.Session) {
	var g gate.Grant
	sess.Reject(&gate.Request{Log: accesslog.ProtoH3}, &g, 0, accesslog.ReasonOverloaded,
		fmt.Errorf("h3: more than %d QUIC connections on the listener", s.cfg.MaxConns))
	qc.CloseWithError(codeExcessiveLoad, "too many connections")
}

// Full reports whether MaxConns connections are served already, so that
// a listener can refuse a new one before its handshake; ServeConn still
// checks, as connections whose handshakes overlapped may all come.
func (s *Server) Full() bool {
	return s.cfg.MaxConns > 0 && s.nconns.Load() >= int64(s.cfg.MaxConns)
}

// Conns returns the QUIC connections served now.
func (s *Server) Conns() int { return int(s.nconns.Load()) }

// Flows returns the CONNECT-UDP flows open now.
func (s *Server) Flows() int { return int(s.flows.Load()) }
