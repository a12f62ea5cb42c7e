package server

import (
	"context"
	"fmt"
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
// new connections among them; with tproxy, IP_TRANSPARENT (and
// IPV6_TRANSPARENT on an IPv6 socket) too, which a TPROXY rule delivers
// connections for any address to (it needs CAP_NET_ADMIN).
func listenReusePort(addr string, tproxy bool) (net.Listener, error) {
	lc := net.ListenConfig{
		KeepAlive: -1,
		Control: func(network, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
				if serr == nil && tproxy {
					serr = setTransparent(int(fd), network)
				}
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
	return lc.Listen(context.Background(), "tcp", addr)
}

// setTransparent sets IP_TRANSPARENT on the socket fd, and
// IPV6_TRANSPARENT on an IPv6 one (network "tcp6", or "tcp" for a
// dual-stack socket, where it may fail for an IPv4-only host).
func setTransparent(fd int, network string) error {
	if network != "tcp6" {
		if err := unix.SetsockoptInt(fd, unix.SOL_IP, unix.IP_TRANSPARENT, 1); err != nil {
			return fmt.Errorf("set IP_TRANSPARENT (a tproxy listener needs CAP_NET_ADMIN): %w", err)
		}
	}
	if network != "tcp4" {
		err := unix.SetsockoptInt(fd, unix.SOL_IPV6, unix.IPV6_TRANSPARENT, 1)
		if err != nil && network == "tcp6" {
			return fmt.Errorf("set IPV6_TRANSPARENT (a tproxy listener needs CAP_NET_ADMIN): %w", err)
		}
	}
	return nil
}
