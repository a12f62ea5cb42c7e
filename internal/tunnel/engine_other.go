//go:build !linux

package tunnel

// The portable engine: where there is no splice or epoll, each tunnel is
// relayed by Relay on goroutines of its own, which the engine tracks so
// that Close can end them and wait for them.

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Engine relays tunnels, each with [Relay] on a goroutine of its own (two
// while bytes flow both ways) and a 32 KiB buffer per direction; the
// epoll and splice engine that keeps idle tunnels free of goroutines and
// buffers is Linux only. Its methods may be called from any goroutine.
type Engine struct {
	idle   time.Duration
	ctx    context.Context // cancelled, with cause ErrClosed, by Close
	cancel context.CancelCauseFunc
	open   atomic.Int64   // tunnels added and not yet finished
	wg     sync.WaitGroup // the tunnels' goroutines

	mu     sync.Mutex
	closed bool // guarded by mu
}

// New creates an Engine. Call [Engine.Close] to stop it.
func New(cfg Config) (*Engine, error) {
	if cfg.IdleTimeout < 0 {
		return nil, fmt.Errorf("tunnel: negative idle timeout %v", cfg.IdleTimeout)
	}
	if cfg.PipeSize < 0 {
		return nil, fmt.Errorf("tunnel: negative pipe size %d", cfg.PipeSize)
	}
	if cfg.MaxPipes < 0 {
		return nil, fmt.Errorf("tunnel: negative pipe bound %d", cfg.MaxPipes)
	}
	e := &Engine{idle: cfg.IdleTimeout}
	e.ctx, e.cancel = context.WithCancelCause(context.Background())
	return e, nil
}

// Add hands two connected TCP sockets to the engine, which takes ownership
// of both: the caller must not use them again (bytes the caller has
// already read and buffered are its own to forward before calling Add).
// The engine relays client to upstream and upstream to client until both
// directions have ended or one side fails.
//
// done, if not nil, is called exactly once with the tunnel's [Result] when
// it ends, from the tunnel's goroutine; it must not call [Engine.Close].
// If Add returns an error, both conns have been closed and done is never
// called.
func (e *Engine) Add(client, upstream *net.TCPConn, done func(Result)) error {
	_, err := e.AddCut(client, upstream, done)
	return err
}

// AddCut is Add, and also returns a function that ends the tunnel before
// its time: its done callback then gets [ErrCut]. Calling it after the
// tunnel has ended, or more than once, does nothing. It does not block.
func (e *Engine) AddCut(client, upstream *net.TCPConn, done func(Result)) (cut func(), err error) {
	return e.AddMetered(client, upstream, nil, done)
}

// AddMetered is AddCut with a meter (nil = none) told of the bytes each
// direction delivers as they are, after each write (at most the relay's
// buffer), which may stop the tunnel (its done callback then gets
// [ErrStopped]).
func (e *Engine) AddMetered(client, upstream *net.TCPConn, m Meter, done func(Result)) (cut func(), err error) {
	h, err := e.AddOwned(client, upstream, m, owner(done))
	if err != nil {
		return nil, err
	}
	return h.Cut, nil
}

// AddOwned is AddMetered for a caller that keeps an object of its own per
// tunnel: o (nil = none) is told of the tunnel's end, and the Handle's Cut
// is the cut function.
func (e *Engine) AddOwned(client, upstream *net.TCPConn, m Meter, o Owner) (Handle, error) {
	if client == nil || upstream == nil {
		if client != nil {
			client.Close()
		}
		if upstream != nil {
			upstream.Close()
		}
		return Handle{}, errors.New("tunnel: nil connection")
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		client.Close()
		upstream.Close()
		return Handle{}, ErrClosed
	}
	e.open.Add(1)
	e.wg.Add(1)
	e.mu.Unlock()
	ctx, cancel := context.WithCancelCause(e.ctx)
	go e.relay(ctx, cancel, client, upstream, m, o)
	return Handle{cancel}, nil
}

// Handle is a tunnel on the engine, as [Engine.AddOwned] and
// [Engine.AddTLSOwned] return it. The zero Handle is none.
type Handle struct {
	cancel context.CancelCauseFunc
}

// Cut ends the tunnel before its time: its owner then gets [ErrCut].
// Calling it after the tunnel has ended, or more than once, or on the
// zero Handle, does nothing. It does not block.
func (h Handle) Cut() {
	if h.cancel != nil {
		h.cancel(ErrCut)
	}
}

// AddTLS is AddCut for a TLS client: client, a tls.Conn whose handshake
// is complete, raw, the socket under it, and upstream. Off Linux
// [RawTCP] reports false, so callers have no raw socket to give; if they
// do, the tunnel is relayed as [RelayTLS] relays it here, by [Relay] on
// goroutines of its own. If AddTLS returns an error it has closed nothing
// and done is never called.
func (e *Engine) AddTLS(client *tls.Conn, raw *net.TCPConn, upstream *net.TCPConn, done func(Result)) (cut func(), err error) {
	h, err := e.AddTLSOwned(client, raw, upstream, owner(done))
	if err != nil {
		return nil, err
	}
	return h.Cut, nil
}

// AddTLSOwned is AddTLS for a caller that keeps an object of its own per
// tunnel, as [Engine.AddOwned] is AddMetered's.
func (e *Engine) AddTLSOwned(client *tls.Conn, raw *net.TCPConn, upstream *net.TCPConn, o Owner) (Handle, error) {
	if client == nil || raw == nil || upstream == nil {
		return Handle{}, errors.New("tunnel: AddTLS: nil connection")
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return Handle{}, ErrClosed
	}
	e.open.Add(1)
	e.wg.Add(1)
	e.mu.Unlock()
	ctx, cancel := context.WithCancelCause(e.ctx)
	go func() {
		e.relay(ctx, cancel, client, upstream, nil, o)
		raw.Close()
	}()
	return Handle{cancel}, nil
}

// relay is the goroutine of one tunnel.
func (e *Engine) relay(ctx context.Context, cancel context.CancelCauseFunc, client net.Conn, upstream *net.TCPConn, m Meter, o Owner) {
	defer e.wg.Done()
	res := RelayMetered(ctx, client, upstream, e.idle, m)
	cancel(nil)
	switch {
	case errors.Is(res.Err, ErrClosed):
		res.Err = ErrClosed
	case errors.Is(res.Err, ErrCut):
		res.Err = ErrCut
	}
	e.open.Add(-1)
	if o != nil {
		o.TunnelDone(res)
	}
}

// Len returns the number of tunnels open now: added and not yet finished.
func (e *Engine) Len() int {
	return int(e.open.Load())
}

// SetMaxPipes does nothing: this engine has no splice pipes.
func (e *Engine) SetMaxPipes(n int) {}

// MaxPipes returns 0: this engine has no splice pipes.
func (e *Engine) MaxPipes() int { return 0 }

// Pipes returns 0, 0: this engine has no splice pipes, and its tunnels
// relay through buffers of their own.
func (e *Engine) Pipes() (splice, inMemory int) { return 0, 0 }

// Close ends every open tunnel (their done callbacks get [ErrClosed]) and
// waits for their goroutines. It is idempotent and always returns nil.
func (e *Engine) Close() error {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.cancel(ErrClosed)
	e.wg.Wait()
	return nil
}
