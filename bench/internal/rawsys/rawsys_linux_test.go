//go:build linux

package rawsys

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// rawPair returns a loopback TCP connection wrapped by Wrap and its
// peer, both closed at the end of the test.
func rawPair(t *testing.T) (raw, peer net.Conn) {
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
	raw = Wrap(c)
	if _, ok := raw.(*conn); !ok {
		t.Fatalf("Wrap(%T) = %T, want *conn", c, raw)
	}
	t.Cleanup(func() { raw.Close(); p.Close() })
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
