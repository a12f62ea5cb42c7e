//go:build !linux

package server

import "net"

// udpSocketFacts reports nothing off Linux, where quic-go uses no
// segmentation offload and the buffer sizes are the platform's business.
func udpSocketFacts(*net.UDPConn) (udpFacts, bool) { return udpFacts{}, false }
