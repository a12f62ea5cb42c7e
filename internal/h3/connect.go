package h3

import (
	"net"
	"time"

	"github.com/quic-go/quic-go"

	"github.com/rustle-proxy/rustle/internal/gate"
)

// connect serves CONNECT: dial, answer 200, and relay the stream and the
// upstream with gate.Grant.Tunnel until both directions end. A tunnel
// whose ClientHello the SNI check reads is answered first (see
// helloFirst).
func (rs *reqStream) connect() {
	g := &rs.g
	if g.NeedsHello() {
		rs.helloFirst()
		return
	}
	up, err := g.Dial(rs.stream().Context())
	if err != nil {
		rs.answerFailure(err, nil, string(g.AppendDest(nil)))
		return
	}
	rs.answerTunnel()
	rs.park()
	g.Tunnel(&streamConn{rs: rs}, up, nil)
}

// answerTunnel answers a tunnel 200: its stream then carries the
// tunnel's bytes in DATA frames.
func (rs *reqStream) answerTunnel() {
	rs.startSection(200)
	rs.sendHead(nil, false)
	rs.g.Answer(200, 0)
}

// helloFirst serves a CONNECT whose ClientHello the SNI check reads
// before the dial (gate.Grant.NeedsHello): answer 200 (the client sends
// its hello only then), read the hello from the stream (within the
// grant's HelloTimeout, at most sni.MaxBytes), decide it, then dial and
// relay, the hello going to the origin first. A refusal, or a dial that
// fails, resets the stream with H3_CONNECT_ERROR; the access log has
// the reason.
func (rs *reqStream) helloFirst() {
	g := &rs.g
	rs.answerTunnel()
	c := &streamConn{rs: rs}
	hello, k := g.ReadHello(c, nil)
	if k != gate.OK {
		rs.reset(errConnect)
		return
	}
	if g.Intercepting() {
		g.Intercept(c, hello)
		return
	}
	up, err := g.Dial(rs.stream().Context())
	if err != nil {
		rs.reset(errConnect)
		return
	}
	up.SetWriteDeadline(gate.Deadline(time.Now(), rs.c.s.cfg.Origin.Config().WriteTimeout))
	n, err := up.Write(hello)
	g.AddBytes(int64(n), 0)
	if err != nil {
		up.Close()
		rs.reset(errConnect)
		return
	}
	rs.park()
	g.Tunnel(c, up, nil)
}

// streamConn is a request stream as the client's side of a tunnel: its
// reads and writes are the payload of the stream's DATA frames,
// CloseWrite is its FIN, and Close ends both directions.
type streamConn struct {
	rs *reqStream
}

func (c *streamConn) Read(p []byte) (int, error) { return c.rs.body.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) {
	if err := c.rs.sendData(p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite ends the stream's sending side with a FIN.
func (c *streamConn) CloseWrite() error { return c.rs.stream().Close() }

// Close ends both directions: a FIN for what was written, and the
// client told to stop sending.
func (c *streamConn) Close() error {
	c.rs.stream().CancelRead(quic.StreamErrorCode(errNoError))
	return c.rs.stream().Close()
}

func (c *streamConn) LocalAddr() net.Addr  { return c.rs.c.local }
func (c *streamConn) RemoteAddr() net.Addr { return c.rs.c.peer }
func (c *streamConn) SetDeadline(t time.Time) error {
	c.rs.stream().SetReadDeadline(t)
	return c.rs.stream().SetWriteDeadline(t)
}
func (c *streamConn) SetReadDeadline(t time.Time) error  { return c.rs.stream().SetReadDeadline(t) }
func (c *streamConn) SetWriteDeadline(t time.Time) error { return c.rs.stream().SetWriteDeadline(t) }
