package h3

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/masque"
)

// maxCapsule bounds a DATAGRAM capsule rustle reads whole from a
// CONNECT-UDP stream: a UDP payload and its context ID.
const maxCapsule = 65535 + 8

// connectUDP serves a CONNECT-UDP request (RFC 9298): it dials the
// target's UDP socket under the grant, answers 200 with
// Capsule-Protocol, and relays the flow until it ends.
func (s *Server) connectUDP(w http.ResponseWriter, r *http.Request, cs *connState, q *request, g *gate.Grant) {
	settings := w.(http3.Settingser)
	select {
	case <-settings.ReceivedSettings():
	case <-r.Context().Done():
		g.Finish(0, 0)
		return
	}
	if !settings.Settings().EnableDatagrams {
		g.SetReason(accesslog.ReasonProtocol)
		answer(w, g, 400, "CONNECT-UDP needs HTTP Datagrams: the client did not enable SETTINGS_H3_DATAGRAM")
		return
	}
	if !s.takeFlow(cs) {
		g.SetReason(accesslog.ReasonOverloaded)
		answer(w, g, 503, "too many UDP flows")
		return
	}
	defer s.giveFlow(cs)
	up, err := g.DialUDP(r.Context())
	if err != nil {
		s.answerFailure(w, g, err, nil, q.host)
		return
	}
	w.Header().Set(http3.CapsuleProtocolHeader, "?1")
	w.WriteHeader(http.StatusOK)
	g.Answer(http.StatusOK, 0)
	str := w.(http3.HTTPStreamer).HTTPStream()
	f := &flow{str: str}
	f.readCapsules()
	g.RelayFlow(r.Context(), f, up, s.cfg.UDPIdleTimeout)
	<-f.capsulesDone
}

// takeFlow counts a new flow of cs against MaxFlows and
// MaxListenerFlows, and reports false (counting nothing) past either.
func (s *Server) takeFlow(cs *connState) bool {
	if n := cs.flows.Add(1); s.cfg.MaxFlows > 0 && n > int64(s.cfg.MaxFlows) {
		cs.flows.Add(-1)
		return false
	}
	if n := s.flows.Add(1); s.cfg.MaxListenerFlows > 0 && n > int64(s.cfg.MaxListenerFlows) {
		s.flows.Add(-1)
		cs.flows.Add(-1)
		return false
	}
	return true
}

func (s *Server) giveFlow(cs *connState) {
	s.flows.Add(-1)
	cs.flows.Add(-1)
}

// flow is a CONNECT-UDP stream as gate's Flow: UDP payloads travel in
// QUIC DATAGRAM frames with context ID 0; datagrams with another context
// ID are dropped (RFC 9298 §4). The stream itself carries capsules,
// which are read and skipped, and its end ends the flow.
type flow struct {
	str          *http3.Stream
	out          []byte // the datagram being sent; used by one goroutine
	capsulesDone chan struct{}
}

// readCapsules reads the stream's capsules until it ends or fails, then
// ends the flow (RFC 9298 §3.4: the stream's end is the flow's).
func (f *flow) readCapsules() {
	f.capsulesDone = make(chan struct{})
	go func() {
		defer close(f.capsulesDone)
		cr := masque.NewCapsuleReader(f.str, maxCapsule)
		for {
			// A DATAGRAM capsule on an HTTP/3 stream is legal but
			// rustle's datagrams travel in DATAGRAM frames: it is
			// dropped, as an unknown capsule is skipped.
			if _, err := cr.Next(); err != nil {
				if err != io.EOF {
					f.str.CancelRead(quic.StreamErrorCode(http3.ErrCodeDatagramError))
				}
				f.Close()
				return
			}
		}
	}()
}

// ReceivePayload returns the next datagram's UDP payload.
func (f *flow) ReceivePayload(ctx context.Context) ([]byte, error) {
	for {
		b, err := f.str.ReceiveDatagram(ctx)
		if err != nil {
			return nil, err
		}
		id, payload, err := masque.ParseDatagram(b)
		if err != nil || id != masque.ContextUDP {
			continue // malformed, or a context rustle did not register: dropped
		}
		return payload, nil
	}
}

// SendPayload sends p as a datagram with context ID 0. A payload too
// large for a DATAGRAM frame is dropped.
func (f *flow) SendPayload(p []byte) error {
	f.out = append(append(f.out[:0], masque.ContextUDP), p...)
	err := f.str.SendDatagram(f.out)
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

// Close ends the stream both ways, which ends a pending ReceivePayload.
func (f *flow) Close() error {
	f.str.CancelRead(quic.StreamErrorCode(http3.ErrCodeNoError))
	return f.str.Close()
}
