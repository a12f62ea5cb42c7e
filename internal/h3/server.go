package h3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/masque"
	"github.com/rustle-proxy/rustle/internal/origin"
)

// HTTP/3 error codes (RFC 9114 §8.1) rustle closes connections with.
const (
	codeNoError       = quic.ApplicationErrorCode(http3.ErrCodeNoError)
	codeExcessiveLoad = quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad)
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
	cfg  Config
	log  *slog.Logger
	tmpl *masque.Template
	srv  *http3.Server
	quic *quic.Config

	mu    sync.Mutex
	conns map[*quic.Conn]*connState // guarded by mu

	nconns   atomic.Int64 // connections served
	flows    atomic.Int64 // flows of all connections
	shutdown sync.Once
}

// connState is what a connection's requests share.
type connState struct {
	sess     *gate.Session
	conn     *quic.Conn
	flows    atomic.Int64 // open flows
	active   atomic.Int64 // requests in progress
	draining atomic.Bool  // GOAWAY sent: close once active is 0
}

type connKey struct{}

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
	s := &Server{cfg: cfg, log: cfg.Logger, tmpl: cfg.Template, conns: make(map[*quic.Conn]*connState)}
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
		MaxIncomingUniStreams: 8, // control, QPACK encoder and decoder, and a few to ignore
		EnableDatagrams:       true,
	}
	s.srv = &http3.Server{
		Handler:         http.HandlerFunc(s.serveHTTP),
		EnableDatagrams: true,
		MaxHeaderBytes:  cfg.Origin.Config().MaxHeaderBytes,
		IdleTimeout:     cfg.IdleTimeout,
		QUICConfig:      s.quic,
		Logger:          s.log,
		ConnContext: func(ctx context.Context, c *quic.Conn) context.Context {
			s.mu.Lock()
			cs := s.conns[c]
			s.mu.Unlock()
			return context.WithValue(ctx, connKey{}, cs)
		},
	}
	return s, nil
}

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
		NextProtos: []string{http3.NextProtoH3},
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
			conf.NextProtos = []string{http3.NextProtoH3}
			conf.MinVersion = tls.VersionTLS13
			conf.GetConfigForClient = nil
			return conf, nil
		},
	}
}

// ServeConn serves one QUIC connection, accepted with QUICConfig and a
// TLSConfig, until it closes; it closes the connection with
// H3_EXCESSIVE_LOAD at once when MaxConns are served already. sess
// decides each request; ServeConn gives it the handshake's client
// certificate, and sess stays the caller's to close. When sess's context
// is done ServeConn sends GOAWAY and closes the connection once its
// requests have ended (at once for a revoked user); when the policy's
// Cut is done, it closes it.
func (s *Server) ServeConn(c *quic.Conn, sess *gate.Session) {
	if n := s.nconns.Add(1); s.cfg.MaxConns > 0 && n > int64(s.cfg.MaxConns) {
		s.nconns.Add(-1)
		var g gate.Grant
		sess.Reject(&gate.Request{Log: accesslog.ProtoH3}, &g, 0, accesslog.ReasonOverloaded,
			fmt.Errorf("h3: more than %d QUIC connections on the listener", s.cfg.MaxConns))
		c.CloseWithError(codeExcessiveLoad, "too many connections")
		return
	}
	defer s.nconns.Add(-1)
	sess.SetTLS(c.ConnectionState().TLS)
	cs := &connState{sess: sess, conn: c}
	s.mu.Lock()
	s.conns[c] = cs
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	stopDrain := context.AfterFunc(sess.Context(), func() {
		if context.Cause(sess.Context()) == gate.ErrRevoked {
			c.CloseWithError(codeNoError, "access revoked")
			return
		}
		s.drain(cs)
	})
	defer stopDrain()
	if cut := sess.Policy().Cut; cut != nil {
		stopCut := context.AfterFunc(cut, func() { c.CloseWithError(codeNoError, "shutting down") })
		defer stopCut()
	}
	if err := s.srv.ServeQUICConn(c); err != nil && !errors.Is(err, http.ErrServerClosed) {
		if s.log.Enabled(context.Background(), slog.LevelDebug) {
			s.log.Debug("h3: connection ended", "client", sess.Client().String(), "err", err)
		}
	}
	c.CloseWithError(codeNoError, "")
}

// drain starts the graceful end of cs's connection: the server's GOAWAY
// (sent on every connection it serves), then the connection's close once
// its requests have ended.
func (s *Server) drain(cs *connState) {
	s.shutdown.Do(func() {
		// Shutdown returns when every connection has closed, which
		// ServeConn sees to (at the latest when the drain is cut).
		go s.srv.Shutdown(context.Background())
	})
	cs.draining.Store(true)
	if cs.active.Load() == 0 {
		cs.closeDrained()
	}
}

// closeDrained closes a draining connection whose requests have ended,
// once what they sent last has had time to be acknowledged: a
// CONNECTION_CLOSE discards stream data still unacknowledged (a tunnel's
// last bytes and FIN). The wait is three probe timeouts of the
// connection's RTT (RFC 9002 §6.2.1), at least lingerMin and at most
// lingerMax.
func (cs *connState) closeDrained() {
	st := cs.conn.ConnectionStats()
	d := min(max(3*(st.SmoothedRTT+4*st.MeanDeviation), lingerMin), lingerMax)
	time.AfterFunc(d, func() { cs.conn.CloseWithError(codeNoError, "shutting down") })
}

// The bounds on closeDrained's wait.
const (
	lingerMin = 50 * time.Millisecond
	lingerMax = 2 * time.Second
)

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
