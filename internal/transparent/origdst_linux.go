package transparent

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// soOriginalDst is SO_ORIGINAL_DST (linux/netfilter_ipv4.h), and
// IP6T_SO_ORIGINAL_DST (linux/netfilter_ipv6/ip6_tables.h) at the IPv6
// level: the destination the connection tracking saw before a REDIRECT
// or DNAT rule rewrote it.
const soOriginalDst = 80

// redirectedTo returns the original destination of c, a connection a
// REDIRECT or DNAT rule sent to rustle, from the connection tracking:
// SO_ORIGINAL_DST for an IPv4 socket, IP6T_SO_ORIGINAL_DST for an IPv6
// one. A connection the tracking has no entry for (ENOENT: it was not
// redirected, or conntrack is off) is an error.
func redirectedTo(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("transparent: original destination: %w", err)
	}
	local, _ := c.LocalAddr().(*net.TCPAddr)
	v6 := local != nil && local.IP.To4() == nil
	var sa [unix.SizeofSockaddrInet6]byte
	var serr error
	err = rc.Control(func(fd uintptr) {
		level := unix.SOL_IP
		if v6 {
			level = unix.SOL_IPV6
		}
		n := uint32(len(sa))
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, uintptr(level), soOriginalDst,
			uintptr(unsafe.Pointer(&sa[0])), uintptr(unsafe.Pointer(&n)), 0)
		if e != 0 {
			serr = e
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("transparent: original destination (SO_ORIGINAL_DST): %w", err)
	}
	// struct sockaddr_in / sockaddr_in6: family (host order), port
	// (network order), then the address (after the IPv6 flow info).
	port := binary.BigEndian.Uint16(sa[2:4])
	switch binary.NativeEndian.Uint16(sa[0:2]) {
	case unix.AF_INET:
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte(sa[4:8])), port), nil
	case unix.AF_INET6:
		return netip.AddrPortFrom(netip.AddrFrom16([16]byte(sa[8:24])).Unmap(), port), nil
	}
	return netip.AddrPort{}, fmt.Errorf("transparent: original destination: address family %d", binary.NativeEndian.Uint16(sa[0:2]))
}
