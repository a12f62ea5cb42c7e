//go:build !linux

package tunnel

import (
	"context"
	"crypto/tls"
	"net"
	"time"
)

// RecordConn returns c itself. On Linux it wraps c so that crypto/tls
// never reads past the current TLS record, which lets [RelayTLS] and the
// HTTP/2 server park a TLS connection on socket readiness with no buffer;
// elsewhere those connections are relayed and read by blocking goroutines
// ([RawTCP] reports false), which need no such wrapping.
func RecordConn(c *net.TCPConn) net.Conn {
	return c
}

// RecordConnRead is RecordConn for a connection whose first bytes have
// been read already: c itself when there are none; nil otherwise (the
// caller then serves those bytes itself).
func RecordConnRead(c *net.TCPConn, read []byte) net.Conn {
	if len(read) > 0 {
		return nil
	}
	return c
}

// RecordConnTLS returns nil off Linux: the caller reads c as it is. On
// Linux it wraps c for a TLS connection inside it so that that one's
// Parker can wait on c's socket.
func RecordConnTLS(c *tls.Conn, read []byte) net.Conn { return nil }

// RawTCP returns the TCP socket under a TLS connection made over
// [RecordConn] on Linux. Elsewhere it always returns nil and false, so
// that callers take their goroutine relay rather than [RelayTLS].
func RawTCP(*tls.Conn) (*net.TCPConn, bool) {
	return nil, false
}

// RelayTLS relays a tunnel between a TLS client connection (its handshake
// complete) and a plain upstream connection until both directions have
// ended, and returns the bytes delivered each way (up: client to upstream;
// down: upstream to client, plaintext). Off Linux it is [Relay] on client
// and upstream; raw, the socket under client, is closed with them. The
// error is [Relay]'s [Result.Err].
func RelayTLS(ctx context.Context, client *tls.Conn, raw *net.TCPConn, upstream *net.TCPConn, idle time.Duration) (up, down int64, err error) {
	res := Relay(ctx, client, upstream, idle)
	raw.Close()
	return res.Up, res.Down, res.Err
}

// TLSParker returns a Parker for the socket under a TLS connection made
// over [RecordConn] on Linux. Elsewhere it always returns nil and false,
// as [RawTCP] does.
func TLSParker(*tls.Conn) (*Parker, bool) { return nil, false }

// RecordParker is TLSParker for a connection RecordConn made: nil and
// false off Linux.
func RecordParker(net.Conn) (*Parker, bool) { return nil, false }
