package tunnel

import (
	"bytes"
	"crypto/tls"
	"io"
	"testing"
	"time"
)

// TestRecordConnRead checks a TLS server over RecordConnRead, given the
// bytes of the client's hello read before (none, part of its header,
// all the socket had): its handshake completes, its records are read,
// and its RecordParker sees a record read ahead behind the one
// crypto/tls took. More than a pooled buffer's worth of bytes read
// before is refused (nil).
func TestRecordConnRead(t *testing.T) {
	serverConf, clientConf := tlsConfs(t, 0)
	ln := newListener(t)
	for _, tt := range []struct {
		name string
		read int // bytes read before; -1: what one read gets
	}{{"nothing read", 0}, {"part of the header", 3}, {"what one read gets", -1}} {
		t.Run(tt.name, func(t *testing.T) {
			d, a := tcpPair(t, ln)
			t.Cleanup(func() { d.Close(); a.Close() })
			client := tls.Client(d, clientConf)
			hs := make(chan error, 1)
			go func() { hs <- client.Handshake() }()
			a.SetDeadline(time.Now().Add(10 * time.Second))
			var first []byte
			switch {
			case tt.read > 0:
				first = make([]byte, tt.read)
				if _, err := io.ReadFull(a, first); err != nil {
					t.Fatalf("read the hello: %v", err)
				}
			case tt.read < 0:
				b := make([]byte, 16<<10)
				n, err := a.Read(b)
				if err != nil {
					t.Fatalf("read the hello: %v", err)
				}
				first = b[:n]
			}
			rc := RecordConnRead(a, first)
			if rc == nil {
				t.Fatal("RecordConnRead: nil")
			}
			server := tls.Server(rc, serverConf)
			if err := server.Handshake(); err != nil {
				t.Fatalf("server handshake: %v", err)
			}
			if err := <-hs; err != nil {
				t.Fatalf("client handshake: %v", err)
			}
			// Two records written at once: crypto/tls takes the first,
			// the Parker sees the second (read ahead, or in the socket).
			sent := make(chan error, 1)
			go func() {
				_, err := client.Write(bytes.Repeat([]byte("a"), 100))
				if err == nil {
					_, err = client.Write([]byte("next"))
				}
				sent <- err
			}()
			buf := make([]byte, 1024)
			if n, err := io.ReadFull(server, buf[:100]); err != nil || !bytes.Equal(buf[:n], bytes.Repeat([]byte("a"), 100)) {
				t.Fatalf("read %q, %v", buf[:n], err)
			}
			p, ok := RecordParker(rc)
			if !ok {
				t.Fatal("RecordParker: not a RecordConn")
			}
			if err := p.Wait(); err != nil {
				t.Fatalf("Wait: %v", err)
			}
			if n, err := server.Read(buf); err != nil || string(buf[:n]) != "next" {
				t.Fatalf("read %q, %v; want next", buf[:n], err)
			}
			if err := <-sent; err != nil {
				t.Fatalf("client write: %v", err)
			}
		})
	}
	d, a := tcpPair(t, ln)
	t.Cleanup(func() { d.Close(); a.Close() })
	if RecordConnRead(a, make([]byte, tlsBufSize+1)) != nil {
		t.Error("RecordConnRead took more bytes than a pooled buffer holds")
	}
}
