package dialer

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// freebindSupported and deviceSupported say this platform has
// IP_FREEBIND and SO_BINDTODEVICE.
const (
	freebindSupported = true
	deviceSupported   = true
)

// setEgress sets, on a socket about to connect, IP_FREEBIND (or
// IPV6_FREEBIND on an IPv6 socket) when freebind, and SO_BINDTODEVICE
// to device when it is not "".
func setEgress(rc syscall.RawConn, v6, freebind bool, device string) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		if freebind {
			if v6 {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
			}
			if serr != nil {
				return
			}
		}
		if device != "" {
			serr = unix.BindToDevice(int(fd), device)
		}
	})
	if err != nil {
		return err
	}
	return serr
}
