package h3

import (
	"net"
	"net/http"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/rustle-proxy/rustle/internal/gate"
)

// connect serves CONNECT: dial, answer 200, and relay the stream and the
// upstream with gate.Grant.Tunnel until both directions end. A tunnel
// whose ClientHello the SNI check reads is answered first (see
// helloFirst).
func (s *Server) connect(w http.ResponseWriter, r *http.Request, g *gate.Grant) {
	if g.NeedsHello() {
		s.helloFirst(w, r, g)
		return
	}
	up, err := g.Dial(r.Context())
	if err != nil {
		s.answerFailure(w, g, err, nil, string(g.AppendDest(nil)))
		return
	}
	w.WriteHeader(http.StatusOK)
	g.Answer(http.StatusOK, 0)
	str := w.(http3.HTTPStreamer).HTTPStream() // sends the head
	g.Tunnel(&streamConn{str: str, local: localAddr(r), remote: remoteAddr(r)}, up, nil)
}

// helloFirst serves a CONNECT whose ClientHello the SNI check reads
// before the dial (gate.Grant.NeedsHello): answer 200 (the client sends
// its hello only then), read the hello from the stream (within the
// grant's HelloTimeout, at most sni.MaxBytes), decide it, then dial and
// relay, the hello going to the origin first. A refusal, or a dial that
// fails, resets the stream with H3_CONNECT_ERROR; the access log has
// the reason.
func (s *Server) helloFirst(w http.ResponseWriter, r *http.Request, g *gate.Grant) {
	w.WriteHeader(http.StatusOK)
	g.Answer(http.StatusOK, 0)
	str := w.(http3.HTTPStreamer).HTTPStream() // sends the head
	c := &streamConn{str: str, local: localAddr(r), remote: remoteAddr(r)}
	hello, k := g.ReadHello(c, nil)
	if k != gate.OK {
		resetStream(str)
		return
	}
	if g.Intercepting() {
		g.Intercept(c, hello)
		return
	}
	up, err := g.Dial(r.Context())
	if err != nil {
		resetStream(str)
		return
	}
	up.SetWriteDeadline(gate.Deadline(time.Now(), s.cfg.Origin.Config().WriteTimeout))
	n, err := up.Write(hello)
	g.AddBytes(int64(n), 0)
	if err != nil {
		up.Close()
		resetStream(str)
		return
	}
	g.Tunnel(c, up, nil)
}

// resetStream ends a tunnel's stream both ways with H3_CONNECT_ERROR,
// the code of a tunnel that failed (RFC 9114 §4.4).
func resetStream(str *http3.Stream) {
	str.CancelRead(quic.StreamErrorCode(http3.ErrCodeConnectError))
	str.CancelWrite(quic.StreamErrorCode(http3.ErrCodeConnectError))
}

// streamConn is a request stream as the client's side of a tunnel: its
// reads and writes are the stream's DATA, CloseWrite is its FIN, and
// Close ends both directions.
type streamConn struct {
	str           *http3.Stream
	local, remote net.Addr
}

func (c *streamConn) Read(p []byte) (int, error)  { return c.str.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) { return c.str.Write(p) }

// CloseWrite ends the stream's sending side with a FIN.
func (c *streamConn) CloseWrite() error { return c.str.Close() }

// Close ends both directions: a FIN for what was written, and the
// client told to stop sending.
func (c *streamConn) Close() error {
	c.str.CancelRead(quic.StreamErrorCode(http3.ErrCodeNoError))
	return c.str.Close()
}

func (c *streamConn) LocalAddr() net.Addr  { return c.local }
func (c *streamConn) RemoteAddr() net.Addr { return c.remote }
func (c *streamConn) SetDeadline(t time.Time) error {
	c.str.SetReadDeadline(t)
	return c.str.SetWriteDeadline(t)
}
func (c *streamConn) SetReadDeadline(t time.Time) error  { return c.str.SetReadDeadline(t) }
func (c *streamConn) SetWriteDeadline(t time.Time) error { return c.str.SetWriteDeadline(t) }

// localAddr and remoteAddr return the connection's addresses that quic-go
// put in the request's context.
func localAddr(r *http.Request) net.Addr {
	a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return a
}

func remoteAddr(r *http.Request) net.Addr {
	a, _ := r.Context().Value(http3.RemoteAddrContextKey).(net.Addr)
	return a
}
