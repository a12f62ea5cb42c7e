//go:build linux

package rawio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// loopback returns the two ends of a loopback TCP connection, both
// closed at the end of the test.
func loopback(t *testing.T) (*net.TCPConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	p, err := ln.Accept()
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); p.Close() })
	return c.(*net.TCPConn), p
}

// rawPair returns a loopback TCP connection wrapped by Wrap and its
// peer, both closed at the end of the test.
func rawPair(t *testing.T) (raw, peer net.Conn) {
	t.Helper()
	c, p := loopback(t)
	raw = Wrap(c)
	if _, ok := raw.(*conn); !ok {
		t.Fatalf("Wrap(%T) = %T, want *conn", c, raw)
	}
	return raw, p
}

func TestWrapMovesEveryByte(t *testing.T) {
	for _, dir := range []string{"raw writes", "raw reads"} {
		t.Run(dir, func(t *testing.T) {
			raw, peer := rawPair(t)
			w, r := raw, peer
			if dir == "raw reads" {
				w, r = peer, raw
			}
			// More than the socket buffers hold, so that writes meet EAGAIN
			// and wait for writability.
			want := bytes.Repeat([]byte("0123456789abcdef"), 1<<18)
			errc := make(chan error, 1)
			go func() {
				n, err := w.Write(want)
				if err == nil && n != len(want) {
					err = io.ErrShortWrite
				}
				if err == nil {
					err = w.(interface{ CloseWrite() error }).CloseWrite()
				}
				errc <- err
			}()
			got, err := io.ReadAll(r)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if err := <-errc; err != nil {
				t.Fatalf("write: %v", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("read %d bytes, want the %d written", len(got), len(want))
			}
		})
	}
}

func TestWrapKeepsDeadlines(t *testing.T) {
	raw, _ := rawPair(t)
	raw.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := raw.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	// The peer reads nothing: the buffers fill, then the deadline cuts
	// the write.
	raw.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := raw.Write(make([]byte, 64<<20)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write past the deadline: %v, want os.ErrDeadlineExceeded", err)
	}
}

// fdPair returns an FD on one end of a loopback TCP connection, the
// connection itself and its peer, all closed at the end of the test.
func fdPair(t *testing.T) (*FD, *net.TCPConn, net.Conn) {
	t.Helper()
	c, p := loopback(t)
	f := new(FD)
	if !f.Reset(c) || !f.Holds(c) {
		t.Fatal("Reset took no socket")
	}
	return f, c, p
}

func TestFDWritevMovesEveryByte(t *testing.T) {
	f, c, peer := fdPair(t)
	// Far more than the socket buffers hold: the writev is partial, ends
	// inside either buffer, and waits for room.
	a := bytes.Repeat([]byte("abcdefghijklmnop"), 1<<17)
	b := bytes.Repeat([]byte("0123456789ABCDEF"), 1<<18)
	errc := make(chan error, 1)
	go func() {
		n, err := f.Writev(a, b)
		if err == nil && n != int64(len(a)+len(b)) {
			err = io.ErrShortWrite
		}
		if err == nil {
			err = c.CloseWrite()
		}
		errc <- err
	}()
	got, err := io.ReadAll(peer)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("writev: %v", err)
	}
	if want := append(append([]byte(nil), a...), b...); !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes, want the %d written in order", len(got), len(want))
	}
}

func TestFDEndsAsTCPConnDoes(t *testing.T) {
	t.Run("EOF", func(t *testing.T) {
		f, _, peer := fdPair(t)
		peer.Write([]byte("last"))
		peer.Close()
		buf := make([]byte, 16)
		n, err := f.Read(buf)
		if err != nil || string(buf[:n]) != "last" {
			t.Fatalf("Read = %q, %v; want \"last\"", buf[:n], err)
		}
		if n, err := f.Read(buf); n != 0 || err != io.EOF {
			t.Fatalf("Read at the end = %d, %v; want 0, io.EOF", n, err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		f, c, _ := fdPair(t)
		c.Close()
		if _, err := f.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Read after Close: %v, want net.ErrClosed", err)
		}
		if _, err := f.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Write after Close: %v, want net.ErrClosed", err)
		}
		if _, err := f.Writev([]byte("x"), []byte("y")); !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Writev after Close: %v, want net.ErrClosed", err)
		}
	})
	t.Run("reset", func(t *testing.T) {
		f, _, peer := fdPair(t)
		peer.(*net.TCPConn).SetLinger(0)
		peer.Close()
		_, err := f.Read(make([]byte, 1))
		var oe *net.OpError
		if !errors.Is(err, syscall.ECONNRESET) || !errors.As(err, &oe) || oe.Op != "read" {
			t.Fatalf("Read after a reset: %v, want a read *net.OpError of ECONNRESET", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		f, c, _ := fdPair(t)
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		_, err := f.Read(make([]byte, 1))
		var ne net.Error
		if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("Read past the deadline: %v, want a timeout", err)
		}
	})
}

func TestFDHoldsOnlyItsSocket(t *testing.T) {
	f, c, _ := fdPair(t)
	_, other, _ := fdPair(t)
	if f.Holds(other) || f.Holds(nil) {
		t.Fatal("Holds another socket")
	}
	if f.Reset(nil) || f.Holds(c) {
		t.Fatal("Reset(nil) left the socket held")
	}
}
