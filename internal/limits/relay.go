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
// ends; when ctx is done, waits on the bucket end the relay. The caller
// closes both connections afterwards.
func RelayPaced(ctx context.Context, a, b net.Conn, bucket *Bucket, idle time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyPaced(ctx, b, a, bucket, idle)
		closeWrite(b)
	}()
	copyPaced(ctx, a, b, bucket, idle)
	closeWrite(a)
	<-done
}

// closeWrite passes a half-close on, where c can make one.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
}

// copyPaced copies src to dst in chunks of at most the bucket's burst
// (16 KiB at least, 64 KiB at most), waiting on bucket for each.
func copyPaced(ctx context.Context, dst, src net.Conn, bucket *Bucket, idle time.Duration) {
	buf := make([]byte, min(max(bucket.Burst(), 16<<10), 64<<10))
	for {
		src.SetReadDeadline(time.Now().Add(idle))
		n, err := src.Read(buf)
		if n > 0 {
			if bucket.Wait(ctx, n) != nil {
				return
			}
			dst.SetWriteDeadline(time.Now().Add(idle))
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
