// Package transparent serves the connections the kernel redirected to a
// transparent listener, from clients that know of no proxy: it learns
// each connection's original destination (REDIRECT or DNAT:
// SO_ORIGINAL_DST from the connection tracking; TPROXY: the socket's own
// local address), then tells what the connection is by its first bytes.
// An HTTP/1.x request goes to the HTTP proxy (httpproxy.ServeTransparent),
// each request to the original destination; a TLS ClientHello names the
// host through its server_name, and the connection becomes a tunnel to
// the original destination with the hello as its first bytes; anything
// else (or nothing within timeouts.client_hello: a protocol whose server
// speaks first) a plain TCP tunnel to it.
//
// Every one of them takes the shared request path (package gate): the
// access rules with the protocol "transparent", the guard on the
// original destination, routes and parents, egress, limits, the access
// log with the original destination and the name learnt, the metrics.
// The destination is pinned (see gate.Request.Original): what a client
// names, in its Host field or its server_name, is matched by the rules
// and logged, never dialled. There is no proxy authentication: a
// transparent client is its address.
//
// A connection with no original destination, or whose original
// destination is one of rustle's own listening addresses (it was not
// redirected), is closed unanswered; so is one of rustle's own upstream
// connections that a redirect rule brought back (a loop: see
// gate.Session.ComesBack).
package transparent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/httpproxy"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// Config configures a Server.
type Config struct {
	// Proxy serves the HTTP requests of transparent connections;
	// required.
	Proxy *httpproxy.Proxy
	// TProxy says the listener's socket is IP_TRANSPARENT (TPROXY): a
	// connection's original destination is its local address. false
	// reads it from the connection tracking (REDIRECT, DNAT).
	TProxy bool
	// FirstBytes is how long a connection has to send its first bytes
	// (a whole ClientHello, when it begins one); a connection silent
	// that long becomes a plain TCP tunnel (its server may speak first).
	// 0 = no limit.
	FirstBytes time.Duration
	// WriteTimeout bounds writing a connection's first bytes upstream;
	// 0 = no limit.
	WriteTimeout time.Duration
	// Logger receives debug lines; nil = discard.
	Logger *slog.Logger
}

// Server serves transparent connections. It is safe for concurrent use.
type Server struct {
	cfg Config
	log *slog.Logger

	mu            sync.Mutex
	warned        time.Time // the last warnNotRedirected; guarded by mu
	notRedirected int       // connections not redirected since; guarded by mu
}

// New returns a Server for cfg; it fails without a Proxy.
func New(cfg Config) (*Server, error) {
	if cfg.Proxy == nil {
		return nil, errors.New("transparent: Proxy must be set")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, log: log}, nil
}

// firstRead is the size of the buffer a tunnel's first bytes are read
// into: a ClientHello's first record, most often all of it (it grows, up
// to sni.MaxBytes, for a longer one), or what another protocol sent
// first.
const firstRead = 4 << 10

// firstBufs are buffers of firstRead bytes, for the first bytes of
// tunnels: they are written upstream, then given back.
var firstBufs = sync.Pool{New: func() any { return new([firstRead]byte) }}

// ServeConn serves c, a connection a transparent listener accepted, in
// sess. It owns c: it closes it or hands it to a tunnel.
func (s *Server) ServeConn(c *net.TCPConn, sess *gate.Session) {
	orig, err := s.original(c, sess)
	if err != nil {
		sess.Reject(&gate.Request{Log: accesslog.ProtoTransparent}, new(gate.Grant), 0, accesslog.ReasonNotRedirected, err)
		s.warnNotRedirected(sess, err)
		c.Close()
		return
	}
	// One deadline for the first bytes, sniffed and then read.
	var deadline time.Time
	if t := s.cfg.FirstBytes; t > 0 {
		deadline = time.Now().Add(t)
	}
	kind, n, perr := s.sniff(sess.Context(), c, deadline)
	if kind == kindNothing {
		// The client closed, or a shutdown came, before a byte.
		c.Close()
		return
	}
	if sess.ComesBack(orig) {
		sess.RefuseLoop(&gate.Request{Log: accesslog.ProtoTransparent, Original: orig, Target: []byte(orig.String())}, new(gate.Grant))
		c.Close()
		return
	}
	if kind == kindHTTP {
		// The request is still unread: the HTTP proxy reads it, and
		// nothing of it is held here.
		s.cfg.Proxy.ServeTransparent(c, sess, orig)
		return
	}
	s.tunnel(c, sess, orig, deadline, kind, n, perr)
}

