package h3

import (
	"errors"
	"io"
	"sync"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/masque"
)

// maxCapsule bounds a DATAGRAM capsule rustle reads whole from a
// CONNECT-UDP stream: a UDP payload and its context ID.
const maxCapsule = 65535 + 8

// connectUDP serves a CONNECT-UDP request (RFC 9298): it dials the
// target's UDP socket under the grant, answers 200 with
// Capsule-Protocol, and returns the flow (nil for a request it refused)
// for a goroutine of its own (started by reqStream.end once serve has
// returned), which reads the stream's capsules (their end is the flow's) and ends the
// stream's service when the flow has ended. The flow is one of the
// connection's gate.FlowGroup, whose one timer ends it once idle: the
// target's datagrams go from the group's flow poller (gate.FlowPoller;
// on a system without one, or for a paced user, from the relay's
// goroutine), the client's as the connection's datagram receiver hands
// them over. The
// serving goroutine, whose stack grew with the request, returns: the
// flow's goroutine starts small and stays so while it parks.
func (rs *reqStream) connectUDP(q *request) *flow {
	c := rs.c
	s := c.s
	g := &rs.g
	ctx := rs.stream().Context()
	if !c.waitSettings(ctx) {
		return nil
	}
	if !c.peerDatagrams {
		g.SetReason(accesslog.ReasonProtocol)
		rs.answer(400, "CONNECT-UDP needs HTTP Datagrams: the client did not enable SETTINGS_H3_DATAGRAM", nil)
		return nil
	}
	if !s.takeFlow(c) {
		g.SetReason(accesslog.ReasonOverloaded)
		rs.answer(503, "too many UDP flows", nil)
		return nil
	}
	up, err := g.DialUDP(ctx)
	if err != nil {
		s.giveFlow(c)
		rs.answerFailure(err, nil, q.host)
		return nil
	}
	g.Answer(200, 0)
	f := &flow{rs: rs, id: rs.stream().StreamID()}
	b := quicvarint.Append(f.prefix[:0], uint64(f.id/4))
	b = append(b, masque.ContextUDP)
	f.nprefix = uint8(len(b))
	f.relay = g.StartFlow(ctx, f, up, s.cfg.UDPIdleTimeout, c.flowGroup())
	if g.Throttle() != nil {
		// A paced user's datagrams wait on its bucket: not on the
		// connection's receiver, which serves every flow.
		f.paced = &pacedFlow{queue: make(chan []byte, pacedQueue)}
		f.paced.done.Go(f.paceUp)
	}
	c.addFlow(f) // before the answer: the client's first datagram may follow it closely
	rs.startSection(200)
	rs.sec = appendField(rs.sec, "capsule-protocol", "?1")
	rs.sendHead(nil, false)
	rs.park()
	rs.wbuf = nil // a flow writes nothing more on its stream
	return f      // the stream's service goes on in f.run, started once serve has returned
}

// run reads the flow's capsules until its stream ends, then ends the
// flow and the stream's service.
func (f *flow) run() {
	rs := f.rs
	c := rs.c
	f.readCapsules()
	c.removeFlow(f)
	f.mu.Lock()
	f.closed = true
	if f.paced != nil {
		close(f.paced.queue)
	}
	f.mu.Unlock()
	if f.paced != nil {
		f.paced.done.Wait()
	}
	f.relay.Wait()
	c.s.giveFlow(c)
	rs.finish()
}

// pacedQueue bounds the client's datagrams a paced flow holds while they
// wait on the user's bucket; more are dropped.
const pacedQueue = 64

// takeFlow counts a new flow of c against MaxFlows and MaxListenerFlows,
// and reports false (counting nothing) past either.
func (s *Server) takeFlow(c *conn) bool {
	if n := c.nflows.Add(1); s.cfg.MaxFlows > 0 && n > int64(s.cfg.MaxFlows) {
		c.nflows.Add(-1)
		return false
	}
	if n := s.flows.Add(1); s.cfg.MaxListenerFlows > 0 && n > int64(s.cfg.MaxListenerFlows) {
		s.flows.Add(-1)
		c.nflows.Add(-1)
		return false
	}
	return true
}

func (s *Server) giveFlow(c *conn) {
	s.flows.Add(-1)
	c.nflows.Add(-1)
}

