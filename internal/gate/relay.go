package gate

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"
	"unsafe"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// TunnelOpened counts the tunnel the request opened (CONNECT, WebSocket,
// a SOCKS CONNECT or association) with the status already answered; its
// bytes are reported by Finish when it ends. A front-end that relays the
// tunnel itself (HTTP/2 streams) calls it; Tunnel calls it for the others.
func (g *Grant) TunnelOpened() {
	g.tunnel = true
	if !g.observe {
		return
	}
	m := g.s.p.Metrics
	m.TunnelOpened()
	m.Request(g.class, 0, 0)
}

// Tunnel relays client and upc until both directions end, and reports the
// tunnel with its bytes each way; it owns both connections from the call
// on. A paced user's tunnel is relayed by goroutines that wait on the
// user's bucket; a plain TCP client goes to the session's splice engine,
// and a TLS client made over tunnel.RecordConn to the same engine
// (Engine.AddTLS), where the tunnel carries the connection's admission and
// user count on after the serving goroutine returns; a TLS client the
// engine does not take (no engine, or it refused) is relayed with
// tunnel.RelayTLS, parked on socket readiness with no buffer while idle;
// anything else by the portable relay. The tunnel of a user with a byte
// quota is metered as it runs (by the engine after each splice, by the
// goroutine relays after each write; a TLS client's then goes to the
// goroutine relay rather than RelayTLS) and ends, with the reason quota,
// once the quota is spent. Tunnel reports whether the tunnel lives on in
// the engine (true: the serving goroutine must not close client) or has
// already ended (false).
//
// upc is what Dial or DialConn returned: a *net.TCPConn (to the
// destination, or a tunnel through a plain parent), which the engine and
// the TLS relay take, or an https parent's *tls.Conn, which only the
// paced and the portable relay do.
//
// beforeIdle, if not nil, is called before a relay that parks the client
// connection: the front-end gives back its read buffer there.
func (g *Grant) Tunnel(client net.Conn, upc net.Conn, beforeIdle func()) (handedOff bool) {
	s := g.s
	client.SetDeadline(time.Time{})
	upc.SetDeadline(time.Time{})
	g.TunnelOpened()
	ctx := s.rctx
	var meter tunnel.Meter // nil unless the user's bytes are metered
	if g.quota.LimitsBytes() {
		// The tunnel's own meter (it may outlive g's next request),
		// taking over what the request metered before it (a WebSocket
		// handshake's bytes).
		m := g.quota.Meter()
		m.Carry(g.meter.Charged())
		g.meter, meter = m, m
	}
	if b := g.throttle; b != nil {
		up, down := limits.RelayPaced(ctx, client, upc, b, s.p.TunnelIdle, meter)
		client.Close()
		upc.Close()
		g.Finish(up, down)
		return false
	}
	utc, upTCP := upc.(*net.TCPConn)
	if tc, ok := client.(*net.TCPConn); ok && upTCP && s.eng != nil {
		return g.toEngine(false, func(done func(tunnel.Result)) (func(), error) {
			return s.eng.AddMetered(tc, utc, meter, done)
		})
	}
	if tc, ok := client.(*tls.Conn); ok && upTCP && meter == nil {
		if raw, ok := tunnel.RawTCP(tc); ok {
			if beforeIdle != nil {
				beforeIdle()
			}
			if s.eng != nil && g.toEngine(true, func(done func(tunnel.Result)) (func(), error) {
				return s.eng.AddTLS(tc, raw, utc, done)
			}) {
				return true
			}
			up, down, _ := tunnel.RelayTLS(ctx, tc, raw, utc, s.p.TunnelIdle)
			client.Close()
			upc.Close()
			g.Finish(up, down)
			return false
		}
	}
	r := tunnel.RelayMetered(ctx, client, upc, s.p.TunnelIdle, meter)
	g.Finish(r.Up, r.Down)
	return false
}

// toEngine hands the tunnel to the session's engine with add (AddCut, or
// AddTLS if refusable), moving the grant's report, the connection's
// admission and its user count to the tunnel, and registers the tunnel
// for revocation. It reports false, having changed nothing, when a
// refusable add refused (AddTLS leaves the connections to the caller),
// and true otherwise: the tunnel is the engine's, or add failed having
// closed the connections, and the tunnel is reported now.
func (g *Grant) toEngine(refusable bool, add func(done func(tunnel.Result)) (cut func(), err error)) bool {
	s := g.s
	d := g.detach()
	took := s.handoff()
	lim := s.p.Limiter
	reg, listener, user := s.p.Revoked, s.p.Listener, d.account
	h := new(heldTunnel)
	cut, err := add(func(r tunnel.Result) {
		reg.removeTunnel(user, h.ended())
		if errors.Is(r.Err, tunnel.ErrCut) { // only revocation cuts
			d.reason = accesslog.ReasonRevoked
		} // the meter's stop is the reason quota (see Finish)
		d.Finish(r.Up, r.Down)
		took.back(lim)
	})
	if err != nil && refusable {
		took.undo(s)
		return false
	}
	g.finished = true // d reports and releases
	g.counted = ""
	g.hold, g.extraFor = holdNone, ""
	if err != nil {
		d.Finish(0, 0)
		took.back(lim)
		return true
	}
	if testHookAfterAdd != nil {
		testHookAfterAdd()
	}
	if reg != nil && user != "" {
		// The tunnel outlives its session: revoking its user cuts it.
		h.track(func() *tunnelEnd { return reg.addTunnel(listener, user, cut) })
		if s.revoked.Load() {
			// A revocation took the registry's lock after add and
			// before addTunnel: it ended the session, whose
			// connection the engine holds now, and could not see the
			// tunnel. One after addTunnel finds the tunnel itself.
			cut()
		}
	}
	return true
}

// testHookAfterAdd, when set by a test, runs in toEngine between the
// engine taking a tunnel and its registration for revocation.
var testHookAfterAdd func()

// bytesString views b as a string without copying; the string must not
// outlive b's contents.
func bytesString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// heldTunnel is an engine tunnel's entry in the registry, which may end
// (on the engine's goroutine) before the entry is made.
type heldTunnel struct {
	mu    sync.Mutex
	entry *tunnelEnd // guarded by mu
	done  bool       // the tunnel has ended; guarded by mu
}

// track makes the entry with add unless the tunnel has ended.
func (h *heldTunnel) track(add func() *tunnelEnd) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		h.entry = add()
	}
}

// ended marks the tunnel ended and returns its entry, nil when none was
// made.
func (h *heldTunnel) ended() *tunnelEnd {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = true
	return h.entry
}
