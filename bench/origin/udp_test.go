package main

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"
)

// TestUDPEcho sends datagrams of several sizes from two clients to the
// echo and reads each back, unchanged, at its own sender.
func TestUDPEcho(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { serveUDPEcho(pc) })
	t.Cleanup(func() {
		pc.Close()
		wg.Wait()
	})
	for _, size := range []int{0, 1, 64, 1200, 16 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			a, err := net.Dial("udp", pc.LocalAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := net.Dial("udp", pc.LocalAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			for i, c := range []net.Conn{a, b} {
				msg := bytes.Repeat([]byte{byte('x' + i)}, size)
				if _, err := c.Write(msg); err != nil {
					t.Fatal(err)
				}
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				got := make([]byte, size+100)
				n, err := c.Read(got)
				if err != nil {
					t.Fatalf("size %d, client %d: %v", size, i, err)
				}
				if !bytes.Equal(got[:n], msg) {
					t.Fatalf("size %d, client %d: echo of %d bytes differs", size, i, n)
				}
			}
		})
	}
}
