package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

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
	var nofile uint64 = defaultOpenFiles
	if soft, _, err := openFileLimit(); err == nil {
		nofile = soft
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
