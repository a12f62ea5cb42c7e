package server

import (
	"context"
	"log/slog"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rustle-proxy/rustle/internal/config"
)

// workerCount returns the number of workers to run for cfg, each with its
// own tunnel engine and its own SO_REUSEPORT socket per listener:
// cfg.WorkerCount().
func workerCount(cfg *config.Config, _ *slog.Logger) int {
	return cfg.WorkerCount()
}

// listenReusePort opens a listening TCP socket on addr with SO_REUSEPORT
// set, so that every worker can bind the same port and the kernel spreads
// new connections among them.
func listenReusePort(addr string) (net.Listener, error) {
	lc := net.ListenConfig{
		KeepAlive: -1,
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
	return lc.Listen(context.Background(), "tcp", addr)
}
