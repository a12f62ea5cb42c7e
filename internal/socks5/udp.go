package socks5

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/gate"
)

// UDP relay limits.
const (
	// maxDatagram is the largest UDP payload read, header included.
	maxDatagram = 65535
	// replyRoom is the space kept in front of a datagram read from a
	// destination for the header of its reply to the client: RSV FRAG
	// ATYP, 16 bytes of IPv6 address, a port.
	replyRoom = 3 + 1 + 16 + 2
	// maxPeers bounds the destinations one association remembers as
	// allowed to answer; past it an arbitrary one is forgotten.
	maxPeers = 1024
	// maxNames bounds the host names one association keeps resolved;
	// past it the cache is emptied.
	maxNames = 64
	// nameTTL is how long a resolved host name is reused.
	nameTTL = 30 * time.Second
	// resolveTimeout bounds the lookup of one host name.
	resolveTimeout = 5 * time.Second
)

// errIdle ends an association that relayed nothing for the idle timeout.
var errIdle = errors.New("socks5: udp association idle")

// udpHeader is the header of a datagram from the client: RSV FRAG ATYP
// DST.ADDR DST.PORT.
type udpHeader struct {
	frag byte
	dst  addr
}

// parseUDPHeader parses the header that starts a datagram the client sends
// to its relay. RSV is ignored. A datagram is whole, so errShort means it
// is shorter than its header; errAddrType, errBadHost and errUnspecified
// are as for parseAddr. On success the payload is b[n:].
func parseUDPHeader(b []byte) (udpHeader, int, error) {
	if len(b) < 3 {
		return udpHeader{}, 0, errShort
	}
	dst, n, err := parseAddr(b[3:])
	if err != nil {
		return udpHeader{}, 0, err
	}
	return udpHeader{frag: b[2], dst: dst}, 3 + n, nil
}

// resolved is a cached host name look-up.
type resolved struct {
	ip      netip.Addr
	expires time.Time
}

// association is one UDP ASSOCIATE: a relay socket and what it has
// learned. Every field but conn is owned by the goroutine running relay;
// associate reads them once that goroutine has returned.
type association struct {
	conn     *net.UDPConn
	log      *slog.Logger
	idle     time.Duration               // the idle timeout; 0: none
	is4      bool                        // conn is an IPv4 socket
	client   netip.AddrPort              // the client; port 0 until learned
	peers    map[netip.AddrPort]struct{} // destinations the client sent to
	names    map[string]resolved         // host names looked up
	lastUsed time.Time                   // when a datagram was last relayed
	// buf is the datagram being relayed, borrowed from datagrams for
	// it (where the platform can wait for one without a buffer, see
	// waitDatagram) or for the relay's life.
	buf *[replyRoom + maxDatagram]byte

	// grant is the association's passage through the policy: it
	// permits each datagram's destination. Used by relay's goroutine
	// while it runs.
	grant *gate.Grant

	up   int64 // payload bytes relayed from the client to destinations
	down int64 // payload bytes relayed from destinations to the client
}

// newAssociation binds a relay socket on local (the address the client's
// TCP connection arrived on), port 0, for the client at client; a non-zero
// port in client is the only source port accepted from then on.
func newAssociation(local netip.Addr, client netip.AddrPort, idle time.Duration, log *slog.Logger) (*association, error) {
	network := "udp6"
	if local.Is4() {
		network = "udp4"
	}
	laddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0))
	conn, err := net.ListenUDP(network, laddr)
	if err != nil {
		return nil, fmt.Errorf("socks5: bind udp relay on %s: %w", local, err)
	}
	return &association{
		conn:     conn,
		log:      log,
		idle:     idle,
		is4:      local.Is4(),
		client:   client,
		peers:    make(map[netip.AddrPort]struct{}),
		names:    make(map[string]resolved),
		lastUsed: time.Now(),
	}, nil
}

