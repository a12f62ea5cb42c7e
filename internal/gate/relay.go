package gate

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"time"
	"unsafe"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/quota"
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
	m.Request(int(g.class), 0, 0)
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
		return g.toEngine(false, func(o tunnel.Owner) (tunnel.Handle, error) {
			return s.eng.AddOwned(tc, utc, meter, o)
		})
	}
	if tc, ok := client.(*tls.Conn); ok && upTCP && meter == nil {
		if raw, ok := tunnel.RawTCP(tc); ok {
			if beforeIdle != nil {
				beforeIdle()
			}
			if s.eng != nil && g.toEngine(true, func(o tunnel.Owner) (tunnel.Handle, error) {
				return s.eng.AddTLSOwned(tc, raw, utc, o)
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

// toEngine hands the tunnel to the session's engine with add (AddOwned,
// or AddTLSOwned if refusable), moving the grant's report, the connection's
// admission and its user count to the tunnel, and registers the tunnel
// for revocation. It reports false, having changed nothing, when a
// refusable add refused (AddTLS leaves the connections to the caller),
// and true otherwise: the tunnel is the engine's, or add failed having
// closed the connections, and the tunnel is reported now.
func (g *Grant) toEngine(refusable bool, add func(tunnel.Owner) (tunnel.Handle, error)) bool {
	s := g.s
	took := s.handoff()
	t := g.handOver(took)
	h, err := add(t)
	if err != nil && refusable {
		took.undo(s)
		return false
	}
	g.finished = true // t reports and releases
	g.ownDial = nil   // t.more.give has it
	g.counted = ""
	g.hold = holdNone
	if err != nil {
		t.end(0, 0, "")
		return true
	}
	if testHookAfterAdd != nil {
		testHookAfterAdd()
	}
	if reg := s.p.Revoked; reg != nil && t.account != "" {
		// The tunnel outlives its session: revoking its user cuts it.
		t.handle = h
		reg.addTunnel(t)
		if s.revoked.Load() {
			// A revocation took the registry's lock after add and
			// before addTunnel: it ended the session, whose
			// connection the engine holds now, and could not see the
			// tunnel. One after addTunnel finds the tunnel itself.
			h.Cut()
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

// engineTunnel is what a tunnel handed to the engine keeps of its grant
// and session until it ends: what its end gives back, counts and
// reports, and the cut that revokes it. The serving goroutine has
// returned and the session has ended by then: an idle tunnel holds this
// (80 bytes, and what tunnelMore holds when it applies), the engine's own
// state (128 bytes; the engine makes no callback or cut function for it)
// and nothing else, not the grant, the session or their contexts.
type engineTunnel struct {
	p       *Policy
	account string        // what the registry, the user metrics and the user count count
	release func()        // gives back the connection's admission; nil = none
	handle  tunnel.Handle // cuts the tunnel on the engine; set before it is tracked
	// prev and next link the tunnels of account in the registry (see
	// held); guarded by the registry's lock.
	prev, next *engineTunnel
	more       *tunnelMore // nil when none of it applies
	flags      tunnelFlags // set before the engine has the tunnel
	state      tunnelState // guarded by the registry's lock
}

// tunnelFlags are an engineTunnel's yes-or-no facts.
type tunnelFlags uint8

const (
	// flagCount: the tunnel's bytes go to the metrics (an observed
	// grant that answered).
	flagCount tunnelFlags = 1 << iota
	// flagReport: its end is reported (flagCount, or an observed grant
	// that answered nothing).
	flagReport
	// flagUserCounted: the connection's user count, moved to the tunnel
	// (handed.user), is account's.
	flagUserCounted
)

// tunnelState is where an engineTunnel is with the registry.
type tunnelState uint8

const (
	stateEnded   tunnelState = 1 << iota // the tunnel has ended
	stateTracked                         // the registry holds the tunnel
)

// tunnelMore is what a tunnel keeps only when it applies: an
// authenticated user's tunnel without access log, quota or a second
// user of its connection has none of it.
type tunnelMore struct {
	give *tunnelGive // nil when none of it applies
	// rec is what the access log's record is made of when the tunnel
	// ends (bytes, duration and reason filled in then), kept when
	// there is an access log or debug logging to write it to; nil
	// otherwise.
	rec *tunnelRecord
}

// tunnelGive is what a tunnel gives back and counts at its end besides
// what engineTunnel holds, when any of it applies.
type tunnelGive struct {
	// user is the connection's user count moved to the tunnel, when
	// not account's (see flagUserCounted).
	user string
	// What Grant.end gives back: a user counted for the grant, a
	// further upstream counted with the Limiter (extraFor, when extra).
	counted  string
	extraFor string
	extra    bool
	quota    *quota.User  // the account's quota counters; nil = none
	meter    *quota.Meter // what the tunnel's bytes were metered by; nil = none
	added    [2]int64     // Grant.added
	// ownDial is a transparent tunnel's upstream, forgotten by ownDials
	// when the tunnel ends (Grant.ownDial); nil = none.
	ownDial *addrPair
}

// handOver makes the engineTunnel that carries g and took on. g's own
// buffers stay with the front-end: the record owns copies.
func (g *Grant) handOver(took handed) *engineTunnel {
	p := g.s.p
	t := &engineTunnel{p: p, account: g.account, release: took.release}
	if g.observe && g.class > 0 {
		t.flags |= flagCount | flagReport
	} else if g.observe && g.class == classUnanswered {
		t.flags |= flagReport
	}
	var gv tunnelGive
	switch took.user {
	case "":
	case g.account:
		t.flags |= flagUserCounted
	default:
		gv.user = took.user
	}
	gv.counted = g.counted
	if g.hold == holdExtra {
		// extraFor names the account whether or not an extra upstream
		// is held: kept only when one is, so that an authenticated
		// tunnel holding nothing more keeps no tunnelGive (96 bytes).
		gv.extra, gv.extraFor = true, g.extraFor()
	}
	gv.quota, gv.meter, gv.added = g.quota, g.meter, g.added
	gv.ownDial = g.ownDial
	var give *tunnelGive
	if gv != (tunnelGive{}) {
		give = new(tunnelGive)
		*give = gv // gv itself stays on the stack
	}
	if (t.flags&flagReport != 0 && p.AccessLog != nil) || p.logger().Enabled(context.Background(), slog.LevelDebug) {
		// One allocation (160 bytes) for the record and what points
		// to it.
		both := new(struct {
			more tunnelMore
			rec  tunnelRecord
		})
		g.tunnelRecord(&both.rec, t.account)
		both.more = tunnelMore{give: give, rec: &both.rec}
		t.more = &both.more
	} else if give != nil {
		t.more = &tunnelMore{give: give}
	}
	return t
}

// TunnelDone is told by the engine that the tunnel has ended with r.
func (t *engineTunnel) TunnelDone(r tunnel.Result) {
	if t.account != "" {
		t.p.Revoked.removeTunnel(t)
	}
	reason := ""
	if errors.Is(r.Err, tunnel.ErrCut) { // only revocation cuts
		reason = accesslog.ReasonRevoked
	}
	t.end(r.Up, r.Down, reason)
}

// end reports the tunnel, which moved up and down bytes and ended for
// reason ("" none, or quota as the meter says), and gives back what it
// held, as Grant.Finish does for a request.
func (t *engineTunnel) end(up, down int64, reason string) {
	p, m := t.p, t.more
	if m == nil {
		m = &tunnelMore{} // not kept: its zero values
	}
	gv := m.give
	if gv == nil {
		gv = &tunnelGive{} // not kept: its zero values
	}
	forgetOwnDial(gv.ownDial)
	up += gv.added[0]
	down += gv.added[1]
	if gv.quota != nil {
		// What the meter counted as the bytes moved is counted already.
		gv.quota.AddBytes(up + down - gv.meter.Charged())
	}
	var rec *accesslog.Record
	if m.rec != nil {
		r := m.rec.record(t)
		rec = &r
		if rec.Reason == "" {
			rec.Reason = reason
		}
		if rec.Reason == "" && gv.meter.Stopped() {
			rec.Reason = accesslog.ReasonQuota
		}
		if rec.Reason != "" {
			p.debugRefusal(rec, nil)
		} else if cut := p.Cut; cut != nil && cut.Err() != nil {
			rec.Reason = accesslog.ReasonDrained
		}
	}
	if t.flags&flagCount != 0 {
		p.Metrics.Bytes(up, down)
		if p.UserMetrics != nil && t.account != "" {
			p.UserMetrics(t.account).Request(up, down)
		}
	}
	if rec != nil && t.flags&flagReport != 0 && p.AccessLog != nil {
		rec.BytesUp, rec.BytesDown = up, down
		rec.Duration = time.Since(rec.Time)
		p.AccessLog.Log(rec)
	}
	lim := p.Limiter
	if gv.extra {
		lim.ExtraDone(gv.extraFor)
	}
	if gv.counted != "" {
		lim.UserDone(gv.counted)
	}
	user := gv.user
	if t.flags&flagUserCounted != 0 {
		user = t.account
	}
	handed{release: t.release, user: user}.back(lim)
}
