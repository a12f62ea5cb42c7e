package h3

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/quicvarint"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/fieldreq"
	"github.com/rustle-proxy/rustle/internal/gate"
)

// conn is the HTTP/3 side of one QUIC connection (RFC 9114 §6): its
// control stream and the client's, the request streams, and the HTTP
// Datagrams of its CONNECT-UDP flows.
//
// Goroutines: the one that accepts request streams (ServeConn's), which
// also acts on the session's end and the policy's Cut (see serve), one
// that accepts the client's unidirectional streams until its three
// critical ones have come (see acceptUni), and, once a flow
// has opened, one that receives the connection's datagrams and hands
// each to its flow and, on Linux, one (the gate.FlowPoller's of its
// gate.FlowGroup) that reads the flows' target sockets; a request stream
// runs on a reused worker, a tunnel or a flow on a goroutine of its own.
type conn struct {
	s     *Server
	qc    *quic.Conn
	sess  *gate.Session
	self  netip.AddrPort // the listener's address, to refuse requests for rustle itself
	local net.Addr
	peer  net.Addr

	ctrl *quic.SendStream // rustle's control stream: SETTINGS, then GOAWAY

	settings      chan struct{} // closed once the client's SETTINGS came
	peerDatagrams bool          // the client's SETTINGS_H3_DATAGRAM; read after settings
	critical      chan struct{} // closed once saw has all three critical streams
	saw           atomic.Uint32 // the client's critical streams come: sawControl and the others

	streams sync.WaitGroup // request streams being served

	mu        sync.Mutex
	active    int  // request streams being served; guarded by mu
	draining  bool // GOAWAY sent: no new stream; close once active is 0; guarded by mu
	goAwayID  quic.StreamID
	nextID    quic.StreamID           // the stream ID after the last one accepted; guarded by mu
	idle      *time.Timer             // closes the connection idle for IdleTimeout; nil without one
	flows     map[quic.StreamID]*flow // open flows by stream ID; guarded by mu
	receiving bool                    // the datagram receiver runs; guarded by mu
	group     *gate.FlowGroup         // what the flows share; nil until the first flow; guarded by mu
	noGroup   bool                    // the connection's service has ended: no group is made; guarded by mu
	rejected  int                     // malformed requests logged; guarded by mu

	nflows atomic.Int64 // open flows
}

