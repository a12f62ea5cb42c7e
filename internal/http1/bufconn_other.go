//go:build !linux

package http1

import "net"

// SetNotSentLowat does nothing: TCP_NOTSENT_LOWAT is used on Linux only,
// and without it a socket queues up to its whole send buffer.
func SetNotSentLowat(*net.TCPConn, int) {}
