package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/internal/dialer"
)

// DialUDP makes the UDP socket of a granted CONNECT-UDP flow to the
// request's destination (Request.Host or Request.Addr, and Request.Port,
// as Authorize was given them), under the request's decision and the
// private-destination guard as Dial, and feeds the dial histogram. On an
// error, DialKind tells how to answer it.
func (g *Grant) DialUDP(ctx context.Context) (*net.UDPConn, error) {
	p := g.s.p
	t0 := time.Now()
	host := g.dst.host
	if host == "" && g.dst.addr.IsValid() {
		host = g.dst.addr.String()
	}
	c, err := p.Dialer.DialUDP(ctx, host, g.dst.port, g.permitter())
	p.Metrics.Dialed(time.Since(t0), err == nil)
	if g.decided {
		g.Rule = g.decision.Rule
	}
	if err != nil {
		if g.refuse(DialKind(err)) == Forbidden {
			p.Metrics.ACLDenied()
			attrs := []slog.Attr{slog.String("user", g.User), slog.String("target", host),
				slog.String("rule", g.Rule), slog.Any("err", err)}
			if errors.Is(err, dialer.ErrPrivate) {
				attrs = append(attrs, slog.String("hint", privateHint))
			}
			g.s.debug("gate: destination refused", attrs...)
		}
		return nil, err
	}
	if a, ok := c.RemoteAddr().(*net.UDPAddr); ok {
		ap := a.AddrPort()
		g.upstream = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return c, nil
}

// FlowSender is the client's side of a CONNECT-UDP flow as StartFlow
// sends to it: UDP payloads out, framing (context IDs, capsules, QUIC
// DATAGRAM frames) left to the front-end.
type FlowSender interface {
	// SendPayload sends one UDP payload to the client; it may drop it
	// (datagrams are unreliable). An error ends the flow.
	SendPayload(p []byte) error
	// Close ends the flow on the client's side; it makes a pending
	// ReceivePayload return.
	Close() error
	// MaxPayload is the largest UDP payload the flow can carry to the
	// client (at most 65527); a larger datagram from the target is
	// dropped. It bounds the flow's read buffer.
	MaxPayload() int
}

// Flow is the client's side of a CONNECT-UDP flow as RelayFlow carries
// it: a FlowSender that also gives the client's payloads when asked.
type Flow interface {
	FlowSender
	// ReceivePayload waits for the client's next UDP payload; the slice
	// is valid until the next call. An error ends the flow.
	ReceivePayload(ctx context.Context) ([]byte, error)
}

// FlowResult is what RelayFlow relayed: payload bytes and datagrams each
// way (up: from the client to the target), and datagrams dropped because
// the guard refused their destination.
type FlowResult struct {
	Up, Down      int64
	DatagramsUp   int64
	DatagramsDown int64
	Refused       int64
	Err           error
	Duration      time.Duration
}

// maxUDPPayload is the largest UDP payload a flow reads from its target.
const maxUDPPayload = 65527

// RelayFlow relays a granted CONNECT-UDP flow between the client and upc,
// the socket DialUDP made, until either side fails, ctx is done, the
// session is revoked, or no datagram passes either way for idle (0 = no
// limit): StartFlow, with the client's payloads taken by
// client.ReceivePayload and handed to FlowRelay.Up, then FlowRelay.Wait.
// It owns upc and closes client and upc.
func (g *Grant) RelayFlow(ctx context.Context, client Flow, upc *net.UDPConn, idle time.Duration) FlowResult {
	r := g.startFlow(ctx, client, upc, idle, nil, true)
	for {
		p, err := client.ReceivePayload(r.own.ctx)
		if err != nil {
			r.End(fmt.Errorf("gate: flow: receive from the client: %w", err))
			break
		}
		if !r.Up(p) {
			break
		}
	}
	return r.Wait()
}

// FlowRelay is a granted CONNECT-UDP flow being relayed (see StartFlow).
type FlowRelay struct {
	g       *Grant
	upc     *net.UDPConn // the target's socket; nil once a FlowPoller holds its descriptor alone (see sock)
	sock    rawSocket    // the target's socket's descriptor, when upc is nil
	client  FlowSender
	stopCtx func() bool // stops ctx's hook on the flow
	dst     netip.AddrPort
	start   time.Duration // monoNow when the flow started: 8 bytes where a time.Time is 24
	last    atomic.Int64  // since start, when a datagram last passed
	idle    time.Duration
	ended   atomic.Bool // End was called
	once    sync.Once
	err     error // why the flow ended; set once, read after Wait's join

	// own is what a flow outside a group, one that something waits on
	// (a paced user's bucket, RelayFlow's reads) or one that no poller
	// reads has of its own; nil for an unpaced flow of a group that a
	// FlowPoller reads, whose group's timer and hook serve it.
	own *ownFlow

	group      *FlowGroup // the flows of the client's connection; nil: none
	prev, next *FlowRelay // in group's list; guarded by group.mu

	poller *FlowPoller // the poller relaying the target's datagrams; nil: the relay's goroutine (own.down)

	// The client's side, counted by Up (from any goroutine).
	up, datagramsUp, refused atomic.Int64
	// The target's side, counted by the down goroutine; read after it
	// has ended.
	bytesDown, datagramsDown int64
}

// ownFlow is what a FlowRelay has of its own when it is not an unpaced
// flow of a group that a FlowPoller reads.
type ownFlow struct {
	down sync.WaitGroup // the goroutine relaying the target's datagrams, when no poller does
	// ctx is done once the flow has ended; nil when nothing waits on it.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// Outside a group: the flow's hook on the session's revocation and
	// its idle timer (nil without one).
	stop  func() bool
	timer *time.Timer
}

// StartFlow starts relaying a granted CONNECT-UDP flow between the client
// and upc, the socket DialUDP made: the target's datagrams go to the
// client from a goroutine of the relay's own, and the front-end hands
// the relay each of the client's payloads with Up, until End, until
// either side fails, ctx is done, the session is revoked, or no datagram
// passes either way for idle (0 = no limit); Wait then waits for the
// relay's goroutine and reports the flow. Every datagram towards the
// target is checked again against the request's rule and the current
// private-destination guard (a reload may have tightened it) and dropped
// when refused. Every datagram either way goes through PaceDatagram: a
// paced user's datagrams wait on the user's bucket, and a user's byte
// quota is metered as they move (a batch at a time): the flow ends once
// the quota is spent, with the reason quota. It reports the flow as a
// tunnel (TunnelOpened, with the status already answered), and Wait
// calls Finish with the payload bytes each way; the datagrams are
// counted in the metrics as they pass. The relay owns upc and closes
// client and upc when the flow ends. With a group (nil: none), the flow
// is one of the group's: the group's one timer ends it once idle and its
// one hook on the session's revocation ends it with the session, and an
// unpaced flow's target datagrams are read and sent to the client by the
// group's FlowPoller, where there is one, instead of a goroutine of the
// relay's own. The group must be of g's session.
func (g *Grant) StartFlow(ctx context.Context, client FlowSender, upc *net.UDPConn, idle time.Duration, group *FlowGroup) *FlowRelay {
	return g.startFlow(ctx, client, upc, idle, group, false)
}

// startFlow is StartFlow; withCtx gives the relay a context of its own
// even when nothing in it waits on one (RelayFlow's reads do).
func (g *Grant) startFlow(ctx context.Context, client FlowSender, upc *net.UDPConn, idle time.Duration, group *FlowGroup, withCtx bool) *FlowRelay {
	g.TunnelOpened()
	if g.meter == nil {
		g.Meter() // a user with a byte quota: metered as the datagrams move
	}
	s := g.s
	r := &FlowRelay{g: g, upc: upc, client: client, dst: g.upstream, start: monoNow(), idle: idle, sock: rawSocket{fd: -1}}
	var poller *FlowPoller
	if group != nil && g.throttle == nil {
		poller = group.poller
	}
	// The poller first: it may take upc's descriptor, and nothing may
	// end the flow (close upc) meanwhile.
	if poller != nil && poller.add(r, min(client.MaxPayload(), maxUDPPayload)) == nil {
		r.poller = poller
	}
	if withCtx || g.throttle != nil || group == nil {
		// ctx and the session end the flow through End, which cancels
		// ctx: it needs no link of its own to ctx (each link is an entry
		// in a parent's children, and a hook on it would be a map of its
		// own for every flow).
		r.own = new(ownFlow)
		r.own.ctx, r.own.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	}
	r.stopCtx = context.AfterFunc(ctx, func() { r.End(context.Cause(ctx)) })
	if group == nil || !group.add(r) {
		if r.own == nil {
			r.own = new(ownFlow)
		}
		r.own.stop = context.AfterFunc(s.rctx, func() { r.End(context.Cause(s.rctx)) })
		if idle > 0 {
			r.own.timer = time.AfterFunc(idle, r.idleCheck)
		}
	}
	if r.poller == nil {
		if r.own == nil {
			r.own = new(ownFlow)
		}
		r.own.down.Go(r.relayDown)
	}
	return r
}

// since returns the time since the flow started.
func (r *FlowRelay) since() time.Duration { return monoNow() - r.start }

// quiet returns how long no datagram has passed.
func (r *FlowRelay) quiet() time.Duration {
	return r.since() - time.Duration(r.last.Load())
}

// idleCheck ends the flow once no datagram passed for its idle timeout,
// or sets the timer again for the rest of it.
func (r *FlowRelay) idleCheck() {
	if r.ended.Load() {
		return
	}
	quiet := r.quiet()
	if quiet >= r.idle {
		r.End(errFlowIdle)
		return
	}
	r.own.timer.Reset(r.idle - quiet)
}

// End ends the flow with err (the first call's): it closes the target's
// socket and the client's side, which ends the relay's goroutine and the
// front-end's reads. It is safe to call more than once, from any
// goroutine.
func (r *FlowRelay) End(err error) {
	r.once.Do(func() {
		r.err = err
		r.ended.Store(true)
		if r.own != nil && r.own.cancel != nil {
			r.own.cancel(err)
		}
		if r.upc != nil {
			r.upc.Close()
		} else {
			r.sock.close()
		}
		r.client.Close()
	})
}

// relayDown sends the target's datagrams to the client until the flow
// ends. While it waits for one it holds no read buffer (on Unix: see
// datagramReader).
func (r *FlowRelay) relayDown() {
	max := min(r.client.MaxPayload(), maxUDPPayload)
	dr, err := newDatagramReader(r.upc, max)
	if err != nil {
		r.End(fmt.Errorf("gate: flow: read from %s: %w", r.dst, err))
		return
	}
	for {
		bp, n, err := dr.read()
		if errors.Is(err, syscall.ECONNREFUSED) {
			continue // an ICMP error of an earlier datagram: UDP is unreliable
		}
		if err != nil {
			r.End(fmt.Errorf("gate: flow: read from %s: %w", r.dst, err))
			return
		}
		ok := r.down1((*bp)[:n], n, max)
		dr.put(bp)
		if !ok {
			return
		}
	}
}

// down1 sends one of the target's datagrams, n bytes read into b (a
// prefix of it when n is more than max, the largest the client's side
// carries: such a datagram is dropped), to the client: paced, metered,
// counted. It reports false once the flow has ended (the quota spent, or
// the send failed). One goroutine at a time calls it: the relay's own or
// the FlowPoller's.
func (r *FlowRelay) down1(b []byte, n, max int) bool {
	if n > max {
		return true // too large for the client's side
	}
	if !r.pace(n) {
		r.End(errFlowQuota)
		return false
	}
	if err := r.client.SendPayload(b); err != nil {
		r.End(fmt.Errorf("gate: flow: send to the client: %w", err))
		return false
	}
	r.bytesDown += int64(n)
	r.datagramsDown++
	r.g.s.p.Metrics.Datagrams(0, 1, 0)
	r.last.Store(int64(r.since()))
	return true
}

// Up sends one of the client's payloads to the target: dropped when the
// guard refuses its destination or the target's socket reports an ICMP
// error of an earlier one, paced (a paced user's wait), metered. It
// reports false once the flow has ended (the quota spent, a write that
// failed, or ended before): no more payloads are to be handed to it. Up
// may be called from any goroutine, one call at a time, until Wait.
func (r *FlowRelay) Up(p []byte) bool {
	if r.ended.Load() {
		return false
	}
	g := r.g
	s := g.s
	m := s.p.Metrics
	if err := s.p.Dialer.Check(r.dst, g.permitter()); err != nil {
		r.refused.Add(1)
		m.Datagrams(0, 0, 1)
		return true
	}
	if !r.pace(len(p)) {
		r.End(errFlowQuota)
		return false
	}
	var n int
	var err error
	if r.upc != nil {
		n, err = r.upc.Write(p)
	} else {
		n, err = r.sock.write(p, &r.ended)
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true // an ICMP error of an earlier datagram: UDP is unreliable
	}
	if err != nil {
		r.End(fmt.Errorf("gate: flow: write to %s: %w", r.dst, err))
		return false
	}
	r.up.Add(int64(n))
	r.datagramsUp.Add(1)
	m.Datagrams(1, 0, 0)
	r.last.Store(int64(r.since()))
	return true
}

// pace is PaceDatagram for n bytes of the flow: a paced flow waits on
// the user's bucket until the flow ends.
func (r *FlowRelay) pace(n int) bool {
	var ctx context.Context
	if r.own != nil {
		ctx = r.own.ctx
	}
	if ctx == nil {
		ctx = context.Background() // not paced: PaceDatagram does not wait
	}
	return r.g.PaceDatagram(ctx, n)
}

// Wait ends the flow if nothing has (End, or the relay), waits for its
// goroutine to return, calls Finish with the payload bytes each way and
// returns what the flow relayed. The front-end calls it once, after its
// last Up and once the flow has ended.
func (r *FlowRelay) Wait() FlowResult {
	r.End(errFlowClosed)
	if r.own != nil {
		r.own.down.Wait()
	}
	if r.poller != nil {
		r.poller.remove(r)
	}
	if r.group != nil {
		r.group.remove(r)
	} else {
		r.own.stop()
		if r.own.timer != nil {
			r.own.timer.Stop()
		}
	}
	r.stopCtx()
	res := FlowResult{
		Up: r.up.Load(), Down: r.bytesDown,
		DatagramsUp: r.datagramsUp.Load(), DatagramsDown: r.datagramsDown,
		Refused: r.refused.Load(), Err: r.err, Duration: r.since(),
	}
	r.g.Finish(res.Up, res.Down)
	return res
}

// errFlowQuota ends a flow whose user's byte quota is spent.
var errFlowQuota = errors.New("gate: flow ended: the user's byte quota is spent")

// errFlowClosed ends a flow that the front-end waits for without having
// ended it.
var errFlowClosed = errors.New("gate: flow closed")

// errFlowIdle ends a flow that passed no datagram for its idle timeout.
var errFlowIdle = errors.New("gate: flow idle timeout")

// ErrFlowIdle reports whether err is a flow's end by its idle timeout.
func ErrFlowIdle(err error) bool { return errors.Is(err, errFlowIdle) }