// newConn returns the conn of qc, having given sess the handshake's
// state. It is never inlined: the connection's state it copies (several
// hundred bytes) would sit in ServeConn's frame, on the stack of every
// connection's goroutine while it idles.
//
//go:noinline
func newConn(s *Server, qc *quic.Conn, sess *gate.Session) *conn {
	sess.SetTLS(qc.ConnectionState().TLS)
	c := &conn{s: s, qc: qc, sess: sess, settings: make(chan struct{}), critical: make(chan struct{}), local: qc.LocalAddr(), peer: qc.RemoteAddr()}
	if a, ok := c.local.(*net.UDPAddr); ok {
		ap := a.AddrPort()
		c.self = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return c
}

// serve serves the connection until it closes, and until every request
// stream it accepted has been served.
func (c *conn) serve() {
	defer c.closeGroup()
	defer c.streams.Wait()
	if err := c.openControl(); err != nil {
		c.close(errNoError, "")
		return
	}
	go c.acceptUni()
	if d := c.s.cfg.IdleTimeout; d > 0 {
		c.mu.Lock()
		c.idle = time.AfterFunc(d, c.idleTimeout)
		c.mu.Unlock()
	}
	// The loop waits for request streams, and for one context at a time
	// (see ended): the session's, then the policy's Cut, then the
	// connection's own. Waiting on them here, rather than with a
	// context.AfterFunc each, keeps no hook per connection in them.
	closed := c.qc.Context()
	wait := c.sess.Context()
	for {
		if wait != closed && wait.Err() != nil {
			wait = c.ended(wait)
			continue
		}
		str, err := c.qc.AcceptStream(wait)
		if err != nil {
			if wait != closed && wait.Err() != nil {
				continue
			}
			break // the connection closed
		}
		if !c.begin(str.StreamID()) {
			// After GOAWAY: the client may retry it elsewhere.
			str.CancelRead(quic.StreamErrorCode(errRequestRejected))
			str.CancelWrite(quic.StreamErrorCode(errRequestRejected))
			continue
		}
		c.streams.Add(1)
		c.s.pool.Start(getStream(c, str))
	}
	c.mu.Lock()
	if c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Unlock()
}

// ended acts on wait, the context serve waited on, being done, and
// returns the next one to wait on: when the session's context is done,
// the connection drains (GOAWAY), or closes at once for a revoked user;
// when the policy's Cut is done after that, it closes. Past those it
// waits on the connection's own context, done once it has closed.
func (c *conn) ended(wait context.Context) context.Context {
	if wait == c.sess.Context() {
		if context.Cause(wait) == gate.ErrRevoked {
			c.close(errNoError, "access revoked")
			return c.qc.Context()
		}
		c.drain(true)
		if cut := c.sess.Policy().Cut; cut != nil {
			return cut
		}
		return c.qc.Context()
	}
	c.close(errNoError, "shutting down") // the Cut
	return c.qc.Context()
}

// openControl opens rustle's control stream with its SETTINGS: the
// largest field section it takes, extended CONNECT (RFC 9220), HTTP
// Datagrams (RFC 9297). No dynamic QPACK table (capacity 0 is the
// default).
func (c *conn) openControl() error {
	str, err := c.qc.OpenUniStream()
	if err != nil {
		return err
	}
	c.ctrl = str
	var body []byte
	body = quicvarint.Append(body, settingMaxFieldSectionSize)
	body = quicvarint.Append(body, uint64(c.s.maxHeaderBytes))
	body = quicvarint.Append(body, settingEnableConnectProtocol)
	body = quicvarint.Append(body, 1)
	body = quicvarint.Append(body, settingH3Datagram)
	body = quicvarint.Append(body, 1)
	b := quicvarint.Append(nil, streamControl)
	b = appendFrameHeader(b, frameSettings, len(body))
	_, err = str.Write(append(b, body...))
	return err
}

// begin counts a request stream the client opened, unless GOAWAY went
// out before it; it stops the idle timer.
func (c *conn) begin(id quic.StreamID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining && id >= c.goAwayID {
		return false
	}
	c.nextID = id + 4
	c.active++
	if c.idle != nil {
		c.idle.Stop()
	}
	return true
}

// end counts a request stream served: the last one of a draining
// connection closes it, that of an idle one starts the idle timer.
func (c *conn) end() {
	c.mu.Lock()
	c.active--
	if c.active == 0 {
		if c.draining {
			c.closeDrained()
		} else if c.idle != nil {
			c.idle.Reset(c.s.cfg.IdleTimeout)
		}
	}
	c.mu.Unlock()
	c.streams.Done()
}

// idleTimeout closes the connection if no request stream is being
// served.
func (c *conn) idleTimeout() {
	c.mu.Lock()
	idle := c.active == 0
	c.mu.Unlock()
	if idle {
		c.close(errNoError, "idle timeout")
	}
}

// drain starts the graceful end of the connection: GOAWAY naming the
// first stream it will not serve (RFC 9114 §5.2), then the connection's
// close once its requests, tunnels and flows have ended. cooling says
// why: a client cooling down, which is not sent GOAWAY (its requests end
// with the 429 answered), rather than the session's end.
func (c *conn) drain(goAway bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining {
		return
	}
	c.draining = true
	c.goAwayID = c.nextID
	if goAway && c.ctrl != nil {
		b := appendFrameHeader(nil, frameGoAway, quicvarint.Len(uint64(c.goAwayID)))
		b = quicvarint.Append(b, uint64(c.goAwayID))
		// A short write on a stream with credit: it does not block (and
		// returns once the connection has closed, if it did).
		go c.ctrl.Write(b)
	}
	if c.active == 0 {
		c.closeDrained()
	}
}

// closeDrained closes a draining connection whose requests have ended,
// once what they sent last has had time to be acknowledged: a
// CONNECTION_CLOSE discards stream data still unacknowledged (a tunnel's
// last bytes and FIN). The wait is three probe timeouts of the
// connection's RTT (RFC 9002 §6.2.1), at least lingerMin and at most
// lingerMax.
func (c *conn) closeDrained() {
	st := c.qc.ConnectionStats()
	d := min(max(3*(st.SmoothedRTT+4*st.MeanDeviation), lingerMin), lingerMax)
	time.AfterFunc(d, func() { c.close(errNoError, "shutting down") })
}

// The bounds on closeDrained's wait.
const (
	lingerMin = 50 * time.Millisecond
	lingerMax = 2 * time.Second
)

// close closes the connection with an HTTP/3 error code.
func (c *conn) close(code uint64, why string) {
	c.qc.CloseWithError(quic.ApplicationErrorCode(code), why)
}

// fail closes the connection for err when it is a connError, and
// reports whether it was.
func (c *conn) fail(err error) bool {
	var ce *connError
	if errors.As(err, &ce) {
		c.close(ce.code, ce.why)
		return true
	}
	return false
}

// reject logs a request refused as malformed, its stream reset with
// H3_MESSAGE_ERROR: with its method when that is a valid one, never its
// target; past maxRejectedLogged on the connection, not at all.
func (c *conn) reject(method string, cause error) {
	c.mu.Lock()
	if c.rejected == maxRejectedLogged {
		c.mu.Unlock()
		return
	}
	c.rejected++
	c.mu.Unlock()
	r := gate.Request{Log: accesslog.ProtoH3}
	if fieldreq.ValidToken(method) {
		r.Method = method
	}
	var g gate.Grant
	c.sess.Reject(&r, &g, 0, accesslog.ReasonProtocol, cause)
}

// maxRejectedLogged bounds the malformed requests logged per connection:
// a client sending many leaves that many lines.
const maxRejectedLogged = 16

// acceptUni accepts the client's unidirectional streams, each read on a
// goroutine of its own until its type says what it is, until the
// connection closes or the client has opened its control stream and both
// QPACK streams: those take the three streams of credit the client has
// (maxUniStreams) and, unread to their end, never give it back, so that
// the client can open no other and no goroutine need wait for one while
// the connection idles.
func (c *conn) acceptUni() {
	for {
		str, err := c.qc.AcceptUniStream((*uniWait)(c))
		if err != nil {
			return
		}
		go c.handleUni(str)
	}
}

// maxUniStreams is the unidirectional streams a client may have open at
// once: its control stream and its QPACK encoder and decoder streams,
// the three that RFC 9114 §6.2 asks every peer to allow. Another (a
// GREASE type, say, which is refused) waits until one of those it opened
// before has ended.
const maxUniStreams = 3

// uniWait is the context acceptUni waits with: done once the client has
// opened its three critical streams (see sawCritical).
type uniWait conn

// Deadline reports no deadline.
func (*uniWait) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done is closed once the client's three critical streams have come.
func (w *uniWait) Done() <-chan struct{} { return w.critical }

// Err is context.Canceled once Done is closed.
func (w *uniWait) Err() error {
	select {
	case <-w.critical:
		return context.Canceled
	default:
		return nil
	}
}

// Value holds nothing.
func (*uniWait) Value(any) any { return nil }

// The client's critical streams, as bits of conn.saw.
const (
	sawControl = 1 << iota
	sawEncoder
	sawDecoder
	sawAll = sawControl | sawEncoder | sawDecoder
)

// sawCritical records that one of the client's critical streams (control,
// QPACK encoder, QPACK decoder: which, a bit of conn.saw) has come,
// closing c.critical with the third. It reports false for a second
// stream of the same type, which is an error (RFC 9114 §6.2.1, RFC 9204
// §4.2).
func (c *conn) sawCritical(which uint32) bool {
	old := c.saw.Or(which)
	if old&which != 0 {
		return false
	}
	if old|which == sawAll {
		close(c.critical)
	}
	return true
}

// handleUni reads a unidirectional stream's type (RFC 9114 §6.2): the
// control stream's SETTINGS are read, the QPACK streams are left unread
// (rustle has no dynamic table, so the client's encoder has nothing to
// say and its decoder nothing to acknowledge), a push stream is an error
// and a stream of another type is refused.
func (c *conn) handleUni(str *quic.ReceiveStream) {
	var buf [64]byte
	fr := frameReader{src: str, buf: buf[:]}
	typ, err := fr.varint()
	if err != nil {
		return
	}
	switch typ {
	case streamControl:
		if !c.sawCritical(sawControl) {
			c.close(errStreamCreation, "second control stream")
			return
		}
		if err := c.readSettings(&fr); err != nil {
			if !c.fail(err) {
				c.close(errClosedCriticalStream, "control stream closed")
			}
		}
	case streamQPACKEncoder:
		if !c.sawCritical(sawEncoder) {
			c.close(errStreamCreation, "second QPACK encoder stream")
		}
	case streamQPACKDecoder:
		if !c.sawCritical(sawDecoder) {
			c.close(errStreamCreation, "second QPACK decoder stream")
		}
	case streamPush:
		c.close(errStreamCreation, "push stream from a client")
	default:
		str.CancelRead(quic.StreamErrorCode(errStreamCreation))
	}
}

// readSettings reads the client's SETTINGS, the control stream's first
// frame (RFC 9114 §7.2.4), and closes c.settings. The rest of the stream
// is not read: rustle acts on nothing else a client sends there.
func (c *conn) readSettings(fr *frameReader) error {
	typ, length, err := fr.header()
	if err != nil {
		return err
	}
	if typ != frameSettings {
		return &connError{code: errMissingSettings, why: "the control stream does not begin with SETTINGS"}
	}
	if length > maxSettingsSize {
		return &connError{code: errExcessiveLoad, why: "SETTINGS too large"}
	}
	var seenDatagram bool
	seen := make(map[uint64]bool)
	for length > 0 {
		start := fr.r
		id, err := fr.varint()
		if err != nil {
			return err
		}
		v, err := fr.varint()
		if err != nil {
			return noEOF(err)
		}
		n := uint64(fr.r - start)
		if n > length {
			return &connError{code: errFrame, why: "malformed SETTINGS"}
		}
		length -= n
		if seen[id] {
			return &connError{code: errSettings, why: "repeated setting"}
		}
		seen[id] = true
		switch id {
		case 0x02, 0x03, 0x04, 0x05: // HTTP/2's, reserved (RFC 9114 §7.2.4.1)
			return &connError{code: errSettings, why: "an HTTP/2 setting"}
		case settingH3Datagram:
			if v > 1 {
				return &connError{code: errSettings, why: "SETTINGS_H3_DATAGRAM above 1"}
			}
			seenDatagram = v == 1
		case settingEnableConnectProtocol:
			if v > 1 {
				return &connError{code: errSettings, why: "SETTINGS_ENABLE_CONNECT_PROTOCOL above 1"}
			}
		}
	}
	if seenDatagram && !c.qc.ConnectionState().SupportsDatagrams.Remote {
		// RFC 9297 §2.1.1: HTTP Datagrams need QUIC's.
		return &connError{code: errSettings, why: "SETTINGS_H3_DATAGRAM without QUIC datagrams"}
	}
	c.peerDatagrams = seenDatagram
	close(c.settings)
	return nil
}

// addFlow registers f for the datagrams of its stream, starting the
// connection's datagram receiver with the first flow.
func (c *conn) addFlow(f *flow) {
	c.mu.Lock()
	if c.flows == nil {
		c.flows = make(map[quic.StreamID]*flow)
	}
	c.flows[f.id] = f
	start := !c.receiving
	c.receiving = true
	c.mu.Unlock()
	if start {
		go c.receiveDatagrams()
	}
}

// flowGroup returns the group of the connection's flows, making it with
// the first: one timer and one revocation hook serve every flow, and on
// Linux one goroutine reads every flow's target socket and sends the
// datagrams into the connection, whose one send queue any of them would
// wait on. It returns nil once the connection's service has ended (each
// flow then has a timer, a hook and a goroutine of its own).
func (c *conn) flowGroup() *gate.FlowGroup {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.group == nil && !c.noGroup {
		c.group = gate.NewFlowGroup(c.sess)
	}
	return c.group
}

// closeGroup closes the flows' group, once every flow has ended.
func (c *conn) closeGroup() {
	c.mu.Lock()
	g := c.group
	c.group, c.noGroup = nil, true
	c.mu.Unlock()
	if g != nil {
		g.Close()
	}
}

// removeFlow unregisters f.
func (c *conn) removeFlow(f *flow) {
	c.mu.Lock()
	delete(c.flows, f.id)
	c.mu.Unlock()
}

// receiveDatagrams hands each HTTP Datagram (RFC 9297 §2.1) to the flow
// of its stream until the connection closes; a datagram for no open flow
// is dropped.
func (c *conn) receiveDatagrams() {
	ctx := c.qc.Context()
	for {
		b, err := c.qc.ReceiveDatagram(ctx)
		if err != nil {
			return
		}
		q, n, err := quicvarint.Parse(b)
		if err != nil {
			c.close(errDatagram, "malformed HTTP Datagram")
			return
		}
		if q > maxQuarterStreamID {
			c.close(errID, "HTTP Datagram for an impossible stream")
			return
		}
		c.mu.Lock()
		f := c.flows[quic.StreamID(q*4)]
		c.mu.Unlock()
		if f != nil {
			f.fromClient(b[n:])
		}
	}
}

// waitSettings waits until the client's SETTINGS came, or ctx is done.
func (c *conn) waitSettings(ctx context.Context) bool {
	select {
	case <-c.settings:
		return true
	case <-ctx.Done():
		return false
	}
}
