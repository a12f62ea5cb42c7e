package gate

import "sync"

// Datagram buffers, pooled by size: a CONNECT-UDP flow over HTTP/3
// carries at most a packet's worth (smallDatagram), one over HTTP/2
// capsules up to 64 KiB.
const smallDatagram = 2 << 10

var (
	smallDatagramBufs = sync.Pool{New: func() any { b := make([]byte, smallDatagram); return &b }}
	largeDatagramBufs = sync.Pool{New: func() any { b := make([]byte, maxUDPPayload+1); return &b }}
)

// getDatagramBuf returns a pooled buffer of n bytes (n at most
// maxUDPPayload+1).
func getDatagramBuf(n int) *[]byte {
	var bp *[]byte
	if n <= smallDatagram {
		bp = smallDatagramBufs.Get().(*[]byte)
	} else {
		bp = largeDatagramBufs.Get().(*[]byte)
	}
	*bp = (*bp)[:n]
	return bp
}

// putDatagramBuf gives back a buffer of getDatagramBuf.
func putDatagramBuf(bp *[]byte) {
	if cap(*bp) <= smallDatagram {
		smallDatagramBufs.Put(bp)
	} else {
		largeDatagramBufs.Put(bp)
	}
}
