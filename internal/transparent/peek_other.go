//go:build !unix

package transparent

import (
	"errors"
	"net"
)

// peekKind fails: a transparent listener needs Linux.
func peekKind(*net.TCPConn) (kind, n int, err error) {
	return kindNothing, 0, errors.New("transparent: needs Linux")
}
