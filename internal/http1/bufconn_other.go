//go:build !linux

package http1

import (
	"math"
	"net"
)

// SetNotSentLowat does nothing: TCP_NOTSENT_LOWAT is used on Linux only,
// and without it a socket queues up to its whole send buffer.
func SetNotSentLowat(*net.TCPConn, int) {}

// Readable cannot tell here how many bytes c holds: it reports as many
// as any caller asks for, and a read of them waits under one deadline.
func Readable(*net.TCPConn) (int, error) { return math.MaxInt, nil }
