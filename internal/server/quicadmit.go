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
// CONNECTION_REFUSED and holds nothing. A connection from a validated
// address that finds no slot free is admitted all the same and waits
// for one, as a TCP client does, before its handshake goes past the
// ClientHello (awaitSlot); an unvalidated one is refused. An admitted
// one holds its slot until its handshake completes or fails, and its
// admission until it closes.
//
// retry and admit run on quic-go's packet loop: they never wait.
// awaitSlot runs on the connection's own goroutine.
type quicHandshakes struct {
	log *slog.Logger

	mu          sync.Mutex
	unvalidated int                // handshakes in progress from unvalidated addresses; guarded by mu
	perIP       map[netip.Addr]int // those by address; guarded by mu
	retries     int                // Retries sent since the last warning; guarded by mu
	refused     map[string]int     // connections refused since the last warning, by reason; guarded by mu
	lastWarn    time.Time          // guarded by mu
	flush       *time.Timer        // logs what was counted after the last warning at the interval's end; guarded by mu
	stopped     bool               // stop ran: no flush is armed any more; guarded by mu
	flushes     sync.WaitGroup     // the flush running, which stop waits for

	waits     context.Context    // ends the waits for a slot (awaitSlot) when stop runs
	stopWaits context.CancelFunc // ends waits
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
	h.waits, h.stopWaits = context.WithCancel(context.Background())
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
	if slot == nil && !ci.AddrVerified {
		l.Policy.Release(ip)
		return nil, h.refuse("too many TLS handshakes in progress")
	}
	// A validated address with no slot free waits for one in awaitSlot.
	a := &quicAttempt{h: h, ip: ip, policy: l.Policy, slots: l.handshakes, slot: slot, unvalidated: !ci.AddrVerified,
		wait: l.H3.QUICConfig().HandshakeIdleTimeout}
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

// awaitSlot waits, on the goroutine of a connection's handshake when its
// ClientHello has come (ctx is the connection's), for the handshake slot
// that admit found taken, at most the handshake's idle timeout, as a TCP
// client waits for one (handshakeSlots.acquire). It returns at once for
// a connection that holds its slot, and an error, which fails the
// handshake, when no slot came in time, the connection ended or the
// socket closed.
func (h *quicHandshakes) awaitSlot(ctx context.Context) error {
	a, _ := ctx.Value(attemptKey{}).(*quicAttempt)
	if a == nil {
		return nil
	}
	a.mu.Lock()
	held := a.slot != nil
	a.mu.Unlock()
	if held {
		return nil
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(h.waits, cancel)
	defer stop()
	slot := a.slots.acquire(ctx, a.ip, a.wait)
	if slot == nil {
		return h.refuse("no TLS handshake slot free within the handshake timeout")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ended {
		a.slots.release(slot)
		return errors.New("server: QUIC handshake ended while it waited for a slot")
	}
	a.slot = slot
	return nil
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
// quicWarnEvery; what it counts within an interval is logged when the
// interval ends (flushed), or by stop.
func (h *quicHandshakes) warnLocked() {
	now := time.Now()
	if wait := quicWarnEvery - now.Sub(h.lastWarn); wait > 0 {
		if h.flush == nil && !h.stopped {
			h.flushes.Add(1)
			h.flush = time.AfterFunc(wait, h.flushed)
		}
		return
	}
	h.lastWarn = now
	h.logLocked()
}

// flushed logs, at the end of an interval, what was counted after its
// warning.
func (h *quicHandshakes) flushed() {
	defer h.flushes.Done()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.flush = nil
	if h.stopped {
		return // stop logs it
	}
	h.lastWarn = time.Now()
	h.logLocked()
}

// stop logs what was counted since the last warning, and stops the
// flush; the socket's connections are gone. It is idempotent.
func (h *quicHandshakes) stop() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.stopped = true
	h.stopWaits()
	if h.flush != nil && h.flush.Stop() {
		h.flushes.Done() // it will not run
	}
	h.flush = nil
	h.logLocked()
	h.mu.Unlock()
	h.flushes.Wait()
}

// logLocked logs the Retries and refusals counted and resets the counts.
func (h *quicHandshakes) logLocked() {
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
	unvalidated bool
	wait        time.Duration // how long awaitSlot waits for a slot

	mu      sync.Mutex
	slot    *ipSlots    // the handshake's slot; nil while awaitSlot waits for one; guarded by mu
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
	if a.slot != nil {
		a.slots.release(a.slot)
	}
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
