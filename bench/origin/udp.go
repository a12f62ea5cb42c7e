package main

import (
	"errors"
	"net"
)

// serveUDPEcho sends every datagram read on pc back to its sender, as it
// is, until pc is closed. A write that fails (a full socket buffer) drops
// the echo: the client counts it as lost.
func serveUDPEcho(pc net.PacketConn) {
	buf := make([]byte, 64<<10)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		pc.WriteTo(buf[:n], addr)
	}
}
