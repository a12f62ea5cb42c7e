//go:build !linux

package server

import (
	"context"
	"errors"
	"log/slog"
	"net"

	"github.com/rustle-proxy/rustle/internal/config"
)

// workerCount returns the number of workers to run for cfg: 1. Workers
// share a port through SO_REUSEPORT, which spreads connections among
// sockets only on Linux; elsewhere one worker (one socket per listener,
// one tunnel engine) serves every connection, its goroutines spread over
// the CPUs by the Go scheduler. A configuration asking for more says so
// in the log.
func workerCount(cfg *config.Config, log *slog.Logger) int {
	if n := cfg.WorkerCount(); n > 1 {
		log.Info("one worker on this platform: SO_REUSEPORT workers are Linux only", "configured_workers", n)
	}
	return 1
}

// listenReusePort opens a plain listening TCP socket on addr. Off Linux
// there is one worker, so one socket per port.
func listenReusePort(addr string, tproxy bool) (net.Listener, error) {
	if tproxy {
		return nil, errors.New("a tproxy listener needs Linux (IP_TRANSPARENT)")
	}
	lc := net.ListenConfig{KeepAlive: -1}
	return lc.Listen(context.Background(), "tcp", addr)
}
