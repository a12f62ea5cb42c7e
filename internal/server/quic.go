package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/h3"
)

// quicSocket is an http3 listener's UDP socket and its QUIC listener,
// which a reload that keeps the listener's TCP sockets keeps too.
type quicSocket struct {
	udp  *net.UDPConn
	tr   *quic.Transport
	ln   *quic.Listener
	once sync.Once // closes

	mu      sync.Mutex
	conns   int  // connections served on it; guarded by mu
	retired bool // no listener uses it: closed once conns is 0; guarded by mu

	hs quicHandshakes // the handshakes in progress on it, and their admission
}

// portTries is how many TCP ports openWithQUIC tries for a listener on
// port 0 whose chosen port is taken over UDP.
const portTries = 8

// openWithQUIC opens l's TCP sockets with open and, when l serves HTTP/3,
// its QUIC socket on the same port (openQUIC), setting l.lns and l.quic.
// A listener on port 0 gets the port the kernel chose for TCP, which
// another program may hold over UDP: its sockets are then closed and
// opened again, on another port, up to portTries times.
func openWithQUIC(l *listener, open func() ([]net.Listener, error), log *slog.Logger) error {
	_, port, _ := net.SplitHostPort(l.Config.Address)
	for try := 1; ; try++ {
		lns, err := open()
		if err != nil {
			return err
		}
		l.lns = lns
		if l.H3 == nil {
			return nil
		}
		q, err := openQUIC(l, log)
		if err == nil {
			l.quic = q
			return nil
		}
		closeAll(lns)
		l.lns = nil
		if port != "0" || try == portTries || !errors.Is(err, syscall.EADDRINUSE) {
			return err
		}
	}
}

// openQUIC opens l's UDP socket on the address and port number of its
// first TCP socket, and a QUIC listener on it whose certificate, QUIC
// settings and admission (see quicHandshakes) are those of the listener
// that l.cur holds at each new connection. log receives the admission's
// warnings.
func openQUIC(l *listener, log *slog.Logger) (*quicSocket, error) {
	tcp, ok := l.lns[0].Addr().(*net.TCPAddr)
	if !ok {
		return nil, fmt.Errorf("server: listen %s on %s over UDP: no TCP address", l.Config.Name, l.Config.Address)
	}
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: tcp.IP, Port: tcp.Port, Zone: tcp.Zone})
	if err != nil {
		return nil, fmt.Errorf("server: listen %s on %s over UDP: %w", l.Config.Name, tcp, err)
	}
	cur := l.cur
	tlsConf := h3.TLSConfig(func() *tls.Config { return cur.Load().TLS.TLSConfig() })
	q := &quicSocket{udp: udp}
	q.hs.init(log)
	// A connection admitted without a handshake slot waits for one
	// before the handshake goes on (quicHandshakes.awaitSlot).
	getConf := tlsConf.GetConfigForClient
	tlsConf.GetConfigForClient = func(hi *tls.ClientHelloInfo) (*tls.Config, error) {
		if err := q.hs.awaitSlot(hi.Context()); err != nil {
			return nil, err
		}
		return getConf(hi)
	}
	qc := l.H3.QUICConfig().Clone()
	qc.GetConfigForClient = func(*quic.ClientInfo) (*quic.Config, error) {
		if s := cur.Load().H3; s != nil {
			return s.QUICConfig(), nil
		}
		return nil, errors.New("server: http3 is off on this listener")
	}
	q.tr = &quic.Transport{
		Conn:                udp,
		VerifySourceAddress: func(a net.Addr) bool { return q.hs.retry(cur.Load(), a) },
		ConnContext: func(ctx context.Context, ci *quic.ClientInfo) (context.Context, error) {
			return q.hs.admit(ctx, cur.Load(), ci)
		},
	}
	ln, err := q.tr.Listen(tlsConf, qc)
	if err != nil {
		q.tr.Close()
		udp.Close()
		return nil, fmt.Errorf("server: listen %s on %s over QUIC: %w", l.Config.Name, tcp, err)
	}
	q.ln = ln
	logUDPSocket(log, l.Config.Name, udp)
	return q, nil
}

// quicWantBuffer is the receive and send buffer size quic-go asks for on
// a UDP socket (its DesiredReceiveBufferSize and DesiredSendBufferSize):
// less and a burst of packets is dropped before it reads them.
const quicWantBuffer = 7 << 20

// udpFacts is what the kernel gave a UDP socket (see udpSocketFacts).
type udpFacts struct {
	recvBuffer, sendBuffer int  // bytes, as getsockopt reports them
	gso                    bool // UDP_SEGMENT: batches go out in one sendmsg
}

