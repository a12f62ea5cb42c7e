package tunnel

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestParkerWaitRead checks the HTTP/2 server's wait on a TLS
// connection's Parker (TLSParker): its WaitRead returns
// once a record arrives, having read it into the connection's read-ahead
// buffer (so that the next tls.Conn.Read needs no system call of its
// own), holds no buffer while it waits, and reports the end of the stream
// and a reset as TLSParker's Wait does.
func TestParkerWaitRead(t *testing.T) {
	serverConf, clientConf := tlsConfs(t, 0)
	tests := []struct {
		name string
		// send acts on the client side; want checks what Wait and the
		// next read return.
		send func(t *testing.T, client io.Writer, raw *net.TCPConn)
		want func(t *testing.T, waitErr error, n int, readErr error)
	}{
		{"record", func(t *testing.T, w io.Writer, _ *net.TCPConn) {
			if _, err := w.Write([]byte("hello")); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, waitErr error, n int, readErr error) {
			if waitErr != nil || n != 5 || readErr != nil {
				t.Fatalf("WaitRead = %v, then read %d, %v; want nil, then 5 bytes", waitErr, n, readErr)
			}
		}},
		{"end of stream", func(t *testing.T, _ io.Writer, c *net.TCPConn) { c.Close() }, func(t *testing.T, waitErr error, _ int, readErr error) {
			if waitErr != nil || readErr == nil {
				t.Fatalf("WaitRead = %v, then read error %v; want nil, then the end of the stream", waitErr, readErr)
			}
		}},
		{"reset", func(t *testing.T, _ io.Writer, c *net.TCPConn) { c.SetLinger(0); c.Close() }, func(t *testing.T, waitErr error, _ int, _ error) {
			if !errors.Is(waitErr, syscall.ECONNRESET) {
				t.Fatalf("WaitRead = %v, want the reset", waitErr)
			}
			var se *os.SyscallError
			if !errors.As(waitErr, &se) || se.Syscall != "read" {
				t.Errorf("WaitRead = %v, want a read(2) error", waitErr)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client, server, raw := tlsHandshake(t, newListener(t), serverConf, clientConf, false)
			t.Cleanup(func() { client.Close(); server.Close() })
			p, ok := TLSParker(server)
			if !ok {
				t.Fatal("TLSParker: not a RecordConn")
			}
			rc := server.NetConn().(*recordConn)
			raw.SetReadDeadline(time.Now().Add(20 * time.Second))
			woke := make(chan error, 1)
			go func() { woke <- p.WaitRead() }()
			tt.send(t, client, client.NetConn().(*net.TCPConn))
			err := <-woke
			if err == nil && tt.name == "record" && !rc.pending() {
				t.Fatal("WaitRead returned with nothing read ahead")
			}
			buf := make([]byte, 64)
			var n int
			var rerr error
			if err == nil {
				n, rerr = server.Read(buf)
			}
			tt.want(t, err, n, rerr)
			if rc.ahead != nil {
				t.Error("a read-ahead buffer is held after the record was read")
			}
		})
	}
}
