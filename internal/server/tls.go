package server

import (
	"context"
	"crypto/tls"
	"io"
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
	// A handshake slot is taken only once a TLS record is arriving: a
	// silent socket waits for its first byte without one, and plain HTTP
	// sent to this port is told what the port speaks.
	b, err := peekByte(ctx, c, l.peek)
	if err != nil {
		c.Close()
		return
	}
	if b != tlsHandshakeRecord {
		l.refuseNotTLS(c, sess, b)
		return
	}
	if !l.acquireHandshake(ctx) { // limits.max_tls_handshakes
		c.Close()
		return
	}
	tc := tls.Server(tunnel.RecordConn(c), l.tls.TLSConfig())
	c.SetDeadline(time.Now().Add(l.peek))
	err = handshake(ctx, tc)
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

// tlsHandshakeRecord is the first byte of a TLS connection: the content
// type of the record that carries the ClientHello.
const tlsHandshakeRecord = 0x16

// notTLSAnswer is what plain HTTP sent to an https listener is answered.
const notTLSAnswer = "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n" +
	"Content-Length: 65\r\nConnection: close\r\n\r\n" +
	"rustle: this port speaks TLS: use an https:// URL for this proxy\n"

// refuseNotTLS closes a connection to an https listener that did not
// start with a TLS record, first answering 400 in plain HTTP when it
// looks like an HTTP request (its first byte a letter, as a method's),
// and logs it.
func (l *listener) refuseNotTLS(c *net.TCPConn, sess *gate.Session, first byte) {
	http := 'A' <= first && first <= 'Z'
	if http {
		// A fresh socket's empty send buffer takes the answer at once.
		// Then a lingering close: closing with the request unread would
		// reset the connection, and the client could lose the answer.
		c.SetWriteDeadline(time.Now().Add(time.Second))
		c.Write([]byte(notTLSAnswer))
		c.CloseWrite()
		c.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
		io.Copy(io.Discard, io.LimitReader(c, 64<<10))
	}
	if lg := sess.Policy().Logger; lg != nil {
		lg.Info("server: not TLS on an https listener; closed", "client", sess.Client().String(),
			"plain_http", http, "first_byte", int(first))
	}
	c.Close()
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