// logUDPSocket says once per QUIC socket what quic-go got from the
// kernel: the buffer sizes (with a warning, and what to raise, when they
// are below what quic-go asks for) and whether segmentation offload and
// ECN are on (quic-go turns them on by itself on Linux 5 and later unless
// QUIC_GO_DISABLE_GSO or QUIC_GO_DISABLE_ECN says otherwise). quic-go's
// own warning goes to the standard log package, which cmd/rustle sends to
// the same logger.
func logUDPSocket(log *slog.Logger, listener string, udp *net.UDPConn) {
	f, ok := udpSocketFacts(udp)
	if !ok {
		return
	}
	gso := f.gso && !envTrue("QUIC_GO_DISABLE_GSO")
	ecn := !envTrue("QUIC_GO_DISABLE_ECN")
	if f.recvBuffer < quicWantBuffer || f.sendBuffer < quicWantBuffer {
		log.Warn("http3: the UDP socket's buffers are smaller than quic-go asks for; bursts of packets may be dropped: raise net.core.rmem_max and net.core.wmem_max to 7340032, or give rustle CAP_NET_ADMIN",
			"listener", listener, "recv_buffer", f.recvBuffer, "send_buffer", f.sendBuffer, "want", quicWantBuffer, "gso", gso, "ecn", ecn)
		return
	}
	log.Info("http3: UDP socket", "listener", listener, "recv_buffer", f.recvBuffer, "send_buffer", f.sendBuffer, "gso", gso, "ecn", ecn)
}

// envTrue reports whether the environment variable name holds a true
// value as strconv.ParseBool reads it, as quic-go reads its switches.
func envTrue(name string) bool {
	v, err := strconv.ParseBool(os.Getenv(name))
	return err == nil && v
}

// stop closes the QUIC listener: no connection is accepted any more;
// those accepted go on until close.
func (q *quicSocket) stop() { q.ln.Close() }

// close closes the socket, and with it every connection on it. It is
// idempotent.
func (q *quicSocket) close() {
	q.once.Do(func() {
		q.ln.Close()
		q.tr.Close()
		q.udp.Close()
		q.hs.stop()
	})
}

// retire stops q, which a reload no longer uses, and closes it once the
// connections it carries have ended.
func (q *quicSocket) retire() {
	q.stop()
	q.mu.Lock()
	q.retired = true
	idle := q.conns == 0
	q.mu.Unlock()
	if idle {
		q.close()
	}
}

// hold counts a connection served on q.
func (q *quicSocket) hold() {
	q.mu.Lock()
	q.conns++
	q.mu.Unlock()
}

// release ends hold's count, closing a retired socket its last
// connection leaves.
func (q *quicSocket) release() {
	q.mu.Lock()
	q.conns--
	last := q.retired && q.conns == 0
	q.mu.Unlock()
	if last {
		q.close()
	}
}

// acceptQUIC accepts QUIC connections on q until its listener is closed,
// handing each, admitted before its handshake (see quicHandshakes.admit),
// to the listener cur holds at that moment.
func (s *Server) acceptQUIC(q *quicSocket, cur *atomic.Pointer[listener]) {
	defer s.accepts.Done()
	for {
		c, err := q.ln.Accept(context.Background())
		if err != nil {
			return
		}
		a := attemptOf(c)
		if a == nil || !a.handOff() {
			// Ended meanwhile (see quicAttempt.expire): its admission is
			// given back already.
			c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeExcessiveLoad), "handshake took too long")
			continue
		}
		l := cur.Load()
		if l.H3 == nil {
			c.CloseWithError(quic.ApplicationErrorCode(http3.ErrCodeNoError), "http3 is off")
			a.policy.Release(a.ip)
			continue
		}
		var client netip.AddrPort
		if ua, ok := c.RemoteAddr().(*net.UDPAddr); ok {
			ap := ua.AddrPort()
			client = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		}
		s.conns.Add(1)
		q.hold()
		go func() {
			defer q.release()
			s.serveQUIC(l, c, client, a.policy)
		}()
	}
}

// serveQUIC serves a QUIC connection in a session of the listener's
// policy that, when it closes, gives the admission back to admitted, the
// policy that admitted it (that of the listener its handshake began on).
func (s *Server) serveQUIC(l *listener, c *quic.Conn, client netip.AddrPort, admitted *gate.Policy) {
	defer s.conns.Done()
	ip := client.Addr()
	sess := l.Policy.NewSession(s.connCtx, client, nil, func() { admitted.Release(ip) })
	l.Policy.Metrics.Accepted()
	l.H3.ServeConn(c, sess)
	l.Policy.Metrics.Closed()
	sess.Close()
}
