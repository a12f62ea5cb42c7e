//go:build !linux

package transparent

import (
	"errors"
	"net"
	"net/netip"
)

// redirectedTo fails: REDIRECT's original destination
// (SO_ORIGINAL_DST) is Linux's.
func redirectedTo(*net.TCPConn) (netip.AddrPort, error) {
	return netip.AddrPort{}, errors.New("transparent: redirect mode needs Linux (SO_ORIGINAL_DST)")
}
