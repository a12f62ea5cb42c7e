package server

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
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

// newH2 returns the HTTP/2 server of an "https" listener, which shares
// the listener's dialer, upstream pool, authenticator, access policy,
// limiter, timeouts, metrics and access log.
func newH2(cfg *config.Config, pc httpproxy.Config) *h2.Server {
	hc := h2.Config{
		Dialer:                pc.Dialer,
		Pool:                  pc.Pool,
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
		TunnelIdleTimeout:     pc.TunnelIdleTimeout,
		Logger:                pc.Logger,
		Listener:              pc.Listener,
		Metrics:               pc.Metrics,
		UserMetrics:           pc.UserMetrics,
		AccessLog:             pc.AccessLog,
	}
	if pc.Auth != nil {
		hc.Auth = pc.Auth
	}
	if pc.Access != nil {
		hc.Access = pc.Access
	}
	if pc.Limiter != nil {
		hc.Limiter = pc.Limiter
	}
	return h2.New(hc)
}

// serveTLS completes the TLS handshake of a client of an "https" listener
// within the read-header timeout, then serves HTTP/2 over it when ALPN
// chose "h2", HTTP/1.1 proxying otherwise.
// The socket is wrapped so that crypto/tls never reads past a record it
// needs, which lets an idle tunnel park on socket readiness with no
// buffer (see tunnel.RecordConn).
func (l *listener) serveTLS(ctx context.Context, c *net.TCPConn, eng *tunnel.Engine, client netip.AddrPort) {
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
	if l.h2 != nil && tc.ConnectionState().NegotiatedProtocol == "h2" {
		l.h2.ServeConnFrom(ctx, tc, client)
		return
	}
	l.proxy.ServeConnFrom(ctx, tc, eng, client)
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
