package server

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/wire"
)

// setPipesLocked gives each tunnel engine its share of the splice pipes
// of b, at least one.
func (s *Server) setPipesLocked(b wire.Budget) {
	for _, e := range s.engines {
		e.SetMaxPipes(max(1, b.Pipes/len(s.engines)))
	}
}

// logBudget logs how the descriptors are shared, and warns when
// max_connections was lowered to what they hold.
func (s *Server) logBudget(b wire.Budget) {
	if b.Asked > 0 {
		s.log.Warn("max_connections lowered to what the open-file limit allows", "max_connections", b.Asked,
			"open_files", b.OpenFiles, "connections", b.Conns, "needs_open_files", config.OpenFilesFor(b.Asked))
	}
	s.log.Info("descriptor budget", "open_files", b.OpenFiles, "connections", b.Conns, "splice_pipes", b.Pipes,
		"splice_pipes_per_worker", max(1, b.Pipes/max(1, len(s.engines))))
}

// logGuard logs, once at start, which private ranges g's guard lets
// through.
func (s *Server) logGuard(g *generation) {
	allowed := "none"
	if a := g.Guard.Allowed(); len(a) > 0 {
		parts := make([]string, len(a))
		for i, p := range a {
			parts[i] = p.String()
		}
		allowed = strings.Join(parts, ",")
	}
	s.log.Info("private-destination guard on", "allowed_private", allowed, "acl_rules", len(g.Config.ACL.Rules))
}

// setOwnAddrs tells g's guard the bound addresses of its listeners.
func (s *Server) setOwnAddrs(g *generation) { g.Guard.SetOwn(s.ownAddrs(g.listeners)) }

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
	if l.Config.Protocol == "http" {
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
//
// A validated address (a QUIC client that proved it receives at its
// address, RFC 9000 §8.1) whose own slots are taken may still take one
// of all while at least half of them are free: the per-address share is
// there so that spoofed floods cannot take every slot, and a client that
// cannot wait for a slot as a TCP client does would otherwise be refused
// for opening many connections at once (a benchmark's 64, or clients
// behind one NAT address). Its connections stay bounded by the
// listener's connection limits.
func (h *handshakeSlots) tryAcquire(ip netip.Addr, validated bool) *ipSlots {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.ips[ip]
	if s == nil {
		s = &ipSlots{ip: ip, c: make(chan struct{}, h.perIP)}
	}
	own := true
	select {
	case s.c <- struct{}{}:
	default:
		if !validated || len(h.all) >= cap(h.all)/2 {
			return nil
		}
		// A share of one of its own, outside h.ips, for release.
		own = false
		s = &ipSlots{ip: ip, c: make(chan struct{}, 1)}
		s.c <- struct{}{}
	}
	select {
	case h.all <- struct{}{}:
	default:
		<-s.c
		return nil
	}
	s.refs++
	if own {
		h.ips[ip] = s
	}
	return s
}

// ownFree reports whether one of ip's own slots is free.
func (h *handshakeSlots) ownFree(ip netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.ips[ip]
	return s == nil || len(s.c) < cap(s.c)
}

// release gives back the slot acquire or tryAcquire returned.
func (h *handshakeSlots) release(s *ipSlots) {
	<-h.all
	<-s.c
	h.unref(s)
}

func (h *handshakeSlots) unref(s *ipSlots) {
	h.mu.Lock()
	if s.refs--; s.refs == 0 && h.ips[s.ip] == s {
		delete(h.ips, s.ip)
	}
	h.mu.Unlock()
}

// size returns how many handshakes the slots let run at once.
func (h *handshakeSlots) size() int { return cap(h.all) }
