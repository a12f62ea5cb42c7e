package server

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/rustle-proxy/rustle/internal/config"
)

// silentConn is the UDP socket of a QUIC client that never answers the
// server: it sends what quic-go writes until it is muted (a muted write
// is dropped), and delivers nothing it receives to quic-go, which only
// ever sends its Initials (the ClientHello, and their retransmissions).
// It counts the bytes both ways and reads the long headers of what the
// server sends, telling apart the client connections the server ran a
// TLS handshake for (it sent a Handshake packet), those it sent a Retry
// and those it answered at all. The interface alone is embedded, so
// that quic-go sees a plain net.PacketConn and reads it with ReadFrom.
type silentConn struct {
	net.PacketConn

	// muteOnAnswer mutes the socket once the server has sent a Retry or
	// a Handshake packet: its first flight got the client's whole
	// ClientHello, and the client is silent from then on.
	muteOnAnswer bool

	mu        sync.Mutex
	muted     bool            // guarded by mu
	sent      int             // bytes written to the server; guarded by mu
	received  int             // bytes received from the server; guarded by mu
	initials  map[string]bool // the client connections that sent an Initial, by the server's DCID; guarded by mu
	answered  map[string]bool // the client connections the server sent anything, by the client's connection ID; guarded by mu
	handshook map[string]bool // those it sent a Handshake packet; guarded by mu
	retried   map[string]bool // those it sent a Retry; guarded by mu
	stats     map[byte]int    // the server's long-header packets by type; guarded by mu
	changed   chan struct{}   // closed and replaced at each datagram received; guarded by mu
}

// QUIC v1 long-header packet types (RFC 9000 §17.2).
const (
	quicInitial   = 0
	quicHandshake = 2
	quicRetry     = 3
)

// newSilentConn returns a silentConn on a UDP socket bound to from
// ("127.0.0.2:0").
func newSilentConn(t *testing.T, from string) *silentConn {
	t.Helper()
	la, err := net.ResolveUDPAddr("udp", from)
	if err != nil {
		t.Fatalf("resolve %s: %v", from, err)
	}
	udp, err := net.ListenUDP("udp", la)
	if err != nil {
		t.Fatalf("listen on %s: %v", from, err)
	}
	return &silentConn{PacketConn: udp, initials: map[string]bool{}, answered: map[string]bool{},
		handshook: map[string]bool{}, retried: map[string]bool{}, stats: map[byte]int{}, changed: make(chan struct{})}
}

// WriteTo sends p unless c is muted, counting the client connection of
// an Initial in it.
func (c *silentConn) WriteTo(p []byte, addr net.Addr) (int, error) {
	c.mu.Lock()
	if c.muted {
		c.mu.Unlock()
		return len(p), nil
	}
	c.sent += len(p)
	for _, h := range longHeaders(p) {
		if h.typ == quicInitial {
			c.initials[string(h.dcid)] = true
		}
	}
	c.mu.Unlock()
	return c.PacketConn.WriteTo(p, addr)
}

// SetReadBuffer and SetWriteBuffer let quic-go size the socket's
// buffers, as it does a *net.UDPConn's.
func (c *silentConn) SetReadBuffer(n int) error {
	return c.PacketConn.(*net.UDPConn).SetReadBuffer(n)
}

func (c *silentConn) SetWriteBuffer(n int) error {
	return c.PacketConn.(*net.UDPConn).SetWriteBuffer(n)
}

// ReadFrom reads the socket until it fails, recording each datagram and
// handing none to quic-go.
func (c *silentConn) ReadFrom(p []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(p)
		if err != nil {
			return n, addr, err
		}
		c.record(p[:n])
	}
}

