// Package dialer connects rustle to upstreams: it dials with a timeout and
// the configured socket options, classifies failures so that callers can
// answer 502 or 504, and keeps idle keep-alive connections per origin in a
// Pool shared by all client connections.
package dialer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// Config configures a Dialer.
type Config struct {
	// Timeout bounds name resolution and connection set-up together.
	// 0 = 10s.
	Timeout time.Duration
	// SocketBufferBytes sets SO_SNDBUF and SO_RCVBUF on dialed sockets.
	// 0 = kernel autotuning.
	SocketBufferBytes int
}

// Dialer dials upstream TCP connections.
type Dialer struct {
	nd net.Dialer
}

// New returns a Dialer for cfg.
func New(cfg Config) *Dialer {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	d := &Dialer{nd: net.Dialer{
		Timeout:   cfg.Timeout,
		KeepAlive: -1, // rustle bounds idle connections with its own timeouts
	}}
	if n := cfg.SocketBufferBytes; n > 0 {
		d.nd.Control = func(_, _ string, rc syscall.RawConn) error {
			return SetBuffers(rc, n)
		}
	}
	return d
}

// Error is a failed dial. Timeout is set when the connect timeout (or the
// caller's deadline) expired, which a proxy answers with 504; other
// failures are answered with 502.
type Error struct {
	Addr    string
	Timeout bool
	Err     error
}

func (e *Error) Error() string {
	return fmt.Sprintf("dialer: dial upstream %s: %v", e.Addr, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Reason is a one-line, client-safe description of the failure, for the
// body of a 502 or 504 answer.
func (e *Error) Reason() string {
	var dnsErr *net.DNSError
	switch {
	case e.Timeout:
		return "connect to " + e.Addr + " timed out"
	case errors.As(e.Err, &dnsErr):
		if dnsErr.IsNotFound {
			return "cannot resolve " + dnsErr.Name + ": no such host"
		}
		return "cannot resolve " + dnsErr.Name
	case errors.Is(e.Err, syscall.ECONNREFUSED):
		return "connection to " + e.Addr + " refused"
	case errors.Is(e.Err, syscall.ENETUNREACH), errors.Is(e.Err, syscall.EHOSTUNREACH):
		return e.Addr + " is unreachable"
	}
	return "cannot connect to " + e.Addr
}

// Dial connects to addr ("host:port", IPv6 literals in brackets).
func (d *Dialer) Dial(ctx context.Context, addr string) (*net.TCPConn, error) {
	c, err := d.nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		var ne net.Error
		timeout := errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)
		return nil, &Error{Addr: addr, Timeout: timeout, Err: err}
	}
	return c.(*net.TCPConn), nil
}

// SetBuffers sets SO_SNDBUF and SO_RCVBUF to n bytes on a socket.
func SetBuffers(rc syscall.RawConn, n int) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		if e := syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_SNDBUF, n); e != nil {
			serr = e
			return
		}
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, n)
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("dialer: set socket buffers to %d: %w", n, serr)
	}
	return nil
}
