//go:build !linux

package httpproxy

import "net"

// setNotSentLowat does nothing: TCP_NOTSENT_LOWAT is used on Linux only,
// and without it a socket queues up to its whole send buffer.
func setNotSentLowat(*net.TCPConn, int) {}
