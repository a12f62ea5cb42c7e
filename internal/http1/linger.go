package http1

import (
	"io"
	"net"
	"time"
)

// lingerMax bounds what LingerClose reads and discards.
const lingerMax = 64 << 10

// LingerClose closes c, to which an answer was just written while what
// the peer sent may not all have been read (a refused request, a TLS
// alert to a ClientHello): it half-closes c's sending side (when c can:
// a TCP connection), then reads and discards what the peer still sends,
// for at most linger and 64 KiB, and closes it. Closing at once with
// bytes unread would reset the connection, and the peer could lose the
// answer before reading it (RFC 9112 §9.6).
func LingerClose(c net.Conn, linger time.Duration) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(linger))
	io.Copy(io.Discard, io.LimitReader(c, lingerMax))
	c.Close()
}
