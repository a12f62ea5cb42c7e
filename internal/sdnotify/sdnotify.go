// Package sdnotify speaks systemd's service notification protocol
// (sd_notify(3)): newline-separated VARIABLE=value assignments sent as one
// datagram to the unix socket named by $NOTIFY_SOCKET, which systemd sets
// for services with Type=notify or Type=notify-reload.
//
// A path starting with '/' is a socket in the file system; one starting
// with '@' is in the Linux abstract namespace (the '@' stands for the
// leading NUL byte). Other forms, such as vsock addresses, are refused
// with [ErrUnsupported]. Every function is a no-op returning nil when
// NOTIFY_SOCKET is unset or empty, so rustle calls them unconditionally.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrUnsupported is wrapped by the error for a NOTIFY_SOCKET that is
// neither an absolute path nor an abstract socket name.
var ErrUnsupported = errors.New("sdnotify: unsupported NOTIFY_SOCKET address")

// sendTimeout bounds a send to a notification socket whose receive queue
// is full.
const sendTimeout = 2 * time.Second

// Notify sends state, one or more newline-separated VARIABLE=value
// assignments, to $NOTIFY_SOCKET. It returns nil without sending when
// NOTIFY_SOCKET is unset.
func Notify(state string) error {
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

// Ready tells systemd that start-up, or a reload announced by Reloading,
// is complete: READY=1.
func Ready() error { return Notify("READY=1") }

// Reloading tells systemd that the service is reloading its
// configuration: RELOADING=1 with MONOTONIC_USEC, the CLOCK_MONOTONIC
// time in microseconds, which Type=notify-reload requires. Call Ready when
// the reload is done.
func Reloading() error {
	return Notify("RELOADING=1\nMONOTONIC_USEC=" + strconv.FormatInt(monotonicUsec(), 10))
}

// Stopping tells systemd that the service is shutting down: STOPPING=1.
func Stopping() error { return Notify("STOPPING=1") }

// Status sends a one-line status for systemctl status to show:
// STATUS=s, with any line break in s replaced by a space.
func Status(s string) error {
	return Notify("STATUS=" + strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s))
}

// ExtendTimeout asks systemd to wait d longer for the current start-up,
// reload or shutdown: EXTEND_TIMEOUT_USEC.
func ExtendTimeout(d time.Duration) error {
	return Notify("EXTEND_TIMEOUT_USEC=" + strconv.FormatInt(max(d.Microseconds(), 0), 10))
}

// monotonicUsec returns CLOCK_MONOTONIC in microseconds, the clock
// systemd compares MONOTONIC_USEC with.
func monotonicUsec() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0 // not on Linux; systemd is not there either
	}
	return ts.Nano() / 1000
}
