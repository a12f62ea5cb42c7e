package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"time"

	"golang.org/x/net/http2"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// serveTLS completes the TLS handshake of a client of an "https" listener
// within the read-header timeout, then serves HTTP/2 over it when ALPN
// chose "h2" (see serveH2), HTTP/1.1 proxying otherwise; a listener
// whose alpn leaves out "http/1.1" closes a client that chose nothing.
// The socket is wrapped so that crypto/tls never reads past a record it
// needs, which lets an idle tunnel park on socket readiness with no
// buffer (see tunnel.RecordConn). It reports whether the connection goes
// on being served after it returns, as HTTP/2 is (see serveH2), to run
// end once it has been.
func (l *listener) serveTLS(c *net.TCPConn, sess *gate.Session, end *connEnd) bool {
	ctx := sess.Context()
	// A handshake slot is taken only once a TLS record is arriving: a
	// silent socket waits for its first byte without one, and plain HTTP
	// sent to this port is told what the port speaks.
	// Nor does a ClientHello that trickles in: the slot waits for its
	// whole first record, which must arrive within client_hello.
	helloBy := time.Now().Add(l.ClientHello)
	b, err := peekByte(ctx, c, l.ClientHello)
	if err != nil {
		c.Close()
		return false
	}
	if b != tlsHandshakeRecord {
		l.refuseNotTLS(c, sess, b)
		return false
	}
	if err := waitRecord(ctx, c, helloBy); err != nil {
		c.Close()
		return false
	}
	slot := l.handshakes.acquire(ctx, sess.ClientIP(), l.ReadHeader) // limits.max_tls_handshakes
	if slot == nil {
		c.Close()
		return false
	}
	tc, hello := serverConn(c, l.TLS.TLSConfig())
	c.SetDeadline(time.Now().Add(l.ReadHeader))
	err = handshake(ctx, tc)
	l.handshakes.release(slot)
	if err != nil {
		if ctx.Err() == nil { // not cut by a shutdown
			var g gate.Grant
			sess.Reject(&gate.Request{Target: []byte(hello.serverName)}, &g, 0, accesslog.ReasonTLSHandshake, err)
		}
		c.Close()
		return false
	}
	c.SetDeadline(time.Time{})
	cs := tc.ConnectionState()
	sess.SetTLS(cs) // a verified client certificate names the user
	switch {
	case l.H2 != nil && cs.NegotiatedProtocol == config.ALPNH2:
		return l.serveH2(tc, sess, end)
	case l.HTTP1:
		return l.serveHTTP1(tc, sess, nil, end)
	default:
		// An h2-only listener, and a client that chose no protocol: it
		// offered none, or only http/1.1, which crypto/tls lets through
		// choosing nothing (one that offered others failed the
		// handshake).
		if lg := sess.Policy().Logger; lg != nil && lg.Enabled(ctx, slog.LevelDebug) {
			lg.Debug("server: TLS client chose no ALPN protocol on an h2-only listener; closed",
				"client", sess.Client().String())
		}
		tc.Close()
	}
	return false
}

// serveH2 serves a client that chose "h2". Some clients choose it and
// then speak HTTP/1.1 (Go's net/http Transport to an https:// proxy: its
// CONNECT requests); so on a listener that also offers "http/1.1" the
// client's first bytes are read first, within the read-header timeout
// (see firstBytesKind): the HTTP/2 client preface goes on as HTTP/2, the
// start of an HTTP/1.1 request is served as HTTP/1.1 from those bytes on,
// and anything else is closed, as is a client that sends nothing or stops
// before the bytes tell. The reads never go past the preface, so the
// *tls.Conn itself is handed on, as it would be without them, and a
// CONNECT tunnel still gets the TLS relay. An HTTP/2 connection is
// served on goroutines of its own (h2.Server.ServeConnThen), which run
// end once it has been: serveH2 then returns true at once.
func (l *listener) serveH2(tc *tls.Conn, sess *gate.Session, end *connEnd) bool {
	if !l.HTTP1 {
		l.H2.ServeConnThen(tc, sess, end.then())
		return true
	}
	var first [len(http2.ClientPreface)]byte
	n, kind, err := readFirstBytesAside(sess.Context(), tc, first[:], l.ReadHeader)
	switch {
	case err != nil:
		tc.Close()
	case kind == firstH2:
		l.H2.ServePrefacedThen(tc, sess, end.then())
		return true
	case kind == firstHTTP1:
		return l.serveHTTP1(tc, sess, first[:n], end)
	default:
		if lg := sess.Policy().Logger; lg != nil && lg.Enabled(sess.Context(), slog.LevelDebug) {
			lg.Debug("server: TLS client chose h2, then sent neither the HTTP/2 preface nor an HTTP/1.1 request; closed",
				"client", sess.Client().String())
		}
		tc.Close()
	}
	return false
}

// What the first bytes of a client that chose h2 are (firstBytesKind).
const (
	firstMore  = iota // a start of more than one kind, or of one not yet certain: read on
	firstH2           // the HTTP/2 client preface, whole
	firstHTTP1        // an HTTP/1.1 request line's method and space
	firstOther        // neither
)

// http1Methods are the request methods (RFC 9110 and PATCH), each with
// the space after it, that begin an HTTP/1.1 request on a connection
// that chose h2.
var http1Methods = [...]string{"GET ", "HEAD ", "POST ", "PUT ", "DELETE ", "CONNECT ", "OPTIONS ", "TRACE ", "PATCH "}

