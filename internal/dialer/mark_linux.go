package dialer

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// SetMark sets the firewall mark (SO_MARK) on a socket about to
// connect, when mark is not 0: the rules that redirect clients to a
// transparent listener skip the packets that carry it (egress.mark).
// It needs CAP_NET_ADMIN.
func SetMark(rc syscall.RawConn, mark uint32) error {
	if mark == 0 {
		return nil
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, int(mark))
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("dialer: set the egress mark %#x (SO_MARK needs CAP_NET_ADMIN): %w", mark, serr)
	}
	return nil
}
