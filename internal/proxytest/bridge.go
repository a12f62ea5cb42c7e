package proxytest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Bridge listens on a loopback port and returns its address: the one
// connection it accepts there is joined to c (a tunnel with no socket
// of its own, such as an HTTP/2 CONNECT stream, see [H2Connect]), the
// bytes of each copied to the other as they come, so that a program
// that dials a TCP address (openssl s_client) runs over c. Each side's
// end is passed on as a close of the other; the listener, the accepted
// connection and c are closed by t.Cleanup.
func Bridge(t testing.TB, c net.Conn) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxytest: bridge: %v", err)
	}
	var mu sync.Mutex
	var accepted net.Conn
	t.Cleanup(func() {
		ln.Close()
		c.Close()
		mu.Lock()
		if accepted != nil {
			accepted.Close()
		}
		mu.Unlock()
	})
	go func() {
		a, err := ln.Accept()
		ln.Close()
		if err != nil {
			return
		}
		mu.Lock()
		accepted = a
		mu.Unlock()
		go func() {
			io.Copy(c, a)
			c.Close()
		}()
		io.Copy(a, c)
		a.Close()
	}()
	return ln.Addr().String()
}