// original returns c's original destination: its local address on a
// TPROXY socket, the connection tracking's otherwise. One that is c's
// own local address on a REDIRECT socket, or any of rustle's own
// listening addresses, was not redirected: an error.
func (s *Server) original(c *net.TCPConn, sess *gate.Session) (netip.AddrPort, error) {
	local := addrPort(c.LocalAddr())
	var orig netip.AddrPort
	if s.cfg.TProxy {
		orig = local
	} else {
		var err error
		if orig, err = redirectedTo(c); err != nil {
			return orig, err
		}
		if orig == local {
			return orig, fmt.Errorf("transparent: the original destination %s is the listener itself: the connection was not redirected", orig)
		}
	}
	if !orig.IsValid() || orig.Port() == 0 {
		return orig, errors.New("transparent: no original destination")
	}
	if err := sess.Policy().Dialer.Check(orig, nil); errors.Is(err, dialer.ErrOwnAddress) {
		return orig, fmt.Errorf("transparent: the original destination %s is one of rustle's own listening addresses", orig)
	}
	return orig, nil
}

// notRedirectedEvery is the least time between two warnings of
// connections that were not redirected.
const notRedirectedEvery = 10 * time.Second

// warnNotRedirected warns, at most once every notRedirectedEvery with
// the count since, of a connection that reached the listener without
// being redirected: a client that names the listener itself, or
// redirect rules that are missing or send it what they should not.
func (s *Server) warnNotRedirected(sess *gate.Session, err error) {
	now := time.Now()
	s.mu.Lock()
	s.notRedirected++
	if now.Sub(s.warned) < notRedirectedEvery {
		s.mu.Unlock()
		return
	}
	n := s.notRedirected
	s.notRedirected, s.warned = 0, now
	s.mu.Unlock()
	s.log.Warn("transparent: a connection reached the listener without being redirected to it; closed "+
		"(clients reach it only through the redirect rules: see docs/operations.md, Transparent interception)",
		"client", sess.Client().String(), "err", err, "closed", n)
}

// What a connection's first bytes are.
const (
	kindNothing = iota // none: the client closed, or the session ended
	kindHTTP           // the start of an HTTP/1.x request
	kindTLS            // a TLS handshake record (a ClientHello, whole or not)
	kindOther          // anything else, or nothing within FirstBytes
)

// sniff waits, until deadline (zero: none) and no longer than ctx
// lives, for c's first bytes, and says what they begin, leaving them
// unread; n is how many of them it saw (at least one unless kind is
// kindNothing or the wait timed out). err is why the wait ended before
// they told (a timeout: a silent client, or one that sent the start of
// a method and no more).
func (s *Server) sniff(ctx context.Context, c *net.TCPConn, deadline time.Time) (kind, n int, err error) {
	c.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
	kind, n, err = peekKind(c)
	if !stop() {
		return kindNothing, 0, ctx.Err()
	}
	c.SetReadDeadline(time.Time{})
	if err != nil && !isTimeout(err) {
		return kindNothing, 0, err
	}
	return kind, n, err
}

// readFirst reads a tunnel's first bytes into a buffer of firstBufs
// until deadline, sniff's (zero: none): the whole ClientHello when they
// begin a TLS handshake (h, and err sni.Read's verdict on it), what has
// come otherwise (seen, sniff's n, bytes at least: nothing after a
// silent wait, sniffed its error).
func (s *Server) readFirst(c *net.TCPConn, deadline time.Time, kind, seen int, sniffed error) (b []byte, h sni.Hello, err error) {
	buf := firstBufs.Get().(*[firstRead]byte)
	c.SetReadDeadline(deadline)
	defer c.SetReadDeadline(time.Time{})
	switch {
	case kind == kindTLS:
		b, h, err = sni.Read(c, buf[:0])
	case seen > 0:
		// They are there: the read does not wait, and must not fail
		// for a deadline sniff ran out.
		c.SetReadDeadline(time.Time{})
		var n int
		n, err = c.Read(buf[:])
		b = buf[:n]
	default:
		b, err = buf[:0], sniffed
	}
	if &b[:1][0] != &buf[0] {
		firstBufs.Put(buf) // sni.Read grew its own
	}
	return b, h, err
}

// putFirst gives b's buffer back to firstBufs, once its bytes are sent.
func putFirst(b []byte) {
	if cap(b) == firstRead {
		firstBufs.Put((*[firstRead]byte)(b[:firstRead]))
	}
}

