//go:build unix

package socks5

import (
	"net"

	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// newDatagramWaiter returns what waits, with no buffer, for a datagram
// to arrive on c: a peek at the socket, as idle tunnels park on
// readiness. nil when c gives no raw access (never for a UDP socket).
func newDatagramWaiter(c *net.UDPConn) *tunnel.Parker {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	return tunnel.NewParker(rc)
}

// udpParks says that an idle association holds no datagram buffer.
const udpParks = true
