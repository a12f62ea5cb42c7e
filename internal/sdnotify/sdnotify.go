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
//
// Notifications are sent on Linux only. On other systems every function
// is a no-op returning nil, as if NOTIFY_SOCKET were unset.
package sdnotify

import (
	"errors"
	"strconv"
	"strings"
	"time"
)

// ErrUnsupported is wrapped by the error for a NOTIFY_SOCKET that is
// neither an absolute path nor an abstract socket name.
var ErrUnsupported = errors.New("sdnotify: unsupported NOTIFY_SOCKET address")

// sendTimeout bounds a send to a notification socket whose receive queue
// is full.
const sendTimeout = 2 * time.Second

// Notify sends state, one or more newline-separated VARIABLE=value
// assignments, to $NOTIFY_SOCKET. It returns nil without sending when
// NOTIFY_SOCKET is unset, and on systems other than Linux, where systemd
// does not run.
func Notify(state string) error {
	return notify(state)
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
