package sdnotify

import (
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// notify is Notify.
func notify(state string) error {
	sock := os.Getenv("NOTIFY_SOCKET")
	if sock == "" {
		return nil
	}
	if sock[0] != '/' && sock[0] != '@' {
		return fmt.Errorf("%w %q: want an absolute path or an @abstract name", ErrUnsupported, sock)
	}
	// The net package turns a leading '@' into the NUL byte that names an
	// abstract socket.
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("sdnotify: connect to %s: %w", sock, err)
	}
	defer c.Close()
	if err := c.SetWriteDeadline(time.Now().Add(sendTimeout)); err != nil {
		return fmt.Errorf("sdnotify: send to %s: %w", sock, err)
	}
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sdnotify: send to %s: %w", sock, err)
	}
	return nil
}

// monotonicUsec returns CLOCK_MONOTONIC in microseconds, the clock
// systemd compares MONOTONIC_USEC with.
func monotonicUsec() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0 // no monotonic clock; systemd keeps its own readings
	}
	return ts.Nano() / 1000
}
