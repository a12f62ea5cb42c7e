//go:build !unix

package h2

// writeFD is the RawConn.Write callback of rawWriter.write. Where sockets
// are not in non-blocking mode (Windows) a write could wait, so it writes
// nothing and the caller queues all of w.p for the stream's pump.
func (w *rawWriter) writeFD(uintptr) bool {
	w.n, w.err = 0, nil
	return true
}
