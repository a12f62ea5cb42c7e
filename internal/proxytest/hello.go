package proxytest

import (
	"crypto/tls"
	"net"
	"testing"
	"time"
)

// ClientHello returns the records of the TLS ClientHello Go's client
// sends with cfg (cfg.ServerName is the server_name it names; an IP
// address names none), as a client's first bytes in a tunnel.
func ClientHello(t testing.TB, cfg *tls.Config) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tls.Client(c, cfg).Handshake() // fails once s closes
	}()
	s.SetReadDeadline(time.Now().Add(DefaultTimeout))
	var b []byte
	buf := make([]byte, 4096)
	for {
		n, err := s.Read(buf)
		b = append(b, buf[:n]...)
		if err != nil {
			t.Fatalf("proxytest: read Go's ClientHello: %v", err)
		}
		if rec, ok := wholeRecords(b); ok {
			s.Close()
			<-done
			return rec
		}
	}
}

// wholeRecords reports whether b is whole TLS records, and returns it.
func wholeRecords(b []byte) ([]byte, bool) {
	for off := 0; ; {
		if off == len(b) {
			return b, off > 0
		}
		if len(b)-off < 5 {
			return nil, false
		}
		n := int(b[off+3])<<8 | int(b[off+4])
		if len(b)-off < 5+n {
			return nil, false
		}
		off += 5 + n
	}
}

// HelloMessage returns the handshake bytes the records rec carry,
// joined: the ClientHello message of ClientHello's result.
func HelloMessage(t testing.TB, rec []byte) []byte {
	t.Helper()
	var msg []byte
	for len(rec) > 0 {
		if len(rec) < 5 {
			t.Fatal("proxytest: truncated TLS record")
		}
		n := int(rec[3])<<8 | int(rec[4])
		msg = append(msg, rec[5:5+n]...)
		rec = rec[5+n:]
	}
	return msg
}

// HelloRecords splits a handshake message into handshake records of at
// most size bytes of it each: a ClientHello fragmented as an evading
// client (or a TLS stack with a small record size) sends it.
func HelloRecords(msg []byte, size int) []byte {
	var b []byte
	for len(msg) > 0 {
		n := min(size, len(msg))
		b = append(b, 0x16, 3, 1, byte(n>>8), byte(n))
		b = append(b, msg[:n]...)
		msg = msg[n:]
	}
	return b
}
