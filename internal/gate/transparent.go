package gate

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/dialer"
)

// Transparent requests (see Request.Original): a connection the kernel
// redirected to a transparent listener is decided, routed and dialled by
// its original destination, which its client chose, never by a name it
// gave (the Host field, the TLS server name), which it could have made
// up: the name is what rules and routes on names match, and what the log
// shows, beside the address; the connection goes to the address.

// pin makes ar, a transparent request's, decide by its original
// destination: Addr is its address, and a Host that is an IP literal of
// another address is dropped (the rules would otherwise match that
// address); a name stays, for the rules on names.
func (g *Grant) pin(ar *acl.Request) {
	ar.Addr, ar.Port = g.original.Addr(), g.original.Port()
	g.sni = ar.SNI // logged though the request be refused before CheckHello
	if ip, ok, _ := dialer.ParseHost(ar.Host); ok && ip.WithZone("").Unmap() != ar.Addr {
		ar.Host = ""
	}
}

// Original returns the pinned destination of a transparent request; the
// zero AddrPort for any other.
func (g *Grant) Original() netip.AddrPort { return g.original }

// ownDials are the ends (local and remote addresses) of the upstream
// connections rustle dialled directly for transparent requests, from
// the dial until the request, or the tunnel it became, ends (the
// grant's end, or the engine's: a tunnel on the splice engine holds a
// duplicate of the socket, its net.TCPConn closed). A redirect rule
// that catches rustle's own traffic (no egress.mark, or rules that do
// not skip it) sends such a connection back to a transparent listener:
// its client address is the local end, its original destination the
// remote one, and it is refused as a loop (see Session.ComesBack) rather
// than dialled again, and again. Until the connection ends no other can
// have those two ends, so a client whose port the kernel gave an ended
// one's before is never taken for it.
var ownDials struct {
	mu sync.Mutex
	m  map[addrPair]struct{} // guarded by mu
}

// addrPair is a connection's two ends.
type addrPair struct{ local, remote netip.AddrPort }

// noteOwnDial remembers c, an upstream connection dialled for a
// transparent request, and returns its ends for forgetOwnDial (nil when
// it has none).
func noteOwnDial(c *net.TCPConn) *addrPair {
	k := &addrPair{local: localAddrPort(c), remote: remoteAddrPort(c)}
	if !k.local.IsValid() {
		return nil
	}
	d := &ownDials
	d.mu.Lock()
	if d.m == nil {
		d.m = make(map[addrPair]struct{})
	}
	d.m[*k] = struct{}{}
	d.mu.Unlock()
	return k
}

// forgetOwnDial forgets k, what noteOwnDial returned, once its
// connection has ended; nil is none.
func forgetOwnDial(k *addrPair) {
	if k == nil {
		return
	}
	d := &ownDials
	d.mu.Lock()
	delete(d.m, *k)
	d.mu.Unlock()
}

// ComesBack reports whether the session's connection, to a transparent
// listener with the original destination orig, is one of rustle's own
// upstream connections, not ended, redirected back to it: a loop, which
// the front-end refuses (and warns of: the redirect rules do not skip
// rustle's traffic).
func (s *Session) ComesBack(orig netip.AddrPort) bool {
	k := addrPair{local: s.client, remote: netip.AddrPortFrom(orig.Addr().Unmap(), orig.Port())}
	k.local = netip.AddrPortFrom(k.local.Addr().Unmap(), k.local.Port())
	d := &ownDials
	d.mu.Lock()
	_, ok := d.m[k]
	d.mu.Unlock()
	return ok
}

// RefuseLoop logs and counts r, a transparent connection that
// ComesBack, refused with Loop before anything was answered: g is
// finished on return. The warning says what to fix.
func (s *Session) RefuseLoop(r *Request, g *Grant) {
	s.Observe(r, g)
	g.setDest(r)
	g.refuse(Loop)
	g.AnswerNothing()
	s.warnTransparentLoop(g)
	g.Finish(0, 0)
}

// warnTransparentLoop warns, at most once every loopWarnEvery, of a
// transparent connection that was one of rustle's own.
func (s *Session) warnTransparentLoop(g *Grant) {
	n, warn := loopWarn.tick(time.Now())
	if !warn {
		return
	}
	s.p.logger().Warn("loop detected: rustle's own upstream connection was redirected back to a transparent listener; "+
		"set egress.mark and make the redirect rules skip it (docs/operations.md, Transparent interception)",
		"client", s.client.String(), "orig_dst", g.original.String(), "refused", n)
}
