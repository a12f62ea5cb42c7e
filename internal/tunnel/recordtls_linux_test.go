package tunnel

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// TestRecordConnTLSParker checks a TLS connection inside another
// (RecordConnTLS, an intercepted tunnel that came by a CONNECT on the
// https port) and its Parker (RecordParker), which waits on the outer
// connection's socket: the Parker does not wait while bytes wait above
// the socket, the outer connection's plaintext left by a reader before
// (not known to be drained until read once) or inner records that came
// in one outer record behind the one read; it waits, and wakes (Notify,
// WaitRead) once the client sends, when nothing is held; and no buffer
// is held once the bytes are read.
func TestRecordConnTLSParker(t *testing.T) {
	serverConf, clientConf := tlsConfs(t, 0)
	client, server, _ := tlsHandshake(t, newListener(t), serverConf, clientConf, false)
	t.Cleanup(func() { client.Close(); server.Close() })
	deadline := time.Now().Add(20 * time.Second)
	server.SetDeadline(deadline)
	under := server.NetConn().(*recordConn)

	// The inner TLS connection's client writes through a connection
	// that can send several writes in one (one outer record): its
	// ClientHello goes behind "abc" (a CONNECT's place), which the outer
	// connection's reader reads: the hello stays in crypto/tls, above
	// the empty socket.
	hc := &holdConn{Conn: client, hold: true, buf: []byte("abc"), held: make(chan struct{}, 1)}
	inClient := tls.Client(hc, clientConf)
	errc := make(chan error, 2)
	go func() { errc <- inClient.Handshake() }()
	<-hc.held
	if err := hc.flush(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := server.Read(buf[:3]); string(buf[:n]) != "abc" || err != nil {
		t.Fatalf("outer read = %q, %v; want \"abc\"", buf[:n], err)
	}
	nc := RecordConnTLS(server, nil)
	if nc == nil {
		t.Fatal("RecordConnTLS: nil for a TLS connection over RecordConn")
	}
	nested := nc.(*recordConn)
	p, ok := RecordParker(nc)
	if !ok {
		t.Fatal("RecordParker: not a RecordConn")
	}
	ready := func(want bool, when string) {
		t.Helper()
		if got, err := p.Ready(); got != want || err != nil {
			t.Fatalf("%s: Ready = %v, %v; want %v", when, got, err, want)
		}
	}
	ready(true, "the outer connection holding the inner ClientHello")
	inServer := tls.Server(nc, serverConf)
	go func() { errc <- inServer.Handshake() }()
	if err := errors.Join(<-errc, <-errc); err != nil {
		t.Fatalf("inner TLS handshake: %v", err)
	}
	ready(false, "the handshake done")
	hc.mu.Lock()
	hc.hold = true
	hc.mu.Unlock()
	inClient.Write([]byte("one"))
	inClient.Write([]byte("two"))
	if err := hc.flush(); err != nil {
		t.Fatal(err)
	}
	read := func(want string) {
		t.Helper()
		if n, err := inServer.Read(buf); string(buf[:n]) != want || err != nil {
			t.Fatalf("inner read = %q, %v; want %q", buf[:n], err, want)
		}
	}
	read("one")
	ready(true, "an inner record read ahead behind the one read")
	read("two")
	ready(false, "both inner records read")
	if nested.ahead != nil || under.ahead != nil {
		t.Fatal("a read-ahead buffer is held with nothing to read")
	}

	woke := make(chan error, 1)
	n, ok := p.Notify(deadline, func(err error) { woke <- err })
	if !ok {
		t.Fatal("Notify reported no wait on Linux")
	}
	select {
	case err := <-woke:
		t.Fatalf("Notify called with %v before the client sent", err)
	case <-time.After(50 * time.Millisecond):
	}
	inClient.Write([]byte("three"))
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("Notify called with %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		n.Wake()
		t.Fatal("Notify not called once the client sent")
	}
	read("three")

	go inClient.Write([]byte("four"))
	if err := p.WaitRead(); err != nil {
		t.Fatalf("WaitRead = %v", err)
	}
	read("four")
	if nested.ahead != nil || under.ahead != nil {
		t.Fatal("a read-ahead buffer is held with nothing to read")
	}
}

// holdConn keeps what is written to it while hold is set, to send it in
// one write on flush: the records written meanwhile go in one record of
// the TLS connection under it. A write kept is signalled on held, when
// set. It is proxytest.HoldConn, which this package's tests cannot
// import (proxytest imports tunnel).
type holdConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  []byte
	held chan struct{}
}

func (c *holdConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold {
		c.buf = append(c.buf, p...)
		if c.held != nil {
			select {
			case c.held <- struct{}{}:
			default:
			}
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// flush sends what was kept, in one write, and stops keeping.
func (c *holdConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	_, err := c.Conn.Write(c.buf)
	c.buf = nil
	return err
}
