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
	"sync/atomic"
	"time"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/route"
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
	// parentRetry is how long the datagrams meant for a parent that
	// could not be associated with (down, or refusing UDP ASSOCIATE) are
	// dropped before the association is tried again.
	parentRetry = 10 * time.Second
)

// errIdle ends an association that relayed nothing for the idle timeout.
var errIdle = errors.New("socks5: udp association idle")

// errQuota ends an association whose user's byte quota is spent.
var errQuota = errors.New("socks5: udp association ended: the user's byte quota is spent")

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

	// parents are the associations held with SOCKS5 parents for the
	// datagrams whose route goes through them, by parent; nil until the
	// first. Their readers (wg) relay the parents' datagrams to the
	// client.
	parents map[*route.Parent]*parentAssoc
	wg      sync.WaitGroup

	up       int64        // payload bytes relayed from the client to destinations
	down     atomic.Int64 // payload bytes relayed from destinations to the client
	lastDown atomic.Int64 // unix nanoseconds of the last datagram a parent relayed to the client
	spent    atomic.Bool  // the user's byte quota is spent: the relay socket is closed, the association ends
}

// parentAssoc is a UDP association held with a SOCKS5 parent: its
// control connection, a UDP socket connected to its relay, or why it
// could not be made.
type parentAssoc struct {
	assoc *route.Association // nil when it failed
	conn  *net.UDPConn       // connected to assoc.Relay
	err   error              // why it could not be made; then until retry
	retry time.Time
	dead  atomic.Bool // the control connection or the socket ended
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

// relay relays datagrams until the relay socket is closed, nothing has
// been relayed for the idle timeout (when it is not 0), or the user's
// byte quota is spent (errQuota). ctx bounds host name look-ups and a
// paced user's waits. Every datagram relayed, either way, goes through
// the grant's PaceDatagram first (see pass).
//
// An idle association holds no datagram buffer where the platform lets
// relay wait for a datagram without one (waitDatagram): a buffer is
// borrowed from a shared pool for each datagram and given back once it is
// relayed.
func (a *association) relay(ctx context.Context) error {
	wait := newDatagramWaiter(a.conn)
	defer func() {
		a.closeParents()
		if a.buf != nil {
			datagrams.Put(a.buf)
			a.buf = nil
		}
	}()
	for {
		a.conn.SetReadDeadline(gate.Deadline(a.last(), a.idle)) // none when idle is 0
		if wait != nil {
			if err := wait.Wait(); err != nil {
				if a.active(err) {
					continue
				}
				return a.relayErr(err)
			}
		}
		if a.buf == nil {
			a.buf = datagrams.Get().(*[replyRoom + maxDatagram]byte)
		}
		n, src, err := a.conn.ReadFromUDPAddrPort(a.buf[replyRoom:])
		if err != nil {
			if a.active(err) {
				continue
			}
			return a.relayErr(err)
		}
		src = netip.AddrPortFrom(src.Addr().Unmap(), src.Port())
		switch {
		case src.Addr() == a.client.Addr() && (a.client.Port() == 0 || src.Port() == a.client.Port()):
			a.fromClient(ctx, src, n)
		case a.client.Port() != 0 && a.isPeer(src):
			a.toClient(ctx, src, n)
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
// err: errQuota once pass closed the socket, errIdle for the read
// deadline.
func (a *association) relayErr(err error) error {
	switch {
	case a.spent.Load():
		return errQuota
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errIdle
	}
	return err
}

// pass reports whether a datagram of n payload bytes may be relayed now,
// after a paced user's wait (see gate.Grant.PaceDatagram); false once the
// user's byte quota is spent: pass then closes the relay socket, which
// ends the association (the relay returns errQuota, and associate closes
// the control connection). It is called from the relay's goroutine and
// the parents' readers.
func (a *association) pass(ctx context.Context, n int) bool {
	if a.grant.PaceDatagram(ctx, n) {
		return true
	}
	if !a.spent.Swap(true) {
		a.conn.Close()
	}
	return false
}

// last returns when a datagram was last relayed, either way, through a
// parent or not.
func (a *association) last() time.Time {
	if d := a.lastDown.Load(); d > a.lastUsed.UnixNano() {
		return time.Unix(0, d)
	}
	return a.lastUsed
}

// active reports whether a read that failed with err only reached the
// idle deadline while a parent's datagrams kept the association busy.
func (a *association) active(err error) bool {
	return a.idle > 0 && errors.Is(err, os.ErrDeadlineExceeded) && time.Since(a.last()) < a.idle
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
	parent, err := a.grant.DatagramParent(h.dst.host, h.dst.ip, h.dst.port)
	if err != nil {
		a.drop(err.Error(), src)
		return
	}
	if parent != nil {
		a.toParent(ctx, parent, h, hn, n)
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
	if !a.pass(ctx, len(pkt)-hn) {
		return
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
func (a *association) toClient(ctx context.Context, src netip.AddrPort, n int) {
	if !a.pass(ctx, n) {
		return
	}
	var hdr [replyRoom]byte
	h := appendAddrPort(append(hdr[:0], 0, 0, 0), src)
	start := replyRoom - len(h)
	copy(a.buf[start:], h)
	if _, err := a.conn.WriteToUDPAddrPort(a.buf[start:replyRoom+n], a.client); err != nil {
		a.drop("send to client failed", src)
		return
	}
	a.down.Add(int64(n))
	a.lastUsed = time.Now()
}

// resolve returns the address to send to for dst, looking host names up
// (in the relay socket's address family) through a small cache. It reports
// false for an address the relay socket cannot reach.
func (a *association) resolve(ctx context.Context, dst addr) (netip.AddrPort, bool) {
	network := "ip6"
	if a.is4 {
		network = "ip4"
	}
	ap, ok := a.lookup(ctx, dst, network)
	if !ok || ap.Addr().Is4() != a.is4 {
		return netip.AddrPort{}, false
	}
	return ap, true
}

// lookup returns dst's address, looking a host name up in network (ip,
// ip4 or ip6) through the cache; false when it does not resolve or is
// unspecified.
func (a *association) lookup(ctx context.Context, dst addr, network string) (netip.AddrPort, bool) {
	ip := dst.ip
	if dst.host != "" {
		now := time.Now()
		if r, ok := a.names[dst.host]; ok && now.Before(r.expires) && (network == "ip" || r.ip.Is4() == (network == "ip4")) {
			ip = r.ip
		} else {
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
	if !ip.IsValid() || ip.IsUnspecified() {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip, dst.port), true
}

// toParent relays the n-byte datagram at a.buf[replyRoom:], whose header
// (hn bytes) is h, through parent: its destination checked as the
// parent will be given it (an address rustle resolved for a socks5
// parent, the client's address, or a name a socks5h parent resolves),
// sent with the RFC 1928 header to the parent's relay on the association
// held with it, made on the first datagram.
func (a *association) toParent(ctx context.Context, parent *route.Parent, h udpHeader, hn, n int) {
	start := replyRoom // the datagram to send starts here, header and all
	switch {
	case h.dst.host == "" || parent.ResolvesLocally():
		dst, ok := a.lookup(ctx, h.dst, "ip")
		if !ok {
			a.drop("destination does not resolve", netip.AddrPort{})
			return
		}
		if why := a.refuse(h.dst, dst); why != "" {
			a.drop(why, dst)
			return
		}
		if h.dst.host != "" {
			// The parent gets the address rustle resolved and checked.
			var hdr [replyRoom]byte
			nh := appendAddrPort(append(hdr[:0], 0, 0, 0), dst)
			start = replyRoom + hn - len(nh)
			copy(a.buf[start:], nh)
		}
	default:
		if err := a.grant.PermitDatagramName(h.dst.host, h.dst.port); err != nil {
			a.drop(err.Error(), netip.AddrPort{})
			return
		}
	}
	pa := a.parentAssoc(ctx, parent)
	if pa.err != nil {
		a.drop(pa.err.Error(), netip.AddrPort{})
		return
	}
	if !a.pass(ctx, n-hn) {
		return
	}
	if _, err := pa.conn.Write(a.buf[start : replyRoom+n]); err != nil {
		pa.dead.Store(true)
		a.drop("send to the parent failed", pa.assoc.Relay)
		return
	}
	a.up += int64(n - hn)
	a.lastUsed = time.Now()
}

// parentAssoc returns the association held with parent, making it (or
// making it again once the one held ended, or parentRetry after it
// failed).
func (a *association) parentAssoc(ctx context.Context, parent *route.Parent) *parentAssoc {
	now := time.Now()
	pa := a.parents[parent]
	switch {
	case pa == nil:
	case pa.err != nil && now.Before(pa.retry):
		return pa
	case pa.err == nil && !pa.dead.Load():
		return pa
	case pa.err == nil:
		pa.close()
	}
	if a.parents == nil {
		a.parents = make(map[*route.Parent]*parentAssoc)
	}
	pa = &parentAssoc{}
	a.parents[parent] = pa
	as, err := a.grant.AssociateParent(ctx, parent)
	if err == nil {
		var conn *net.UDPConn
		conn, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(as.Relay))
		if err != nil {
			as.Control.Close()
			err = fmt.Errorf("socks5: udp socket to parent %s's relay %s: %w", parent.Name(), as.Relay, err)
		} else {
			pa.assoc, pa.conn = as, conn
		}
	}
	if err != nil {
		pa.err, pa.retry = err, now.Add(parentRetry)
		return pa
	}
	client := a.client
	a.wg.Go(func() { a.fromParent(ctx, pa, client) })
	a.wg.Go(func() {
		// The parent ends the association by closing its control
		// connection; nothing is expected on it.
		var b [64]byte
		for {
			if _, err := as.Control.Read(b[:]); err != nil {
				break
			}
		}
		pa.dead.Store(true)
		pa.conn.Close()
	})
	return pa
}

// fromParent relays the datagrams the parent's relay sends on pa to the
// client, as they come (their header names their source), until pa's
// socket is closed or the user's quota is spent. It runs on its own
// goroutine, with its own buffer.
func (a *association) fromParent(ctx context.Context, pa *parentAssoc, client netip.AddrPort) {
	buf := make([]byte, maxDatagram)
	for {
		n, err := pa.conn.Read(buf)
		if err != nil {
			pa.dead.Store(true)
			return
		}
		h, hn, err := parseUDPHeader(buf[:n])
		if err != nil || h.frag != 0 {
			a.drop("bad header from the parent", pa.assoc.Relay)
			continue
		}
		if !a.pass(ctx, n-hn) {
			pa.dead.Store(true)
			return
		}
		buf[0], buf[1] = 0, 0
		if _, err := a.conn.WriteToUDPAddrPort(buf[:n], client); err != nil {
			a.drop("send to client failed", pa.assoc.Relay)
			continue
		}
		a.down.Add(int64(n - hn))
		a.lastDown.Store(time.Now().UnixNano())
	}
}

// close ends pa at the parent and stops its goroutines.
func (pa *parentAssoc) close() {
	if pa.assoc != nil {
		pa.assoc.Control.Close()
		pa.conn.Close()
	}
}

// closeParents ends the associations held with parents and waits for
// their goroutines.
func (a *association) closeParents() {
	for _, pa := range a.parents {
		pa.close()
	}
	a.wg.Wait()
}

// drop logs a dropped datagram at debug level.
func (a *association) drop(why string, peer netip.AddrPort) {
	if a.log.Enabled(context.Background(), slog.LevelDebug) {
		a.log.LogAttrs(context.Background(), slog.LevelDebug, "socks5: udp datagram dropped",
			slog.String("reason", why), slog.String("peer", peer.String()))
	}
}
