package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
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

// Flow is the client's side of a CONNECT-UDP flow as a front-end carries
// it: UDP payloads in and out, framing (context IDs, capsules, QUIC
// DATAGRAM frames) left to the front-end.
type Flow interface {
	// ReceivePayload waits for the client's next UDP payload; the slice
	// is valid until the next call. An error ends the flow.
	ReceivePayload(ctx context.Context) ([]byte, error)
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
// limit). Every datagram towards the target is checked again against the
// request's rule and the current private-destination guard (a reload may
// have tightened it) and dropped when refused. Every datagram either way
// goes through PaceDatagram: a paced user's datagrams wait on the user's
// bucket, and a user's byte quota is metered as they move (a batch at a
// time): the flow ends once the quota is spent, with the reason quota. It
// reports the flow as a tunnel (TunnelOpened, with the status already
// answered) and calls Finish with the payload bytes each way; it counts
// the datagrams in the metrics as they pass. It owns upc and closes
// client and upc.
func (g *Grant) RelayFlow(ctx context.Context, client Flow, upc *net.UDPConn, idle time.Duration) FlowResult {
	g.TunnelOpened()
	if g.meter == nil {
		g.Meter() // a user with a byte quota: metered as the datagrams move
	}
	s := g.s
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(s.rctx, func() { cancel(context.Cause(s.rctx)) })
	start := time.Now()
	var last atomic.Int64 // since start, when a datagram last passed
	var res FlowResult
	dst := g.upstream
	m := s.p.Metrics // nil: no metrics
	var once sync.Once
	end := func(err error) {
		once.Do(func() {
			res.Err = err
			cancel(err)
			upc.Close()
			client.Close()
		})
	}
	var timerMu sync.Mutex
	var timer *time.Timer // guarded by timerMu
	if idle > 0 {
		timerMu.Lock()
		timer = time.AfterFunc(math.MaxInt64, func() {
			quiet := time.Since(start) - time.Duration(last.Load())
			if quiet >= idle {
				end(errFlowIdle)
				return
			}
			timerMu.Lock()
			timer.Reset(idle - quiet)
			timerMu.Unlock()
		})
		timer.Reset(idle)
		timerMu.Unlock()
	}
	context.AfterFunc(ctx, func() { end(context.Cause(ctx)) })

	var wg sync.WaitGroup
	wg.Go(func() { // target to client
		max := min(client.MaxPayload(), maxUDPPayload)
		buf := make([]byte, max+1) // one more: a longer datagram is told apart, and dropped
		for {
			n, err := upc.Read(buf)
			if errors.Is(err, syscall.ECONNREFUSED) {
				continue // an ICMP error of an earlier datagram: UDP is unreliable
			}
			if err != nil {
				end(fmt.Errorf("gate: flow: read from %s: %w", dst, err))
				return
			}
			if n > max {
				continue // too large for the client's side
			}
			if !g.PaceDatagram(ctx, n) {
				end(errFlowQuota)
				return
			}
			if err := client.SendPayload(buf[:n]); err != nil {
				end(fmt.Errorf("gate: flow: send to the client: %w", err))
				return
			}
			res.Down += int64(n)
			res.DatagramsDown++
			m.Datagrams(0, 1, 0)
			last.Store(int64(time.Since(start)))
		}
	})
	for {
		p, err := client.ReceivePayload(ctx)
		if err != nil {
			end(fmt.Errorf("gate: flow: receive from the client: %w", err))
			break
		}
		if err := s.p.Dialer.Check(dst, g.permitter()); err != nil {
			res.Refused++
			m.Datagrams(0, 0, 1)
			continue
		}
		if !g.PaceDatagram(ctx, len(p)) {
			end(errFlowQuota)
			break
		}
		n, err := upc.Write(p)
		if errors.Is(err, syscall.ECONNREFUSED) {
			continue // an ICMP error of an earlier datagram: UDP is unreliable
		}
		if err != nil {
			end(fmt.Errorf("gate: flow: write to %s: %w", dst, err))
			break
		}
		res.Up += int64(n)
		res.DatagramsUp++
		m.Datagrams(1, 0, 0)
		last.Store(int64(time.Since(start)))
	}
	wg.Wait()
	stop()
	if idle > 0 {
		timerMu.Lock()
		timer.Stop()
		timerMu.Unlock()
	}
	res.Duration = time.Since(start)
	g.Finish(res.Up, res.Down)
	return res
}

// errFlowQuota ends a flow whose user's byte quota is spent.
var errFlowQuota = errors.New("gate: flow ended: the user's byte quota is spent")

// errFlowIdle ends a flow that passed no datagram for its idle timeout.
var errFlowIdle = errors.New("gate: flow idle timeout")

// ErrFlowIdle reports whether err is a flow's end by its idle timeout.
func ErrFlowIdle(err error) bool { return errors.Is(err, errFlowIdle) }
