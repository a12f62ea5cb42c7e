package limits

import (
	"context"
	"net"
	"time"

	"github.com/rustle-proxy/rustle/internal/tunnel"
)

// RelayPaced relays a and b both ways until both directions end, passing
// half-closes through, taking every chunk's bytes from bucket before
// writing it: it carries the tunnels of users whose bytes are paced, which
// cannot go to the splice engine, and (bucket nil) metered tunnels that
// the engine does not carry. A direction that moves nothing for idle
// ends (0 = no idle limit); when ctx is done, waits on the bucket end the
// relay. It returns the bytes written each way: up from a to b, down from
// b to a. A meter (nil = none) is told of each write's bytes as it returns
// (see [tunnel.Meter]; direction 0 is up); when it says to stop, both
// connections are closed at once, which ends both directions. The caller
// closes both connections afterwards.
func RelayPaced(ctx context.Context, a, b net.Conn, bucket *Bucket, idle time.Duration, meter tunnel.Meter) (up, down int64) {
	stop := func() {
		a.Close()
		b.Close()
	}
	if bucket == nil {
		// Nothing waits on ctx: its end closes the connections.
		defer context.AfterFunc(ctx, stop)()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		up = copyPaced(ctx, b, a, bucket, idle, meter, 0, stop)
		closeWrite(b)
	}()
	down = copyPaced(ctx, a, b, bucket, idle, meter, 1, stop)
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
// (16 KiB at least, 64 KiB at most), waiting on bucket (nil = none) for
// each, tells meter (nil = none) of each as direction d, calls stop when
// it says to, and returns the bytes written to dst.
func copyPaced(ctx context.Context, dst, src net.Conn, bucket *Bucket, idle time.Duration, meter tunnel.Meter, d int, stop func()) (written int64) {
	size := 32 << 10
	if bucket != nil {
		size = bucket.Burst()
	}
	buf := make([]byte, min(max(size, 16<<10), 64<<10))
	for {
		if idle > 0 {
			src.SetReadDeadline(time.Now().Add(idle))
		}
		n, err := src.Read(buf)
		if n > 0 {
			if bucket != nil && bucket.Wait(ctx, n) != nil {
				return written
			}
			if idle > 0 {
				dst.SetWriteDeadline(time.Now().Add(idle))
			}
			w, werr := dst.Write(buf[:n])
			written += int64(w)
			if meter != nil && w > 0 && !meter.Moved(d, int64(w)) {
				stop()
				return written
			}
			if werr != nil {
				return written
			}
		}
		if err != nil {
			return written
		}
	}
}
