package dialer

import (
	"net"
	"runtime"
	"testing"
	"time"
)

// TestAlive checks Alive on an idle connection that is open, closed by
// its peer, and sent bytes nobody asked for.
func TestAlive(t *testing.T) {
	ln := listen(t)
	tests := []struct {
		name string
		peer func(s net.Conn)
		want bool
	}{
		{"open", func(net.Conn) {}, true},
		{"closed by the peer", func(s net.Conn) { s.Close() }, false},
		{"unsolicited bytes", func(s net.Conn) { s.Write([]byte("HTTP/1.1 408 Request Timeout\r\n\r\n")) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			s, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			tt.peer(s)
			tc := c.(*net.TCPConn)
			if tt.want {
				if !Alive(tc) {
					t.Error("Alive = false on an open idle connection")
				}
				return
			}
			// What the peer did reaches the socket a moment later.
			deadline := time.Now().Add(5 * time.Second)
			for Alive(tc) {
				if time.Now().After(deadline) {
					t.Fatal("Alive = true 5s after the peer's doing")
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	if runtime.GOOS == "linux" {
		c := pair(t, ln)
		if n := testing.AllocsPerRun(100, func() { Alive(c) }); n != 0 {
			t.Errorf("Alive allocates %v times", n)
		}
	}
}
