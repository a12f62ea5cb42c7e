//go:build !unix

package dialer

import "net"

// Alive reports whether c, an idle upstream connection, is still open
// with nothing unread. Without a non-blocking peek (Windows) it cannot
// tell and reports true: a request that cannot be retried may then meet
// a connection the origin has closed, as it could before.
func Alive(c *net.TCPConn) bool { return c != nil }
