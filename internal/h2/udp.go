package h2

import (
	"context"
	"io"
	"strconv"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/masque"
	"github.com/rustle-proxy/rustle/internal/origin"
)

// maxCapsule bounds a DATAGRAM capsule read whole from a CONNECT-UDP
// stream: a UDP payload and its context ID.
const maxCapsule = 65535 + 8

// matchUDP matches a CONNECT-UDP request's :path against the URI template
// and sets its target, or makes it a request rustle answers itself (404).
func (s *stream) matchUDP() {
	r := &s.req
	t := s.c.cfg.UDPTemplate
	host, port, err := t.Match(r.path)
	if err != nil {
		s.req = local(*r, 404, "not a CONNECT-UDP target: the path does not match "+strconv.Quote(t.String()))
		return
	}
	r.host, r.port, r.ipv6 = host, int(port), isIPv6(host)
}

func isIPv6(host string) bool {
	for i := 0; i < len(host); i++ {
		if host[i] == ':' {
			return true
		}
	}
	return false
}

// connectUDP serves CONNECT-UDP over HTTP/2 (RFC 9298 §5, with the
// capsule protocol of RFC 9297 §3): the target's UDP socket is made under
// the grant, the answer is 200 with capsule-protocol, and the flow's
// payloads travel in DATAGRAM capsules on the stream, each way, relayed
// by gate.Grant.RelayFlow until either side ends it.
func (s *stream) connectUDP() {
	c := s.c
	r := &s.req
	c.mu.Lock()
	if s.reset {
		c.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	c.mu.Unlock()
	defer cancel()
	up, err := s.grant.DialUDP(ctx)
	if err != nil {
		status, reason, text := origin.Failure(err, r.host)
		if reason != "" {
			s.grant.SetReason(reason)
		}
		s.answer(status, text)
		return
	}
	if s.sendHeaders([]hpack.HeaderField{{Name: ":status", Value: "200"}, {Name: "capsule-protocol", Value: "?1"}}, false) != nil {
		up.Close()
		return
	}
	s.answered(200)
	s.releaseFields()
	f := &capsuleFlow{s: s}
	f.cr = masque.NewCapsuleReader(streamReader{s}, maxCapsule)
	res := s.grant.RelayFlow(ctx, f, up, c.cfg.UDPIdleTimeout)
	if res.Err != nil && f.malformed {
		s.grant.SetReason(accesslog.ReasonProtocol)
	}
}

// capsuleFlow is a CONNECT-UDP stream as gate's Flow: each UDP payload
// is a DATAGRAM capsule (RFC 9297 §3.5) whose value is the context ID 0
// and the payload; capsules of other types, and datagrams of other
// context IDs, are skipped.
type capsuleFlow struct {
	s         *stream
	cr        *masque.CapsuleReader
	out       []byte // the capsule being sent; used by one goroutine
	malformed bool   // the client sent what is no capsule; set by the receiving goroutine
}

// ReceivePayload returns the next DATAGRAM capsule's UDP payload.
func (f *capsuleFlow) ReceivePayload(context.Context) ([]byte, error) {
	for {
		v, err := f.cr.Next()
		if err != nil {
			if err != io.EOF && err != errStreamGone {
				f.malformed = true
			}
			return nil, err
		}
		id, payload, err := masque.ParseDatagram(v)
		if err != nil || id != masque.ContextUDP {
			continue
		}
		return payload, nil
	}
}

// SendPayload sends p in a DATAGRAM capsule, as DATA within the
// flow-control windows (waiting for them at most the write timeout).
func (f *capsuleFlow) SendPayload(p []byte) error {
	f.out = masque.AppendVarint(f.out[:0], masque.CapsuleDatagram)
	f.out = masque.AppendVarint(f.out, uint64(len(p)+1))
	f.out = append(append(f.out, masque.ContextUDP), p...)
	return f.s.sendData(f.out, false)
}

// MaxPayload is the largest UDP payload: a capsule carries any.
func (f *capsuleFlow) MaxPayload() int { return 65527 }

// Close ends the stream: with END_STREAM when the client has ended its
// side (the flow is over), else with RST_STREAM CANCEL, which also ends a
// ReceivePayload waiting for the client.
func (f *capsuleFlow) Close() error {
	s := f.s
	c := s.c
	c.mu.Lock()
	graceful := s.remoteDone && !s.reset
	c.mu.Unlock()
	if graceful && s.sendData(nil, true) == nil {
		return nil
	}
	s.resetStream(http2.ErrCodeCancel)
	return nil
}

// streamReader reads the DATA payload a client sent on a stream that is
// no tunnel: what the reader queued, returning its credit as it is read.
// It returns io.EOF after the client's END_STREAM, and errStreamGone once
// the stream is reset.
type streamReader struct{ s *stream }

func (r streamReader) Read(p []byte) (int, error) {
	s := r.s
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for s.in.n == 0 && !s.remoteDone && !s.reset {
		s.cond.Wait()
	}
	return r.readLocked(p)
}

// readLocked reads what is queued, once the stream has bytes queued, has
// ended or was reset; the connection's mu is held.
func (r streamReader) readLocked(p []byte) (int, error) {
	s := r.s
	if s.reset {
		return 0, errStreamGone
	}
	if s.in.n == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.in.front())
	s.consumedLocked(n)
	s.c.flushLocked() // the window update the credit may have queued
	return n, nil
}
