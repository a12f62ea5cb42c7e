//go:build !linux

package sdnotify

// notify is Notify: systemd runs on Linux only, so nothing is sent and
// NOTIFY_SOCKET, if set, is ignored.
func notify(string) error { return nil }

// monotonicUsec returns 0; Reloading's message is never sent here.
func monotonicUsec() int64 { return 0 }
