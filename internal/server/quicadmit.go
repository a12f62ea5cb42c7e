package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/rustle-proxy/rustle/internal/gate"
)

// quicHandshakes admits the new connections of one QUIC socket before
// their handshakes, as the TCP side admits a connection before its TLS
// handshake, and counts the handshakes in progress from addresses not
// yet validated (RFC 9000 §8.1).
//
// quic-go asks retry first, for a connection's first Initial that bears
// no valid token: past the listener's http3.retry_threshold of such
// handshakes in progress, past an eighth of it from that address, or
// once the address's share of limits.max_tls_handshakes is taken, the
// client is sent a Retry, which costs rustle no state, and comes
// back with a token that proves its address (a spoofed one cannot).
// Then admit: the listener's connection limits and the address's
// cool-down (gate.Policy.Admit), http3.max_connections, and a slot of
// limits.max_tls_handshakes, shared with the TCP side's TLS handshakes
// (an eighth per address; a validated address past it may take one of
// all while half are free). A connection refused there is sent
// CONNECTION_REFUSED and holds nothing. An admitted one holds its slot
// until its handshake completes or fails, and its admission until it
// closes.
//
// Both run on quic-go's packet loop: they never wait.
type quicHandshakes struct {
	log *slog.Logger

	mu          sync.Mutex
	unvalidated int                // handshakes in progress from unvalidated addresses; guarded by mu
	perIP       map[netip.Addr]int // those by address; guarded by mu
	retries     int                // Retries sent since the last warning; guarded by mu
	refused     map[string]int     // connections refused since the last warning, by reason; guarded by mu
	lastWarn    time.Time          // guarded by mu
}

// quicWarnEvery bounds the admission's warnings to one per interval.
const quicWarnEvery = 10 * time.Second

func (h *quicHandshakes) init(log *slog.Logger) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h.log = log
	h.perIP = make(map[netip.Addr]int)
	h.refused = make(map[string]int)
}

// retry reports whether a new connection from the unvalidated address a
// is to be sent a Retry first, as l's threshold says, or because the
// address's own handshake slots are taken: validated, it may take one
// of all (see [handshakeSlots.tryAcquire]) rather than be refused.
func (h *quicHandshakes) retry(l *listener, a net.Addr) bool {
	if l.QUICRetry < 0 {
		return true
	}
	ip := addrIP(a)
	ownFree := l.handshakes.ownFree(ip)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unvalidated < l.QUICRetry && h.perIP[ip] < max(1, l.QUICRetry/8) && ownFree {
		return false
	}
	h.retries++
	h.warnLocked()
	return true
}

// admit admits a new connection for l before its handshake, or refuses
// it with an error (quic-go then sends CONNECTION_REFUSED). The context
// it returns, which quic-go derives the connection's from, carries the
// connection's quicAttempt.
func (h *quicHandshakes) admit(ctx context.Context, l *listener, ci *quic.ClientInfo) (context.Context, error) {
	if l.H3 == nil {
		return nil, errors.New("server: http3 is off on this listener")
	}
	ip := addrIP(ci.RemoteAddr)
	if l.H3.Full() {
		return nil, h.refuse("too many QUIC connections on the listener")
	}
	if adm := l.Policy.Admit(ip); !adm.OK() {
		// The limiter warns of its own refusals.
		return nil, errors.New("server: QUIC connection refused: " + adm.Reason())
	}
	slot := l.handshakes.tryAcquire(ip, ci.AddrVerified)
	if slot == nil {
		l.Policy.Release(ip)
		return nil, h.refuse("too many TLS handshakes in progress")
	}
	a := &quicAttempt{h: h, ip: ip, policy: l.Policy, slots: l.handshakes, slot: slot, unvalidated: !ci.AddrVerified}
	if a.unvalidated {
		h.mu.Lock()
		h.unvalidated++
		h.perIP[ip]++
		h.mu.Unlock()
	}
	// quic-go cancels ctx when the handshake fails or the connection
	// closes; it bounds the handshake to twice HandshakeIdleTimeout,
	// after which a connection that neither failed nor reached Accept
	// is ended here.
	a.mu.Lock() // expire waits for both
	a.stopCtx = context.AfterFunc(ctx, a.expire)
	a.timer = time.AfterFunc(2*l.H3.QUICConfig().HandshakeIdleTimeout+time.Second, a.expire)
	a.mu.Unlock()
	return context.WithValue(ctx, attemptKey{}, a), nil
}

// refuse counts a refusal for the warning and returns its error.
func (h *quicHandshakes) refuse(reason string) error {
	h.mu.Lock()
	h.refused[reason]++
	h.warnLocked()
	h.mu.Unlock()
	return errors.New("server: QUIC connection refused before its handshake: " + reason)
}

// warnLocked logs the Retries and refusals counted, at most every
// quicWarnEvery.
func (h *quicHandshakes) warnLocked() {
	now := time.Now()
	if now.Sub(h.lastWarn) < quicWarnEvery {
		return
	}
	h.lastWarn = now
	if h.retries > 0 {
		h.log.Warn("QUIC address validation: Retry sent to new connections", "retries", h.retries,
			"unvalidated_handshakes", h.unvalidated)
		h.retries = 0
	}
	for reason, n := range h.refused {
		h.log.Warn("QUIC connections refused before the handshake", "reason", reason, "refused", n)
		delete(h.refused, reason)
	}
}

// inProgress returns the handshakes in progress from unvalidated
// addresses.
func (h *quicHandshakes) inProgress() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.unvalidated
}

// addrIP returns the IP address of a, a *net.UDPAddr, unmapped.
func addrIP(a net.Addr) netip.Addr {
	if ua, ok := a.(*net.UDPAddr); ok {
		return ua.AddrPort().Addr().Unmap()
	}
	return netip.Addr{}
}

// quicAttempt is an admitted QUIC connection during its handshake: its
// handshake slot, its place in the unvalidated count, and its admission,
// which handOff passes on to the connection's session.
type quicAttempt struct {
	h           *quicHandshakes
	ip          netip.Addr
	policy      *gate.Policy // what admitted the connection, and takes its admission back
	slots       *handshakeSlots
	slot        *ipSlots
	unvalidated bool

	mu      sync.Mutex
	stopCtx func() bool // stops expire at the context's end; set under mu
	timer   *time.Timer // expire at the handshake's bound; set under mu
	ended   bool        // the handshake's holdings given back; guarded by mu
}

type attemptKey struct{}

// attemptOf returns the quicAttempt of a connection admit admitted.
func attemptOf(c *quic.Conn) *quicAttempt {
	a, _ := c.Context().Value(attemptKey{}).(*quicAttempt)
	return a
}

// endLocked gives back the handshake's slot and unvalidated count.
func (a *quicAttempt) endLocked() {
	a.ended = true
	a.timer.Stop()
	a.slots.release(a.slot)
	if a.unvalidated {
		a.h.mu.Lock()
		a.h.unvalidated--
		if a.h.perIP[a.ip]--; a.h.perIP[a.ip] <= 0 {
			delete(a.h.perIP, a.ip)
		}
		a.h.mu.Unlock()
	}
}

// handOff ends the handshake of a connection that completed it and
// passes its admission to the caller, which releases it; false when the
// attempt had ended already (its admission released).
func (a *quicAttempt) handOff() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended {
		return false
	}
	a.endLocked()
	a.stopCtx()
	return true
}

// expire ends an attempt whose connection failed or closed before
// handOff, or outlived the handshake's bound: its admission too.
func (a *quicAttempt) expire() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended {
		return
	}
	a.endLocked()
	a.policy.Release(a.ip)
}
