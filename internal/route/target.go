package route

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// splitTarget splits host:port, the port 1-65535.
func splitTarget(s string) (string, uint16, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", 0, err
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 || host == "" {
		return "", 0, fmt.Errorf("%q is not host:port", s)
	}
	return host, uint16(n), nil
}

func parseAddr(s string) (netip.Addr, error) { return netip.ParseAddr(s) }
