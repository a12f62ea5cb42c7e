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
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/pac"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// Config configures a Proxy: the HTTP/1.1 wire settings. Who may do what,
// dialing, pooling, relaying and observing are the session's
// [gate.Policy]; how requests go upstream is Origin's.
type Config struct {
	// Origin is the listener's origin client: the Forwarded and Via
	// fields, the head size bound (MaxHeaderBytes, for request heads
	// too), and the write and response-header timeouts (WriteTimeout for
	// writes to clients too). New rejects nil.
	Origin *origin.Client
	// ReadHeaderTimeout bounds reading a request head from its first byte,
	// and the wait for a connection's first request; 0 = no limit (the
	// configuration always sets one).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive client connection idle this long;
	// 0 = no limit (the configuration always sets one).
	IdleTimeout time.Duration
	// UpstreamIdle closes the upstream connection that a keep-alive
	// client connection inside an intercepted tunnel keeps for its next
	// request once the client has sent nothing this long; 0 = kept until
	// the client connection ends.
	UpstreamIdle time.Duration
	// SocketBufferBytes sets SO_SNDBUF/SO_RCVBUF on client sockets.
	// 0 = kernel autotuning.
	SocketBufferBytes int
	// Logger receives connection-level events; nil = discard.
	Logger *slog.Logger
	// PAC is the proxy auto-configuration file the listener serves at
	// pac.Path (see servePAC); nil = none.
	PAC *pac.PAC
}

// Proxy serves HTTP/1.1 proxy connections. It is safe for concurrent use
// by many connections.
type Proxy struct {
	cfg Config
	oc  *origin.Client
	o   *origin.Config // oc's
	log *slog.Logger

	conns sync.Pool // *conn, reused across client connections
}

// New returns a Proxy for cfg. It fills no defaults (the configuration
// has resolved every value): it returns an error when Origin is nil. A
// timeout of 0 arms no deadline.
func New(cfg Config) (*Proxy, error) {
	if cfg.Origin == nil {
		return nil, errors.New("httpproxy: Origin must be set")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Proxy{cfg: cfg, oc: cfg.Origin, o: cfg.Origin.Config(), log: log}
	p.conns.New = func() any {
		cn := &conn{bodyErr: make(chan error, 1)}
		cn.resumeFn = cn.resume
		cn.lookFn = cn.look
		return cn
	}
	return p, nil
}

// ServeConn serves one client connection until it closes, fails, becomes
// a tunnel, or the session's context is done (checked between requests:
// a request in progress finishes first). ServeConn owns c: it closes it or
// hands it on. c is a *net.TCPConn on a plain port, or a connection whose
// handshake is done on a TLS port. sess is c's session: what it may do,
// its client's address and its tunnel engine; the caller closes it after
// ServeConn returns.
func (p *Proxy) ServeConn(c net.Conn, sess *gate.Session) {
	p.ServeConnRead(c, sess, nil)
}

// ServeConnRead is ServeConn for a connection from which the caller has
// already read the bytes read, to see what it speaks: they are served as
// the start of the first request. read must fit a client connection's
// read buffer (8 KiB); it is copied there.
func (p *Proxy) ServeConnRead(c net.Conn, sess *gate.Session, read []byte) {
	p.serve(c, sess, read, netip.AddrPort{}, nil)
}

// ServeConnReadThen is ServeConnRead, except that a connection that
// goes on without the calling goroutine may be let go of: a CONNECT
// tunnel that is intercepted (gate.Grant.InterceptThen), and an
// intercepted tunnel's connection (Session.Intercepted) idle between
// requests (for more than 25 to 50 ms), which then waits for its client with
// no goroutine where the platform allows (tunnel.Parker.Notify), as an idle HTTP/2 connection
// does (h2.Server.ServeConnThen). It then reports true, and calls then
// once the connection has ended, on another goroutine or before it
// returns; otherwise it reports false, having served the connection,
// and does not call then.
func (p *Proxy) ServeConnReadThen(c net.Conn, sess *gate.Session, read []byte, then func()) bool {
	return p.serve(c, sess, read, netip.AddrPort{}, then)
}

// serve is ServeConnReadThen (then nil: ServeConnRead), for a
// transparent connection to orig when orig is valid (see
// ServeTransparent).
func (p *Proxy) serve(c net.Conn, sess *gate.Session, read []byte, orig netip.AddrPort, then func()) bool {
	if p.cfg.SocketBufferBytes > 0 {
		if tc := clientTCP(c); tc != nil {
			if rc, err := tc.SyscallConn(); err == nil {
				dialer.SetBuffers(rc, p.cfg.SocketBufferBytes)
			}
		}
	}
	cn := p.conns.Get().(*conn)
	cn.takeWork()
	cn.p = p
	cn.sess = sess
	cn.ctx = sess.Context()
	cn.pool = sess.Policy().Pool
	cn.icept = sess.Intercepted() // authSame was emptied by reset
	cn.orig = orig
	cn.then = then
	cn.client.Attach(c, &http1.ClientBufs)
	cn.client.W = copy(cn.client.Buf, read)
	// On shutdown, a connection waiting for its next request is woken so
	// that it closes; one in the middle of a request finishes it first.
	cn.mu.Lock()
	gen := cn.gen
	cn.mu.Unlock()
	cn.stop = context.AfterFunc(cn.ctx, func() { cn.wake(c, gen) })
	return cn.after(cn.serve())
}

// wake is what a connection does when its session's context is done:
// one waiting for its next request (idle) has its read deadline passed,
// one parked (notify) its wait woken, unless the conn serves another
// connection than the one of gen by now.
func (cn *conn) wake(c net.Conn, gen uint64) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.gen != gen {
		return
	}
	if cn.idle.Load() {
		c.SetReadDeadline(time.Unix(1, 0))
	}
	if cn.notice != nil {
		cn.notice.Wake()
	}
}

// after does what serve's result r asks: it ends the connection unless
// it goes on without this goroutine (connParked, connHeld), and reports
// whether it does.
func (cn *conn) after(r int) bool {
	switch r {
	case connParked:
		return true
	case connHeld:
		cn.end(true)
		return true
	}
	cn.end(r == connHandedOff)
	return false
}

// end ends the connection, once served, and puts the conn back in its
// pool: the client connection closed unless it was handed off.
func (cn *conn) end(handedOff bool) {
	p := cn.p
	cn.takeWork()
	cn.stop()
	if !handedOff {
		cn.client.C.Close()
	}
	cn.g.Finish(0, 0)
	cn.x.Close()
	cn.client.Release()
	cn.mu.Lock()
	cn.gen++
	cn.mu.Unlock()
	cn.reset()
	p.conns.Put(cn)
}

// clientTCP returns the TCP socket under a client connection: c itself
// on a plain port, the socket under the TLS connection on a TLS port
// (made over tunnel.RecordConn, as the https listener makes them, or
// straight over the socket); nil for any other connection.
func clientTCP(c net.Conn) *net.TCPConn {
	switch c := c.(type) {
	case *net.TCPConn:
		return c
	case *tls.Conn:
		if raw, ok := tunnel.RawTCP(c); ok {
			return raw
		}
		raw, _ := c.NetConn().(*net.TCPConn)
		return raw
	}
	return nil
}
