package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxyproto"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// serve hands a client connection from client to what the listener
// speaks. A "mixed" listener looks at the connection's first byte without
// consuming it: 0x05 (SOCKS5) and 0x04 (SOCKS4) go to the SOCKS server,
// anything else to the HTTP proxy. It reports true when the connection
// goes on being served after it returns (see serveTLS), which then runs
// end once it has been; otherwise it has been served when serve returns.
func (l *listener) serve(c *net.TCPConn, sess *gate.Session, end *connEnd) bool {
	switch l.Config.Protocol {
	case "https":
		return l.serveTLS(c, sess, end)
	case "socks5":
		return l.serveSOCKS(c, sess, end)
	case config.ProtocolTransparent:
		l.Transparent.ServeConn(c, sess)
		return false
	case "mixed":
		b, err := peekByte(sess.Context(), c, l.ReadHeader)
		if err != nil {
			c.Close()
			return false
		}
		if b == 0x05 || b == 0x04 {
			return l.serveSOCKS(c, sess, end)
		}
	}
	return l.serveHTTP1(c, sess, nil, end)
}

// serveHTTP1 serves c, whose first bytes read are read, as HTTP/1.1. On
// a listener that intercepts tunnels, an intercepted one goes on without
// this goroutine (httpproxy.Proxy.ServeConnReadThen), with none while
// it is idle: serveHTTP1 then reports true, and end runs once the
// connection has been served. Elsewhere it has been when serveHTTP1
// returns, and end is the caller's to run: a connection then takes no
// allocation for end.
func (l *listener) serveHTTP1(c net.Conn, sess *gate.Session, read []byte, end *connEnd) bool {
	if sess.Policy().Intercept == nil {
		l.Proxy.ServeConnRead(c, sess, read)
		return false
	}
	return l.Proxy.ServeConnReadThen(c, sess, read, end.then())
}

// serveSOCKS serves c as SOCKS5 or SOCKS4. On a listener that
// intercepts tunnels, an intercepted one goes on without this goroutine
// (socks5.Server.ServeConnThen), with none while it is idle, as
// serveHTTP1's: serveSOCKS then reports true, and end runs once the
// connection has been served. Elsewhere it has been when serveSOCKS
// returns, and end is the caller's to run.
func (l *listener) serveSOCKS(c *net.TCPConn, sess *gate.Session, end *connEnd) bool {
	if sess.Policy().Intercept == nil {
		l.SOCKS.ServeConn(c, sess)
		return false
	}
	return l.SOCKS.ServeConnThen(c, sess, end.then())
}

// peekByte returns the first byte c has received, leaving it unread
// (recv with MSG_PEEK). It waits at most timeout, and no longer than ctx
// is live.
func peekByte(ctx context.Context, c *net.TCPConn, timeout time.Duration) (byte, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, fmt.Errorf("server: peek first byte: %w", err)
	}
	c.SetReadDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
	var pk peeker
	err = rc.Read(pk.peek)
	b, n, rerr := pk.b, pk.n, pk.err
	if !stop() {
		// ctx is done: the AfterFunc has run or is running; its
		// deadline stays, which is what a closing connection wants.
		return 0, fmt.Errorf("server: peek first byte: %w", ctx.Err())
	}
	c.SetReadDeadline(time.Time{})
	switch {
	case err != nil:
		return 0, fmt.Errorf("server: peek first byte: %w", err)
	case rerr != nil:
		return 0, fmt.Errorf("server: peek first byte: %w", rerr)
	case n == 0:
		return 0, io.EOF
	}
	return b[0], nil
}

// serveProxied reads the PROXY protocol header that starts a connection
// to a proxy_protocol listener, within the read-header timeout, then
// admits it with the listener's limits as coming from the address the
// header carries, and serves it (serveConn). A connection from a peer
// outside proxy_protocol_from is closed unread, and logged; one without
// a valid header is closed. The caller has counted the connection in
// s.conns.
func (s *Server) serveProxied(l *listener, c *net.TCPConn, eng *tunnel.Engine) {
	if l.ProxyFrom != nil {
		var peer netip.AddrPort
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			peer = a.AddrPort()
		}
		if !trusted(l.ProxyFrom, peer.Addr().Unmap()) {
			if s.log.Enabled(s.connCtx, slog.LevelInfo) {
				s.log.Info("server: connection to a PROXY protocol listener from a peer outside proxy_protocol_from; closed",
					"listener", l.Config.Name, "peer", peer.String())
			}
			c.Close()
			s.conns.Done()
			return
		}
	}
	client, err := readProxyHeader(s.connCtx, c, l.ReadHeader)
	if err != nil {
		s.log.Debug("server: connection without a valid PROXY protocol header closed",
			"listener", l.Config.Name, "peer", c.RemoteAddr().String(), "err", err)
		c.Close()
		s.conns.Done()
		return
	}
	if a := l.Policy.Admit(client.Addr()); !a.OK() {
		refuse(l, c, a)
		s.conns.Done()
		return
	}
	s.serveConn(l, c, client, eng)
}

// trusted reports whether ip is in one of the prefixes.
func trusted(from []netip.Prefix, ip netip.Addr) bool {
	for _, p := range from {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// readProxyHeader reads the PROXY protocol header (v1 or v2) at the start
// of c, and nothing past it, waiting at most timeout and no longer than
// ctx lives. It returns the client address the header carries, its IP
// unmapped; a LOCAL header (the balancer's own connection, such as a
// health check) or one without addresses gives c's peer.
func readProxyHeader(ctx context.Context, c *net.TCPConn, timeout time.Duration) (netip.AddrPort, error) {
	c.SetReadDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Unix(1, 0)) })
	h, err := proxyproto.Read(c)
	if !stop() {
		return netip.AddrPort{}, fmt.Errorf("server: read PROXY protocol header: %w", ctx.Err())
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("server: read PROXY protocol header: %w", err)
	}
	c.SetReadDeadline(time.Time{})
	src := h.Source
	if h.Command == proxyproto.CommandLocal || !src.IsValid() {
		if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
			src = a.AddrPort()
		}
	}
	return netip.AddrPortFrom(src.Addr().Unmap(), src.Port()), nil
}