// flow is a CONNECT-UDP stream as gate's FlowSender: UDP payloads travel
// in HTTP Datagrams (QUIC DATAGRAM frames) with context ID 0; datagrams
// with another context ID are dropped (RFC 9298 §4). The stream itself
// carries capsules, which are read and skipped, and its end ends the
// flow.
type flow struct {
	rs    *reqStream
	id    quic.StreamID
	relay *gate.FlowRelay
	paced *pacedFlow // nil for a flow that is not paced

	mu      sync.Mutex // held while a payload goes to the relay
	closed  bool       // no more payloads: the flow is ending; guarded by mu
	nprefix uint8      // prefix's length
	prefix  [9]byte    // the datagrams' quarter stream ID and context ID
}

// pacedFlow is what a paced flow has of its own: the client's payloads
// queued for paceUp, which waits on the user's bucket.
type pacedFlow struct {
	queue chan []byte    // for paceUp
	done  sync.WaitGroup // paceUp
}

// fromClient takes an HTTP Datagram's payload behind its quarter stream
// ID, from the connection's receiver: a UDP payload with context ID 0
// goes to the relay (or to a paced flow's queue, dropped when full).
func (f *flow) fromClient(b []byte) {
	id, payload, err := masque.ParseDatagram(b)
	if err != nil || id != masque.ContextUDP {
		return // malformed, or a context rustle did not register: dropped
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	if f.paced != nil {
		select {
		case f.paced.queue <- payload:
		default:
		}
		return
	}
	if !f.relay.Up(payload) {
		f.closed = true
	}
}

// paceUp hands a paced flow's payloads to the relay, which makes each
// wait on the user's bucket.
func (f *flow) paceUp() {
	for p := range f.paced.queue {
		if !f.relay.Up(p) {
			// Ended: drain what is left so that fromClient never blocks.
			for range f.paced.queue {
			}
			return
		}
	}
}

// readCapsules reads the stream's capsules until it ends or fails, then
// ends the flow (RFC 9298 §3.4: the stream's end is the flow's). A
// DATAGRAM capsule on an HTTP/3 stream is legal but rustle's datagrams
// travel in DATAGRAM frames: it is dropped unread, as an unknown capsule
// is skipped, so that the flow keeps no buffer for it, and after each
// capsule the goroutine waits in waitData again.
func (f *flow) readCapsules() {
	rs := f.rs
	cr := masque.NewCapsuleReader(&rs.body, maxCapsule)
	for {
		rs.waitData()
		if err := cr.Skip(); err != nil {
			if err != io.EOF {
				f.rs.stream().CancelRead(quic.StreamErrorCode(errDatagram))
			}
			f.relay.End(errors.New("h3: flow: the stream ended"))
			return
		}
	}
}

// outPool holds the buffers datagrams to the client are framed in.
var outPool = sync.Pool{New: func() any { b := make([]byte, 0, maxDatagramPayload+16); return &b }}

// SendPayload sends p as an HTTP Datagram with context ID 0. A payload
// too large for a DATAGRAM frame is dropped.
func (f *flow) SendPayload(p []byte) error {
	bp := outPool.Get().(*[]byte)
	b := append(append((*bp)[:0], f.prefix[:f.nprefix]...), p...)
	err := f.rs.c.qc.SendDatagram(b)
	*bp = b
	outPool.Put(bp)
	var tooLarge *quic.DatagramTooLargeError
	if err != nil && errors.As(err, &tooLarge) {
		return nil
	}
	return err
}

// maxDatagramPayload is the largest UDP payload rustle sends in a QUIC
// DATAGRAM frame: what fits in a packet on a path of 1500-byte MTU after
// the QUIC and HTTP Datagram overheads, a little more than quic-go's
// largest frame. Anything larger would not go out.
const maxDatagramPayload = 1500

// MaxPayload bounds the datagrams the target sends that the flow carries.
func (f *flow) MaxPayload() int { return maxDatagramPayload }

// Close ends the stream both ways, which ends the capsule reader.
func (f *flow) Close() error {
	f.rs.stream().CancelRead(quic.StreamErrorCode(errNoError))
	return f.rs.stream().Close()
}