// kindMore says the first bytes are a start that more bytes tell.
const kindMore = -1

// maxMethod bounds an HTTP method's length in the first bytes.
const maxMethod = 16

// firstKind says what b, a connection's first bytes, is: a TLS
// handshake record (its first byte 0x16), an HTTP/1.x request (a method
// of upper-case letters and a space: the request line's start), anything
// else, or kindMore while b is a start of a method and no space yet.
func firstKind(b []byte) int {
	if len(b) == 0 {
		return kindMore
	}
	if b[0] == 0x16 {
		return kindTLS
	}
	for i, c := range b {
		switch {
		case c == ' ' && i > 0:
			return kindHTTP
		case c < 'A' || c > 'Z' || i >= maxMethod:
			return kindOther
		}
	}
	return kindMore
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// tlsAlertAccessDenied is a TLS record carrying a fatal access_denied
// alert (RFC 8446 §6.2): what a refused TLS client is sent, so that it
// reports the refusal at once rather than a reset.
var tlsAlertAccessDenied = []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x31}

// tunnel serves a connection that is no HTTP (kind, seen and sniffed as
// sniff said, its first bytes due by deadline): a TLS one, whose ClientHello, read whole, names the host,
// or another (b its first bytes, maybe none). It is authorized as
// a tunnel to orig (method CONNECT, the name or the address and the
// port as its target), its hello checked (the SNI check's mode; a
// connection that is no TLS is "[not-tls]"), dialled, and relayed with
// b sent first. A refusal closes it (a TLS client after an access_denied
// alert): the log's status is the one the refusal stands for.
func (s *Server) tunnel(c *net.TCPConn, sess *gate.Session, orig netip.AddrPort, deadline time.Time, kind, seen int, sniffed error) {
	b, h, herr := s.readFirst(c, deadline, kind, seen, sniffed)
	defer putFirst(b)
	if kind != kindTLS {
		herr = fmt.Errorf("transparent: first bytes: %w", sni.ErrNotTLS)
		if len(b) == 0 {
			herr = fmt.Errorf("transparent: no first bytes within timeouts.client_hello: %w", io.ErrUnexpectedEOF)
		}
	}
	g := new(gate.Grant)
	name := ""
	if herr == nil {
		name = h.ServerName
	}
	target := make([]byte, 0, len(name)+8)
	if name != "" {
		target = strconv.AppendUint(append(append(target, name...), ':'), uint64(orig.Port()), 10)
	} else {
		target = orig.AppendTo(target)
	}
	r := gate.Request{Protocol: acl.Transparent, Log: accesslog.ProtoTransparent, Method: "CONNECT", Host: name,
		Addr: orig.Addr(), Port: orig.Port(), Target: target, Original: orig, HelloRead: true, SNI: name}
	k := sess.Authorize(&r, g)
	if k == gate.OK {
		k = g.CheckHello(h, herr)
	}
	if k != gate.OK {
		s.refuse(c, g, k, kind)
		return
	}
	upc, err := g.DialConn(context.WithoutCancel(sess.Context()))
	if err != nil {
		s.refuse(c, g, gate.DialKind(err), kind)
		return
	}
	g.Answer(200, 0) // the tunnel is open: no answer is sent, the first bytes go on
	if len(b) > 0 {
		upc.SetWriteDeadline(gate.Deadline(time.Now(), s.cfg.WriteTimeout))
		n, err := upc.Write(b)
		g.AddBytes(int64(n), 0)
		if err != nil {
			g.SetReason(accesslog.ReasonUnreachable)
			g.Finish(0, 0)
			upc.Close()
			c.Close()
			return
		}
	}
	g.Tunnel(c, upc, nil)
}

// refuse closes c, a transparent tunnel refused with k (a TLS client
// after an access_denied alert), and reports it with the status k stands
// for, none having been sent.
func (s *Server) refuse(c *net.TCPConn, g *gate.Grant, k gate.Kind, kind int) {
	if kind == kindTLS {
		c.SetWriteDeadline(gate.Deadline(time.Now(), s.cfg.WriteTimeout))
		c.Write(tlsAlertAccessDenied)
	}
	g.Answer(k.Status(), 0)
	g.Finish(0, 0)
	c.Close()
}

// addrPort returns a TCP address, unmapped.
func addrPort(a net.Addr) netip.AddrPort {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
