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
// upstream with gate.Grant.Tunnel until both directions end.
func (s *Server) connect(w http.ResponseWriter, r *http.Request, g *gate.Grant) {
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
