package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/limits"
)

// newPolicy compiles the configuration's access rules; nil when there are
// none (every request allowed).
func newPolicy(c config.ACL) (*acl.Policy, error) {
	if len(c.Rules) == 0 {
		return nil, nil
	}
	rules := make([]acl.Rule, len(c.Rules))
	for i, r := range c.Rules {
		rules[i] = acl.Rule{
			Name: r.Name, Action: r.Action, Clients: r.Clients, Users: r.Users, Groups: r.Groups,
			Hosts: r.Hosts, Ports: r.Ports, Methods: r.Methods, Protocols: r.Protocols, AllowPrivate: r.AllowPrivate,
		}
	}
	return acl.New(acl.Config{Rules: rules, Groups: c.Groups, Default: c.Default})
}

// newGuard returns the private-destination guard with the configuration's
// allow_private ranges.
func newGuard(allow []string) (*dialer.Guard, error) {
	var prefixes []netip.Prefix
	for _, s := range allow {
		p, err := acl.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("allow_private: %w", err)
		}
		prefixes = append(prefixes, p)
	}
	return dialer.NewGuard(prefixes), nil
}

// newLimiter returns the limiter for the configuration's [limits]; the
// connection limit derived from the open-file limit when not set.
func newLimiter(c config.Limits, log *slog.Logger) *limits.Limiter {
	var nofile uint64 = 1024
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil {
		nofile = lim.Cur
	}
	auth := c.AuthFailures
	if auth < 0 {
		auth = 0
	}
	return limits.New(limits.Config{
		MaxConns:           c.ConnectionLimit(nofile),
		MaxConnsPerClient:  c.MaxConnectionsPerClient,
		MaxConnsPerUser:    c.MaxConnectionsPerUser,
		ConnRate:           float64(c.ConnectionRate),
		ConnBurst:          c.ConnectionBurst,
		AuthFailures:       auth,
		AuthWindow:         c.AuthFailureWindow.Duration,
		AuthCooldown:       c.AuthCooldown.Duration,
		UserBytesPerSecond: int64(c.UserBytesPerSecond),
		UserBytesBurst:     int64(c.UserBytesBurst),
		Logger:             log,
	})
}

// logGuard logs, once at start, which private ranges the guard lets
// through.
func (s *Server) logGuard() {
	allowed := "none"
	if a := s.guard.Allowed(); len(a) > 0 {
		parts := make([]string, len(a))
		for i, p := range a {
			parts[i] = p.String()
		}
		allowed = strings.Join(parts, ",")
	}
	s.log.Info("private-destination guard on", "allowed_private", allowed, "acl_rules", len(s.cfg.ACL.Rules))
}

// setOwnAddrs tells the guard the bound listener addresses.
func (s *Server) setOwnAddrsLocked() {
	var own []netip.AddrPort
	for _, l := range s.listeners {
		for _, ln := range l.lns {
			if a, ok := ln.Addr().(*net.TCPAddr); ok {
				own = append(own, a.AddrPort())
			}
		}
	}
	s.guard.SetOwn(own)
}

// connLimits gives the proxies the limiter (httpproxy.Limiter,
// socks5.Limiter) and tracks the connections they hand to a tunnel
// engine, which end after serveConn returns.
type connLimits struct {
	lim *limits.Limiter

	mu     sync.Mutex
	handed map[net.Conn]struct{} // connections handed to an engine and not yet seen by serveConn; guarded by mu
	// clients holds the address of connections whose client address
	// came in a PROXY protocol header, from admission until served;
	// guarded by mu.
	clients map[net.Conn]netip.AddrPort
}

func newConnLimits(lim *limits.Limiter) *connLimits {
	return &connLimits{lim: lim, handed: make(map[net.Conn]struct{}), clients: make(map[net.Conn]netip.AddrPort)}
}

// setClient records that c was admitted as coming from client (its IP
// unmapped) rather than from its peer.
func (cl *connLimits) setClient(c net.Conn, client netip.AddrPort) {
	cl.mu.Lock()
	cl.clients[c] = client
	cl.mu.Unlock()
}

// client returns the address c's client comes from: the one setClient
// recorded on a proxy_protocol listener, c's peer otherwise.
func (cl *connLimits) client(l *listener, c net.Conn) netip.AddrPort {
	if l.cfg.ProxyProtocol {
		cl.mu.Lock()
		a, ok := cl.clients[c]
		cl.mu.Unlock()
		if ok {
			return a
		}
	}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort()
	}
	return netip.AddrPort{}
}

func (cl *connLimits) AuthFailed(client netip.Addr) time.Duration { return cl.lim.AuthFailed(client) }
func (cl *connLimits) UserConn(user string) bool                  { return cl.lim.UserConn(user) }
func (cl *connLimits) UserDone(user string)                       { cl.lim.UserDone(user) }
func (cl *connLimits) Throttle(user string) *limits.Bucket        { return cl.lim.Throttle(user) }

// Handoff marks c as carried by a tunnel: its admission is released when
// the tunnel ends rather than when serveConn returns.
func (cl *connLimits) Handoff(c net.Conn) func() {
	cl.mu.Lock()
	ip := remoteIP(c)
	if a, ok := cl.clients[c]; ok {
		ip = a.Addr()
	}
	cl.handed[c] = struct{}{}
	cl.mu.Unlock()
	return func() { cl.lim.Release(ip) }
}

// served is called when serveConn is done with c: it releases c's
// admission unless a tunnel carries it on.
func (cl *connLimits) served(c net.Conn, ip netip.Addr) {
	cl.mu.Lock()
	_, handed := cl.handed[c]
	delete(cl.handed, c)
	delete(cl.clients, c)
	cl.mu.Unlock()
	if !handed {
		cl.lim.Release(ip)
	}
}

// remoteIP returns the address a client connection comes from.
func remoteIP(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// refuse closes a connection the limiter did not admit; on an http
// listener it first answers 503 (too many connections in all) or 429
// (the client's limits), which a fresh socket's empty send buffer takes
// without blocking.
func refuse(l *listener, c *net.TCPConn, v limits.Verdict, retry time.Duration) {
	if l.cfg.Protocol == "http" {
		status := "429 Too Many Requests"
		if v == limits.TooMany {
			status = "503 Service Unavailable"
		}
		reason := "rustle: " + v.String() + "\n"
		head := "HTTP/1.1 " + status + "\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
			strconv.Itoa(len(reason)) + "\r\nConnection: close\r\n"
		if retry > 0 {
			head += "Retry-After: " + strconv.Itoa(int((retry+time.Second-1)/time.Second)) + "\r\n"
		}
		c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
		c.Write([]byte(head + "\r\n" + reason))
	}
	c.Close()
}

// acquireHandshake takes one of the server's TLS handshake slots,
// waiting at most l.peek (and no longer than ctx lives); it reports
// whether it got one.
func (l *listener) acquireHandshake(ctx context.Context) bool {
	select {
	case l.handshakes <- struct{}{}:
		return true
	default:
	}
	t := time.NewTimer(l.peek)
	defer t.Stop()
	select {
	case l.handshakes <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// releaseHandshake gives back a slot acquireHandshake took.
func (l *listener) releaseHandshake() { <-l.handshakes }