func (c *silentConn) record(d []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.received += len(d)
	for _, h := range longHeaders(d) {
		c.stats[h.typ]++
		c.answered[string(h.dcid)] = true
		switch h.typ {
		case quicHandshake:
			c.handshook[string(h.dcid)] = true
			c.muted = c.muted || c.muteOnAnswer
		case quicRetry:
			c.retried[string(h.dcid)] = true
			c.muted = c.muted || c.muteOnAnswer
		}
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

// mute drops whatever the client writes from now on.
func (c *silentConn) mute() {
	c.mu.Lock()
	c.muted = true
	c.mu.Unlock()
}

// counts returns the client connections that sent an Initial, those
// the server answered, ran a handshake for and sent a Retry, and the
// bytes sent and received.
func (c *silentConn) counts() (initials, answered, handshook, retried, sent, received int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.initials), len(c.answered), len(c.handshook), len(c.retried), c.sent, c.received
}

// longHeader is what silentConn reads of a QUIC long header.
type longHeader struct {
	typ  byte
	dcid []byte
}

// longHeaders returns the long headers of the QUIC packets coalesced in
// datagram d, up to the first it cannot read (a short header, a
// Version Negotiation packet, a truncated one).
func longHeaders(d []byte) []longHeader {
	var hs []longHeader
	for len(d) > 7 && d[0]&0x80 != 0 {
		if d[1]|d[2]|d[3]|d[4] == 0 { // Version Negotiation
			return hs
		}
		h := longHeader{typ: d[0] >> 4 & 3}
		i := 5
		dl := int(d[i])
		if i+1+dl >= len(d) {
			return hs
		}
		h.dcid = d[i+1 : i+1+dl]
		i += 1 + dl
		i += 1 + int(d[i]) // the source connection ID
		hs = append(hs, h)
		if h.typ == quicRetry || i >= len(d) {
			return hs
		}
		if h.typ == quicInitial {
			tl, n := quicVarint(d[i:])
			if n == 0 {
				return hs
			}
			i += n + int(tl)
		}
		if i >= len(d) {
			return hs
		}
		l, n := quicVarint(d[i:])
		if n == 0 || i+n+int(l) > len(d) {
			return hs
		}
		d = d[i+n+int(l):]
	}
	return hs
}

// quicVarint decodes the variable-length integer at the start of b
// (RFC 9000 §16), returning it and its length, 0 when b is too short.
func quicVarint(b []byte) (uint64, int) {
	if len(b) == 0 {
		return 0, 0
	}
	n := 1 << (b[0] >> 6)
	if len(b) < n {
		return 0, 0
	}
	v := uint64(b[0] & 0x3f)
	for _, x := range b[1:n] {
		v = v<<8 | uint64(x)
	}
	return v, n
}

// floodInitials starts n QUIC connections to addr from c's socket, which
// never answer the server (c is not muted: quic-go retransmits their
// Initials until the test mutes c), and waits until each has sent its
// first Initial. The returned function cancels the dials.
func floodInitials(t *testing.T, c *silentConn, addr string, n int) (stop func()) {
	t.Helper()
	ra, err := net.ResolveUDPAddr("udp", addr)
	if err != nil {
		t.Fatalf("resolve %s: %v", addr, err)
	}
	tr := &quic.Transport{Conn: c}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		c.mute()
		cancel()
		wg.Wait()
		tr.Close()
		c.PacketConn.Close()
	})
	tlsConf := &tls.Config{InsecureSkipVerify: true, NextProtos: []string{http3.NextProtoH3}}
	for range n {
		wg.Go(func() {
			if qc, err := tr.Dial(ctx, ra, tlsConf, &quic.Config{HandshakeIdleTimeout: time.Minute}); err == nil {
				qc.CloseWithError(0, "")
			}
		})
	}
	waitCounts(t, c, "every flood connection's first Initial sent", func(initials, _, _, _ int) bool { return initials >= n })
	return cancel
}

// waitCounts waits until cond holds of c's counts: the connections that
// sent an Initial, those answered, those the server ran a handshake
// for and those it sent a Retry.
func waitCounts(t *testing.T, c *silentConn, what string, cond func(initials, answered, handshook, retried int) bool) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		c.mu.Lock()
		ch := c.changed
		c.mu.Unlock()
		i, a, h, r, _, _ := c.counts()
		if cond(i, a, h, r) {
			return
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Millisecond): // writes change the counts too
		case <-deadline:
			t.Fatalf("timed out waiting for %s: %d connections sent an Initial, %d answered, %d handshakes run, %d Retries",
				what, i, a, h, r)
		}
	}
}

// TestQUICHandshakeFlood sends 200 Initials, each a connection of its
// own, from one address that never answers, and checks that rustle runs
// the TLS handshake for few of them (the address's share of the
// unvalidated handshakes) and sends the rest a Retry, holding no state
// for them; that a client from another address is served meanwhile;
// and that the half-open handshakes are given up after
// timeouts.quic_handshake.
func TestQUICHandshakeFlood(t *testing.T) {
	const n = 200
	tl, roots := proxyCerts(t)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	t.Cleanup(origin.Close)
	s, addrs := startListeners(t, 30*time.Second,
		config.Listener{Name: "tls", Address: "127.0.0.1:0", Protocol: "https", TLS: tl, HTTP3: true})

	flood := newSilentConn(t, "127.0.0.2:0")
	start := time.Now()
	floodInitials(t, flood, addrs[0], n)
	// On a loaded machine the kernel drops some of the Initials (the
	// flood fills the sockets' buffers: 18 of 200 were lost once under
	// CI), whose retransmissions come seconds later: the answers to half
	// the connections show what the server does with the flood.
	waitCounts(t, flood, "an answer to half the flood connections", func(_, answered, _, _ int) bool { return answered >= n/2 })
	_, answered, handshook, retried, _, _ := flood.counts()
	// The default thresholds: a quarter of max_tls_handshakes (64)
	// unvalidated handshakes on the listener, an eighth of that (8) per
	// address, each held until the handshake is given up 5 s after the
	// client's last packet. On a loaded machine the flood can outlast
	// that, and each 5 s it lasts frees the address's 8 slots once more.
	want := 8 * (1 + int(time.Since(start)/(5*time.Second)))
	if handshook > want || retried < answered-want {
		t.Errorf("%d unanswered Initials from one address in %v, %d answered: %d TLS handshakes run, %d Retries; want at most %d handshakes, the rest Retries",
			n, time.Since(start).Round(time.Millisecond), answered, handshook, retried, want)
	}

	// A client from another address is served during the flood.
	_, cc := dialH3(t, addrs[0], roots)
	if code, body, err := h3Get(t, cc, origin.URL+"/", basicValue("alice", "pw")); err != nil || code != 200 || body != "ok" {
		t.Fatalf("GET over h3 during the flood: %d %q %v", code, body, err)
	}

	// The half-open handshakes are given up: with the default
	// timeouts.quic_handshake (10 s, 5 s without a packet) none is left
	// in progress well within 15 s of the flood's last packet. The flood
	// is muted first: its clients, answered by nothing, retransmit their
	// Initials for a minute, and a retransmission that comes after the
	// server gave its connection up starts a handshake again (a loaded
	// run found 8 still in progress 15 s after the GET).
	flood.mute()
	s.mu.Lock()
	q := s.gen.listeners[0].quic
	s.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for q.hs.inProgress() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d unvalidated handshakes still in progress 15 s after the flood; want 0", q.hs.inProgress())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
