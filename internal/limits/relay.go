package limits

import (
	"context"
	"net"
	"time"
)

// RelayPaced relays a and b both ways until both directions end, passing
// half-closes through, taking every chunk's bytes from bucket before
// writing it: it carries the tunnels of users whose bytes are paced, which
// cannot go to the splice engine. A direction that moves nothing for idle
// ends (0 = no idle limit); when ctx is done, waits on the bucket end the
// relay. It returns the bytes written each way: up from a to b, down from
// b to a. The caller closes both connections afterwards.
func RelayPaced(ctx context.Context, a, b net.Conn, bucket *Bucket, idle time.Duration) (up, down int64) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		up = copyPaced(ctx, b, a, bucket, idle)
		closeWrite(b)
	}()
	down = copyPaced(ctx, a, b, bucket, idle)
	closeWrite(a)
	<-done
	return up, down
}

// closeWrite passes a half-close on, where c can make one.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// copyPaced copies src to dst in chunks of at most the bucket's burst
// (16 KiB at least, 64 KiB at most), waiting on bucket for each, and
// returns the bytes written to dst.
func copyPaced(ctx context.Context, dst, src net.Conn, bucket *Bucket, idle time.Duration) (written int64) {
	buf := make([]byte, min(max(bucket.Burst(), 16<<10), 64<<10))
	for {
		if idle > 0 {
			src.SetReadDeadline(time.Now().Add(idle))
		}
		n, err := src.Read(buf)
		if n > 0 {
			if bucket.Wait(ctx, n) != nil {
				return written
			}
			if idle > 0 {
				dst.SetWriteDeadline(time.Now().Add(idle))
			}
			w, werr := dst.Write(buf[:n])
			written += int64(w)
			if werr != nil {
				return written
			}
		}
		if err != nil {
			return written
		}
	}
}
