package route

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Loop detection. A parent whose address leads back to rustle (a name
// that resolves to one of its own listeners, two rustles that are each
// other's parent) would turn one request into a chain of connections
// that ends only when the descriptors run out. Every message rustle
// sends a parent names the rustle in a Via element, "1.1
// rustle-<token>", whatever the via setting says; a request that arrives
// naming it has come back, and is refused (508). A SOCKS5 handshake has
// no header: a connection rustle accepts that is the other end of one of
// its own parent handshakes in progress has come back too (see
// Returning).

// Instance is one rustle's identity in loop detection: a token,
// "rustle-" and 16 hex digits from crypto/rand, that says nothing but
// that two messages passed the same rustle. A server makes one at start
// and keeps it across reloads; every listener's policy and every dial
// through a parent use it. The nil *Instance is the process's default
// one. An Instance is immutable and safe for concurrent use.
type Instance struct {
	token string
	// The Via field lines that name it, one per version of the message
	// as received (RFC 9110 §7.6.3), made once.
	via11, via2, via3 string
}

// NewInstance returns an Instance with a new random token.
func NewInstance() *Instance {
	var b [8]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	tok := "rustle-" + hex.EncodeToString(b[:])
	return &Instance{token: tok, via11: "Via: 1.1 " + tok + "\r\n", via2: "Via: 2 " + tok + "\r\n", via3: "Via: 3 " + tok + "\r\n"}
}

// defaultInstance is the process's Instance, what a nil *Instance
// stands for.
var defaultInstance = NewInstance()

func (in *Instance) self() *Instance {
	if in == nil {
		return defaultInstance
	}
	return in
}

// Token returns the instance's token, "rustle-" and 16 hex digits.
func (in *Instance) Token() string { return in.self().token }

// ViaLine returns the Via field line, CRLF-terminated, that names the
// instance for a message received as HTTP/major ("1.1" for 1, "2", "3"):
// what every request rustle sends a parent carries. It is made once and
// allocates nothing.
func (in *Instance) ViaLine(major int) string {
	in = in.self()
	switch major {
	case 2:
		return in.via2
	case 3:
		return in.via3
	}
	return in.via11
}

// ViaElement returns the Via element ("1.1 rustle-<token>") that names
// the instance, for a message received as HTTP/major.
func (in *Instance) ViaElement(major int) string {
	l := in.ViaLine(major)
	return l[len("Via: ") : len(l)-2]
}

// NamesSelf reports whether v, the value of a Via field (a list of
// elements "protocol received-by [comment]"), has an element whose
// received-by is in's token: the message passed that rustle before. It
// allocates nothing.
func NamesSelf[T ~string | ~[]byte](in *Instance, v T) bool {
	tok := in.self().token
	n := len(tok)
	for i := 0; i+n <= len(v); i++ {
		if v[i] != 'r' || string(v[i:i+n]) != tok {
			continue
		}
		// The token is the whole received-by: after a protocol and
		// whitespace, and followed by the end, whitespace (a comment)
		// or the next element.
		if i == 0 || (v[i-1] != ' ' && v[i-1] != '\t') {
			continue
		}
		if j := i + n; j == len(v) || v[j] == ' ' || v[j] == '\t' || v[j] == ',' {
			return true
		}
	}
	return false
}

// handshakes holds the connections to parents whose handshake (CONNECT,
// SOCKS5, UDP ASSOCIATE) is in progress, by their local and remote
// addresses: a connection that came back to rustle is accepted with them
// the other way round.
var handshakes struct {
	n  atomic.Int32 // len(m), read without mu
	mu sync.Mutex
	m  map[addrPair]*Instance // guarded by mu: whose handshake
}

// addrPair is a TCP connection's two ends, unmapped.
type addrPair struct{ local, remote netip.AddrPort }

// noteHandshake records c, a connection in's rustle makes to a parent
// about to be asked for a tunnel, until the returned function is called,
// once the parent has answered.
func noteHandshake(in *Instance, c net.Conn) func() {
	k := addrPair{addrPortOf(c.LocalAddr()), addrPortOf(c.RemoteAddr())}
	if !k.local.IsValid() || !k.remote.IsValid() {
		return func() {}
	}
	h := &handshakes
	h.mu.Lock()
	if h.m == nil {
		h.m = make(map[addrPair]*Instance)
	}
	h.m[k] = in.self() // a 4-tuple is one open connection's
	h.n.Add(1)
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.m, k)
		h.n.Add(-1)
		h.mu.Unlock()
	}
}

// Returning reports whether c, a client connection in's rustle
// accepted, is the other end of a connection that rustle is making to a
// parent whose handshake is in progress (its peer is that connection's
// local address and its local address the one dialed): the parent's
// address led back to it. Both ends must match: a port of the loopback
// address may be the local port of several connections to different
// destinations. It costs one atomic load while no handshake is in
// progress.
func Returning(in *Instance, c net.Conn) bool {
	h := &handshakes
	if h.n.Load() == 0 || c == nil {
		return false
	}
	k := addrPair{local: addrPortOf(c.RemoteAddr()), remote: addrPortOf(c.LocalAddr())}
	h.mu.Lock()
	who, ok := h.m[k]
	h.mu.Unlock()
	return ok && who == in.self()
}

// addrPortOf returns a TCP address, unmapped; the zero AddrPort for
// another kind.
func addrPortOf(a net.Addr) netip.AddrPort {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.AddrPort{}
	}
	ap := ta.AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