// firstBytesKind says what b, the first bytes of a connection that chose
// h2, begins. The preface and an HTTP/1.1 method part ways by their
// second byte at the latest ("PR" against "PO", "PU" and "PA");
// any other start is not served, so that a client speaking neither is
// closed as an HTTP/2 server would close it, not answered in HTTP/1.1.
func firstBytesKind(b []byte) int {
	if string(b) == http2.ClientPreface {
		return firstH2
	}
	kind := firstOther
	if len(b) < len(http2.ClientPreface) && string(b) == http2.ClientPreface[:len(b)] {
		kind = firstMore
	}
	for _, m := range http1Methods {
		switch {
		case len(b) >= len(m) && string(b[:len(m)]) == m:
			return firstHTTP1
		case len(b) < len(m) && string(b) == m[:len(b)]:
			kind = firstMore
		}
	}
	return kind
}

// readFirstBytes reads the first bytes of tc into p, which has the
// length of the HTTP/2 client preface, until firstBytesKind tells what
// they are, and returns how many it read and their kind. The error is
// non-nil when reading ended (EOF, timeout passed, ctx done) before the
// bytes told. It waits at most timeout (0 = no limit), and no longer than
// ctx lives.
func readFirstBytes(ctx context.Context, tc *tls.Conn, p []byte, timeout time.Duration) (int, int, error) {
	tc.SetReadDeadline(gate.Deadline(time.Now(), timeout))
	stop := context.AfterFunc(ctx, func() { tc.SetReadDeadline(time.Unix(1, 0)) })
	n, kind := 0, firstMore
	var err error
	for kind == firstMore && err == nil {
		var m int
		m, err = tc.Read(p[n:])
		n += m
		kind = firstBytesKind(p[:n])
	}
	if !stop() {
		return n, kind, fmt.Errorf("server: read first bytes after ALPN h2: %w", ctx.Err())
	}
	if kind == firstMore {
		return n, kind, fmt.Errorf("server: read first bytes after ALPN h2: %w", err)
	}
	// Told; a read error comes back on the next read.
	tc.SetReadDeadline(time.Time{})
	return n, kind, nil
}

// readFirstBytesAside is readFirstBytes on a goroutine of its own, for
// the reason handshake is: decrypting the first record grows a stack to
// 8 KiB, and the connection's goroutine, when it then serves HTTP/1.1
// (ServeConnRead), would keep that stack (a goroutine parked with more
// than about 1.2 KiB of frames, as this one is, keeps an 8 KiB stack once
// grown to it); HTTP/2 is served on goroutines of the connection's own
// (ServePrefacedThen), and this one ends.
func readFirstBytesAside(ctx context.Context, tc *tls.Conn, p []byte, timeout time.Duration) (int, int, error) {
	type result struct {
		n, kind int
		err     error
	}
	done := make(chan result, 1)
	go func() {
		n, kind, err := readFirstBytes(ctx, tc, p, timeout)
		done <- result{n, kind, err}
	}()
	r := <-done
	return r.n, r.kind, r.err
}

// waitRecord waits, reading nothing, until the first TLS record c has
// received is whole in its socket buffer, until deadline at the latest
// and no longer than ctx is live.
func waitRecord(ctx context.Context, c *net.TCPConn, deadline time.Time) error {
	rc, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("server: wait for the ClientHello: %w", err)
	}
	c.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
	var w recordWaiter
	err = rc.Read(w.ready)
	if !stop() {
		return fmt.Errorf("server: wait for the ClientHello: %w", ctx.Err())
	}
	c.SetReadDeadline(time.Time{})
	if err == nil {
		err = w.err
	}
	if err != nil {
		return fmt.Errorf("server: wait for the ClientHello: %w", err)
	}
	return nil
}

// clientHello is what a handshake learnt of the client's hello.
type clientHello struct {
	serverName string // the server name (SNI) asked for; "" = none, or the hello was not read
}

// serverConn returns a TLS server connection over c with base's settings,
// and what its handshake learns of the client's hello, which is set once
// the hello is read, also when the handshake then fails (read it once
// the handshake has returned).
func serverConn(c *net.TCPConn, base *tls.Config) (*tls.Conn, *clientHello) {
	hello := new(clientHello)
	cfg := base.Clone()
	next := base.GetConfigForClient
	cfg.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		hello.serverName = hi.ServerName
		if next == nil {
			return nil, nil
		}
		return next(hi)
	}
	return tls.Server(tunnel.RecordConn(c), cfg), hello
}

// tlsHandshakeRecord is the first byte of a TLS connection: the content
// type of the record that carries the ClientHello.
const tlsHandshakeRecord = 0x16

// refuseNotTLS closes a connection to an https listener that did not
// start with a TLS record, first answering 400 in plain HTTP when it
// looks like an HTTP request (its first byte a letter, as a method's),
// and logs it (the access log, and the refusal's debug line).
func (l *listener) refuseNotTLS(c *net.TCPConn, sess *gate.Session, first byte) {
	http := 'A' <= first && first <= 'Z'
	status := 0
	if http {
		status = 400
	}
	var g gate.Grant
	sess.Reject(&gate.Request{}, &g, status, accesslog.ReasonNotTLS,
		fmt.Errorf("server: not TLS on an https listener: first byte %#02x, plain HTTP %v", first, http))
	if http {
		http1.RefuseAndClose(c, "this port speaks TLS: use an https:// URL for this proxy")
		return
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
	ls := s.listenersLocked() // Reload may replace them
	s.mu.Unlock()
	var first error
	for _, l := range ls {
		if l.TLS == nil {
			continue
		}
		if err := l.TLS.Reload(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
