package tunnel

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// newParked returns a Parker on one end of a loopback TCP connection,
// that end, and the peer.
func newParked(t *testing.T) (*Parker, *net.TCPConn, *net.TCPConn) {
	t.Helper()
	peer, c := tcpPair(t, newListener(t))
	t.Cleanup(func() { peer.Close(); c.Close() })
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return NewParker(rc), c, peer
}

func TestParkerWaitsForBytes(t *testing.T) {
	p, c, peer := newParked(t)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	woke := make(chan error, 1)
	go func() { woke <- p.Wait() }()
	if _, err := peer.Write([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	if err := <-woke; err != nil {
		t.Fatalf("Wait = %v, want nil once bytes came", err)
	}
	// Nothing was consumed, and a socket with bytes waits no more.
	if err := p.Wait(); err != nil {
		t.Fatalf("second Wait = %v", err)
	}
	buf := make([]byte, 2)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ab" {
		t.Fatalf("read %q, %v after Wait; want %q", buf, err, "ab")
	}
}

func TestParkerEndOfStream(t *testing.T) {
	p, c, peer := newParked(t)
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	peer.Close()
	if err := p.Wait(); err != nil {
		t.Fatalf("Wait = %v, want nil at the end of the stream", err)
	}
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read after Wait = %v, want EOF", err)
	}
}

func TestParkerDeadline(t *testing.T) {
	p, c, _ := newParked(t)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if err := p.Wait(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Wait = %v, want the read deadline's error", err)
	}
}
