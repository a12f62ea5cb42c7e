package dialer

import "github.com/rustle-proxy/rustle/internal/rawio"

// setsockoptInt sets an integer socket option on the socket fd, with a
// system call the Go scheduler does not see (rawio): through syscall's
// ordinary call, SetBuffers on each new client connection woke the
// runtime's monitor (a futex wake-up, then its 20 µs polling) whenever
// the process had been idle just before.
func setsockoptInt(fd uintptr, level, opt, value int) error {
	if e := rawio.SetsockoptInt(fd, level, opt, value); e != 0 {
		return e
	}
	return nil
}
