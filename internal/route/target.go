package route

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/rustle-proxy/rustle/internal/dialer"
)

// splitTarget splits a probe target, host:port (see
// [dialer.SplitHostPort]), which needs a host and a port 1-65535.
func splitTarget(s string) (string, uint16, error) {
	host, port, err := dialer.SplitHostPort(s)
	var ae *net.AddrError
	switch {
	case errors.As(err, &ae):
		return "", 0, err
	case err != nil || port == 0 || host == "":
		return "", 0, fmt.Errorf("%q is not host:port", s)
	}
	return host, port, nil
}

func parseAddr(s string) (netip.Addr, error) { return netip.ParseAddr(s) }
