package server

import (
	"net"

	"golang.org/x/sys/unix"
)

// udpSocketFacts reads what the kernel gave c: its receive and send
// buffer sizes (as getsockopt reports them, twice what was asked for)
// and whether it can send with UDP generic segmentation offload
// (UDP_SEGMENT), which quic-go uses to send a batch of packets in one
// sendmsg where the kernel has it.
func udpSocketFacts(c *net.UDPConn) (f udpFacts, ok bool) {
	raw, err := c.SyscallConn()
	if err != nil {
		return f, false
	}
	var rerr, serr, gerr error
	if err := raw.Control(func(fd uintptr) {
		f.recvBuffer, rerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
		f.sendBuffer, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF)
		_, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	}); err != nil || rerr != nil || serr != nil {
		return f, false
	}
	f.gso = gerr == nil
	return f, true
}
