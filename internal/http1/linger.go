package http1

import (
	"io"
	"net"
	"strconv"
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

// refusalLinger is how long RefuseAndClose reads what the peer still
// sends after its answer.
const refusalLinger = 250 * time.Millisecond

// RefuseAndClose answers c, on which a peer sent an HTTP request to a
// port that speaks another protocol (plain HTTP to a TLS port, HTTP to a
// SOCKS port), 400 in plain HTTP with the one-line reason why ("rustle:
// " before it), and closes it with LingerClose. The write is bounded by
// a second: a fresh socket's empty send buffer takes it at once.
func RefuseAndClose(c net.Conn, why string) {
	body := "rustle: " + why + "\n"
	answer := "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write([]byte(answer))
	LingerClose(c, refusalLinger)
}
