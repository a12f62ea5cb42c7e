package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxyproto"
	"github.com/rustle-proxy/rustle/internal/socks5"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// newSOCKS returns the SOCKS server of a "socks5" or "mixed" listener lc.
// authr is the users' authenticator, nil when none are configured; it is
// used when the listener's effective auth is "basic". policy is the access
// policy, nil for none.
func newSOCKS(cfg *config.Config, lc config.Listener, d *dialer.Dialer, authr *auth.Authenticator, log *slog.Logger,
	policy *acl.Policy, lim socks5.Limiter, lm *metrics.ListenerMetrics, al *accesslog.Logger) *socks5.Server {
	sc := socks5.Config{
		Listener:          lc.Name,
		Metrics:           lm,
		AccessLog:         al,
		Dialer:            d,
		HandshakeTimeout:  cfg.Timeouts.ReadHeader.Duration,
		UDPIdleTimeout:    cfg.Timeouts.UDPIdle.Duration,
		TunnelIdleTimeout: cfg.Timeouts.IdleTunnel.Duration,
		SocketBufferBytes: cfg.SocketBufferBytes,
		Limiter:           lim,
		Logger:            log,
	}
	if policy != nil {
		sc.Access = policy
	}
	if cfg.EffectiveAuth(lc) == config.AuthBasic {
		sc.Auth = authr
	}
	return socks5.New(sc)
}

// serve hands a client connection from client to what the listener
// speaks. A "mixed" listener looks at the connection's first byte without
// consuming it: 0x05 (SOCKS5) and 0x04 (SOCKS4) go to the SOCKS server,
// anything else to the HTTP proxy.
func (l *listener) serve(ctx context.Context, c *net.TCPConn, eng *tunnel.Engine, client netip.AddrPort) {
	switch l.cfg.Protocol {
	case "https":
		l.serveTLS(ctx, c, eng, client)
		return
	case "socks5":
		l.socks.ServeConnFrom(ctx, c, eng, client)
		return
	case "mixed":
		b, err := peekByte(ctx, c, l.peek)
		if err != nil {
			c.Close()
			return
		}
		if b == 0x05 || b == 0x04 {
			l.socks.ServeConnFrom(ctx, c, eng, client)
			return
		}
	}
	l.proxy.ServeConnFrom(ctx, c, eng, client)
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
	var b [1]byte
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, _, rerr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK)
			if rerr != unix.EINTR {
				return rerr != unix.EAGAIN
			}
		}
	})
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
// admits it with cl's limits as coming from the address the header
// carries, and serves it (serveConn). A connection without a valid header
// is closed. The caller has counted the connection in s.conns.
func (s *Server) serveProxied(l *listener, c *net.TCPConn, eng *tunnel.Engine, cl *connLimits) {
	client, err := readProxyHeader(s.connCtx, c, l.peek)
	if err != nil {
		s.log.Debug("server: connection without a valid PROXY protocol header closed",
			"listener", l.cfg.Name, "peer", c.RemoteAddr().String(), "err", err)
		c.Close()
		s.conns.Done()
		return
	}
	ip := client.Addr()
	if v, retry := cl.lim.Admit(ip); v != limits.OK {
		refuse(l, c, v, retry)
		s.conns.Done()
		return
	}
	cl.setClient(c, client)
	s.serveConn(l, c, ip, eng)
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