// addr returns the relay socket's address, for the reply to UDP ASSOCIATE.
func (a *association) addr() netip.AddrPort {
	return a.conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// relay relays datagrams until the relay socket is closed or nothing has
// been relayed for the idle timeout (when it is not 0). ctx bounds host
// name look-ups.
//
// An idle association holds no datagram buffer where the platform lets
// relay wait for a datagram without one (waitDatagram): a buffer is
// borrowed from a shared pool for each datagram and given back once it is
// relayed.
func (a *association) relay(ctx context.Context) error {
	wait := newDatagramWaiter(a.conn)
	defer func() {
		if a.buf != nil {
			datagrams.Put(a.buf)
			a.buf = nil
		}
	}()
	for {
		a.conn.SetReadDeadline(gate.Deadline(a.lastUsed, a.idle)) // none when idle is 0
		if wait != nil {
			if err := wait.Wait(); err != nil {
				return relayErr(err)
			}
		}
		if a.buf == nil {
			a.buf = datagrams.Get().(*[replyRoom + maxDatagram]byte)
		}
		n, src, err := a.conn.ReadFromUDPAddrPort(a.buf[replyRoom:])
		if err != nil {
			return relayErr(err)
		}
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		switch {
		case src.Addr() == a.client.Addr() && (a.client.Port() == 0 || src.Port() == a.client.Port()):
			a.fromClient(ctx, src, n)
		case a.client.Port() != 0 && a.isPeer(src):
			a.toClient(src, n)
		default:
			a.drop("not from the client or a destination it sent to", src)
		}
		if wait != nil {
			datagrams.Put(a.buf)
			a.buf = nil
		}
	}
}

// datagrams holds the buffers associations relay datagrams in.
var datagrams = sync.Pool{New: func() any { return new([replyRoom + maxDatagram]byte) }}

// relayErr returns the error that ends a relay whose read failed with
// err: errIdle for the read deadline.
func relayErr(err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errIdle
	}
	return err
}

func (a *association) isPeer(src netip.AddrPort) bool {
	_, ok := a.peers[src]
	return ok
}

// fromClient relays the n-byte datagram at a.buf[replyRoom:] from the
// client (at src) to its destination.
func (a *association) fromClient(ctx context.Context, src netip.AddrPort, n int) {
	pkt := a.buf[replyRoom : replyRoom+n]
	h, hn, err := parseUDPHeader(pkt)
	if err != nil {
		a.drop("bad header", src)
		return
	}
	if a.client.Port() == 0 {
		a.client = src
	}
	if h.frag != 0 {
		a.drop("fragment", src)
		return
	}
	dst, ok := a.resolve(ctx, h.dst)
	if !ok {
		a.drop("destination not reachable from the relay", src)
		return
	}
	if why := a.refuse(h.dst, dst); why != "" {
		a.drop(why, dst)
		return
	}
	if _, known := a.peers[dst]; !known {
		if len(a.peers) >= maxPeers {
			for p := range a.peers {
				delete(a.peers, p)
				break
			}
		}
		a.peers[dst] = struct{}{}
	}
	if _, err := a.conn.WriteToUDPAddrPort(pkt[hn:], dst); err != nil {
		a.drop("send failed", dst)
		return
	}
	a.up += int64(len(pkt) - hn)
	a.lastUsed = time.Now()
}

// refuse returns why a datagram to dst (requested as req) is refused by
// the access policy or the private-destination guard, or "".
func (a *association) refuse(req addr, dst netip.AddrPort) string {
	if err := a.grant.PermitDatagram(req.host, dst); err != nil {
		return err.Error()
	}
	return ""
}

// toClient relays the n-byte datagram at a.buf[replyRoom:] from the
// destination src to the client, behind a header naming src.
func (a *association) toClient(src netip.AddrPort, n int) {
	var hdr [replyRoom]byte
	h := appendAddrPort(append(hdr[:0], 0, 0, 0), src)
	start := replyRoom - len(h)
	copy(a.buf[start:], h)
	if _, err := a.conn.WriteToUDPAddrPort(a.buf[start:replyRoom+n], a.client); err != nil {
		a.drop("send to client failed", src)
		return
	}
	a.down += int64(n)
	a.lastUsed = time.Now()
}

// resolve returns the address to send to for dst, looking host names up
// (in the relay socket's address family) through a small cache. It reports
// false for an address the relay socket cannot reach.
func (a *association) resolve(ctx context.Context, dst addr) (netip.AddrPort, bool) {
	ip := dst.ip
	if dst.host != "" {
		now := time.Now()
		if r, ok := a.names[dst.host]; ok && now.Before(r.expires) {
			ip = r.ip
		} else {
			network := "ip6"
			if a.is4 {
				network = "ip4"
			}
			lctx, cancel := context.WithTimeout(ctx, resolveTimeout)
			ips, err := a.grant.Resolver().LookupNetIP(lctx, network, dst.host)
			cancel()
			if err != nil || len(ips) == 0 {
				return netip.AddrPort{}, false
			}
			ip = ips[0].Unmap()
			if len(a.names) >= maxNames {
				clear(a.names)
			}
			a.names[dst.host] = resolved{ip: ip, expires: now.Add(nameTTL)}
		}
	}
	if ip.Is4() != a.is4 || ip.IsUnspecified() {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip, dst.port), true
}

// drop logs a dropped datagram at debug level.
func (a *association) drop(why string, peer netip.AddrPort) {
	if a.log.Enabled(context.Background(), slog.LevelDebug) {
		a.log.LogAttrs(context.Background(), slog.LevelDebug, "socks5: udp datagram dropped",
			slog.String("reason", why), slog.String("peer", peer.String()))
	}
}
