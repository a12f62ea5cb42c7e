package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/limits"
)

// newPolicy compiles the configuration's access rules, which may name
// the identity providers' groups; nil when there are none (every request
// allowed).
func newPolicy(c config.ACL, providerGroups []string) (*acl.Policy, error) {
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
	return acl.New(acl.Config{Rules: rules, Groups: c.Groups, ProviderGroups: providerGroups, Default: c.Default})
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

// budget is how the process's descriptors are shared (see
// config.Limits.DescriptorBudget).
type budget struct {
	nofile uint64 // the soft open-file limit it was derived from
	conns  int    // the connection limit; 0 = none
	pipes  int    // the splice pipes of every tunnel engine together
	asked  int    // max_connections when conns is lower (it was lowered), else 0
}

// descriptorBudget splits the open-file limit (defaultOpenFiles when it
// cannot be read) between connections and splice pipes as c says.
func descriptorBudget(c config.Limits) budget {
	var nofile uint64 = defaultOpenFiles
	if soft, _, err := openFileLimit(); err == nil {
		nofile = soft
	}
	conns, pipes := c.DescriptorBudget(nofile)
	b := budget{nofile: nofile, conns: conns, pipes: pipes}
	if _, lowered := c.Lowered(nofile); lowered {
		b.asked = c.MaxConnections
	}
	return b
}

// setPipesLocked gives each tunnel engine its share of the splice pipes
// of b, at least one.
func (s *Server) setPipesLocked(b budget) {
	for _, e := range s.engines {
		e.SetMaxPipes(max(1, b.pipes/len(s.engines)))
	}
}

// logBudget logs how the descriptors are shared, and warns when
// max_connections was lowered to what they hold.
func (s *Server) logBudget(b budget) {
	if b.asked > 0 {
		s.log.Warn("max_connections lowered to what the open-file limit allows", "max_connections", b.asked,
			"open_files", b.nofile, "connections", b.conns, "needs_open_files", config.OpenFilesFor(b.asked))
	}
	s.log.Info("descriptor budget", "open_files", b.nofile, "connections", b.conns, "splice_pipes", b.pipes,
		"splice_pipes_per_worker", max(1, b.pipes/max(1, len(s.engines))))
}

// newLimiter returns the limiter for the configuration's [limits], with
// the connection limit conns (0: none).
func newLimiter(c config.Limits, conns int, log *slog.Logger) *limits.Limiter {
	auth, perAddress := max(c.AuthFailures, 0), max(c.AuthFailuresPerAddress, 0) // -1 = off
	return limits.New(limits.Config{
		MaxConns:               conns,
		MaxConnsPerClient:      c.MaxConnectionsPerClient,
		MaxConnsPerUser:        c.MaxConnectionsPerUser,
		ConnRate:               float64(c.ConnectionRate),
		ConnBurst:              c.ConnectionBurst,
		AuthFailures:           auth,
		AuthFailuresPerAddress: perAddress,
		AuthWindow:             c.AuthFailureWindow.Duration,
		AuthCooldown:           c.AuthCooldown.Duration,
		UserBytesPerSecond:     int64(c.UserBytesPerSecond),
		UserBytesBurst:         int64(c.UserBytesBurst),
		Logger:                 log,
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

// setOwnAddrsLocked tells the guard the bound listener addresses.
func (s *Server) setOwnAddrsLocked() { s.guard.SetOwn(s.ownAddrs(s.listeners)) }

// ownAddrs returns what the guard refuses as the proxy's own: the bound
// addresses of ls and those WithOwnAddrs gave (the admin listener).
func (s *Server) ownAddrs(ls []*listener) []netip.AddrPort {
	own := slices.Clone(s.opts.own)
	for _, l := range ls {
		for _, ln := range l.lns {
			if a, ok := ln.Addr().(*net.TCPAddr); ok {
				own = append(own, a.AddrPort())
			}
		}
	}
	return own
}

// refuse closes a connection that the listener's policy did not admit
// (gate.Policy.Admit); on an http listener it first answers with the
// admission's status (503 or 429), reason and Retry-After, which a fresh
// socket's empty send buffer takes without blocking. It is the one place
// an admission's refusal is written.
func refuse(l *listener, c *net.TCPConn, a gate.Admission) {
	if l.cfg.Protocol == "http" {
		reason := "rustle: " + a.Reason() + "\n"
		head := "HTTP/1.1 " + strconv.Itoa(a.Status()) + " " + http.StatusText(a.Status()) +
			"\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
			strconv.Itoa(len(reason)) + "\r\nConnection: close\r\n"
		if a.RetryAfter > 0 {
			head += "Retry-After: " + strconv.Itoa(int((a.RetryAfter+time.Second-1)/time.Second)) + "\r\n"
		}
		c.SetWriteDeadline(time.Now().Add(10 * time.Millisecond))
		c.Write([]byte(head + "\r\n" + reason))
	}
	c.Close()
}

// handshakeSlots bounds the TLS handshakes in progress: all of them
// (limits.max_tls_handshakes) and those of one client address, an
// eighth of all (at least one), so that a flood of handshakes from one
// address that then stall cannot take every slot from the others. A
// handshake waits for its address's slot first, then for one of all.
type handshakeSlots struct {
	all   chan struct{} // a send takes a slot
	perIP int

	mu  sync.Mutex
	ips map[netip.Addr]*ipSlots // addresses with a handshake waiting or in progress; guarded by mu
}

// ipSlots are one client address's handshake slots.
type ipSlots struct {
	ip   netip.Addr
	c    chan struct{} // a send takes a slot
	refs int           // handshakes waiting or in progress; guarded by handshakeSlots.mu
}

// newHandshakeSlots returns slots for n handshakes at once.
func newHandshakeSlots(n int) *handshakeSlots {
	n = max(1, n)
	return &handshakeSlots{all: make(chan struct{}, n), perIP: max(1, n/8), ips: make(map[netip.Addr]*ipSlots)}
}

// acquire takes a slot for a handshake from ip, waiting at most timeout
// (and no longer than ctx lives). It returns what release gives back,
// nil when it got no slot.
func (h *handshakeSlots) acquire(ctx context.Context, ip netip.Addr, timeout time.Duration) *ipSlots {
	h.mu.Lock()
	s := h.ips[ip]
	if s == nil {
		s = &ipSlots{ip: ip, c: make(chan struct{}, h.perIP)}
		h.ips[ip] = s
	}
	s.refs++
	h.mu.Unlock()
	var t *time.Timer
	take := func(c chan struct{}) bool {
		select {
		case c <- struct{}{}:
			return true
		default:
		}
		if t == nil {
			t = time.NewTimer(timeout)
		}
		select {
		case c <- struct{}{}:
			return true
		case <-t.C:
		case <-ctx.Done():
		}
		return false
	}
	defer func() {
		if t != nil {
			t.Stop()
		}
	}()
	if !take(s.c) {
		h.unref(s)
		return nil
	}
	if !take(h.all) {
		<-s.c
		h.unref(s)
		return nil
	}
	return s
}

// tryAcquire takes a slot for a handshake from ip when one of its own
// and one of all are free at once, for a caller that cannot wait (QUIC's
// packet loop); nil when none is. release gives it back.
func (h *handshakeSlots) tryAcquire(ip netip.Addr) *ipSlots {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.ips[ip]
	if s == nil {
		s = &ipSlots{ip: ip, c: make(chan struct{}, h.perIP)}
	}
	select {
	case s.c <- struct{}{}:
	default:
		return nil
	}
	select {
	case h.all <- struct{}{}:
	default:
		<-s.c
		return nil
	}
	s.refs++
	h.ips[ip] = s
	return s
}

// release gives back the slot acquire or tryAcquire returned.
func (h *handshakeSlots) release(s *ipSlots) {
	<-h.all
	<-s.c
	h.unref(s)
}

func (h *handshakeSlots) unref(s *ipSlots) {
	h.mu.Lock()
	if s.refs--; s.refs == 0 {
		delete(h.ips, s.ip)
	}
	h.mu.Unlock()
}

// size returns how many handshakes the slots let run at once.
func (h *handshakeSlots) size() int { return cap(h.all) }
