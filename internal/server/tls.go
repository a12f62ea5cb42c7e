package server

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/h2"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/tlsconf"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// newTLS loads the certificate of an "https" listener.
func newTLS(lc config.Listener, log *slog.Logger) (*tlsconf.Manager, error) {
	return tlsconf.New(tlsconf.Config{
		Cert:       lc.TLS.Cert,
		Key:        lc.TLS.Key,
		ClientCA:   lc.TLS.ClientCA,
		KTLS:       lc.TLS.KTLS,
		NextProtos: []string{"h2", "http/1.1"},
		Logger:     log,
	})
}

// newH2 returns the HTTP/2 server of an "https" listener: its wire
// settings, with the timeouts and header limits of the listener's
// HTTP/1.1 proxy (what it may do is its sessions' policy).
func newH2(cfg *config.Config, pc httpproxy.Config) (*h2.Server, error) {
	return h2.New(h2.Config{
		Forwarded:             pc.Forwarded,
		Via:                   pc.Via,
		MaxConcurrentStreams:  uint32(cfg.HTTP2.MaxConcurrentStreams),
		MaxHeaderListSize:     uint32(cfg.HTTP2.MaxHeaderListSize),
		InitialStreamWindow:   uint32(cfg.HTTP2.InitialStreamWindow),
		InitialConnWindow:     uint32(cfg.HTTP2.InitialConnWindow),
		MaxFrameSize:          uint32(cfg.HTTP2.MaxFrameSize),
		MaxHeaderBytes:        pc.MaxHeaderBytes,
		HandshakeTimeout:      pc.ReadHeaderTimeout,
		ResponseHeaderTimeout: pc.ResponseHeaderTimeout,
		IdleTimeout:           pc.IdleTimeout,
		WriteTimeout:          pc.WriteTimeout,
		TunnelIdleTimeout:     cfg.Timeouts.IdleTunnel.Duration,
		Logger:                pc.Logger,
	})
}

// serveTLS completes the TLS handshake of a client of an "https" listener
// within the read-header timeout, then serves HTTP/2 over it when ALPN
// chose "h2", HTTP/1.1 proxying otherwise.
// The socket is wrapped so that crypto/tls never reads past a record it
// needs, which lets an idle tunnel park on socket readiness with no
// buffer (see tunnel.RecordConn).
func (l *listener) serveTLS(c *net.TCPConn, sess *gate.Session) {
	ctx := sess.Context()
	if !l.acquireHandshake(ctx) { // limits.max_tls_handshakes
		c.Close()
		return
	}
	tc := tls.Server(tunnel.RecordConn(c), l.tls.TLSConfig())
	c.SetDeadline(time.Now().Add(l.peek))
	err := handshake(ctx, tc)
	l.releaseHandshake()
	if err != nil {
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	cs := tc.ConnectionState()
	sess.SetTLS(cs) // a verified client certificate names the user
	if l.h2 != nil && cs.NegotiatedProtocol == "h2" {
		l.h2.ServeConn(tc, sess)
		return
	}
	l.proxy.ServeConn(tc, sess)
}

// handshake runs tc's handshake on a goroutine of its own and waits for
// it. The handshake's cryptography grows a goroutine's stack to tens of
// KiB, and a stack only shrinks when the garbage collector happens to
// run: done here, that growth leaves with the short-lived goroutine
// instead of staying with the connection's, which may then sit in an
// idle tunnel for hours.
func handshake(ctx context.Context, tc *tls.Conn) error {
	errc := make(chan error, 1)
	go func() { errc <- tc.HandshakeContext(ctx) }()
	return <-errc
}

// ReloadTLS re-reads the certificate and key (and client CA) of every
// https listener; connections keep running. A listener whose new files
// are invalid keeps its old ones, and the first such error is returned.
func (s *Server) ReloadTLS() error {
	s.mu.Lock()
	ls := s.listeners // Reload may replace them
	s.mu.Unlock()
	var first error
	for _, l := range ls {
		if l.tls == nil {
			continue
		}
		if err := l.tls.Reload(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
