//go:build !linux

package server

// recordWaiter is waitRecord's look at a socket's first TLS record.
type recordWaiter struct{ err error }

// ready is the RawConn.Read callback of waitRecord. Off Linux, which
// tells how many bytes a socket has queued, it does not wait for the
// whole record: the handshake slot is taken once its first byte has
// arrived.
func (w *recordWaiter) ready(uintptr) bool { return true }
