//go:build !unix

package socks5

import (
	"net"

	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// newDatagramWaiter returns nil: without a peek that leaves a datagram
// whole (Windows' zero-byte read is not one for UDP), an association
// reads straight into a buffer it borrows for its whole life.
func newDatagramWaiter(*net.UDPConn) *tunnel.Parker { return nil }

// udpParks says that an idle association holds no datagram buffer.
const udpParks = false
