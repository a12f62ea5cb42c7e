//go:build !unix

package proxytest

import "net"

// PortSharingDialer returns a plain dialer and false: sharing a local
// port between connections this way needs Unix's SO_REUSEADDR (see the
// Unix version).
func PortSharingDialer(port uint16) (d *net.Dialer, ok bool) {
	return &net.Dialer{}, false
}
