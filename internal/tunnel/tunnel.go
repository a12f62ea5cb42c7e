package tunnel

// What every platform shares: the engine's configuration, a tunnel's
// result and the errors that end a tunnel.

import (
	"errors"
	"log/slog"
	"time"
)

// ErrClosed is the error of [Engine.Add] on a closed engine, and the
// [Result.Err] of tunnels still open when [Engine.Close] is called.
var ErrClosed = errors.New("tunnel: engine closed")

// ErrIdleTimeout is the [Result.Err] of a tunnel closed because no byte
// moved in either direction for [Config.IdleTimeout] (or, for [Relay],
// its idle argument).
var ErrIdleTimeout = errors.New("tunnel: idle timeout")

// ErrCut is the [Result.Err] of a tunnel ended by the cut function
// [Engine.AddCut] returned (a user's access revoked, say).
var ErrCut = errors.New("tunnel: cut short")

// ErrStopped is the [Result.Err] of a tunnel its [Meter] stopped (its
// user's quota spent, say).
var ErrStopped = errors.New("tunnel: stopped by its meter")

// Meter is told of a tunnel's bytes as they are delivered, and may end the
// tunnel: see [Engine.AddMetered] and [RelayMetered].
type Meter interface {
	// Moved is called after n bytes were delivered in direction d (0:
	// client to upstream, 1: upstream to client); false ends the tunnel
	// with ErrStopped. It is called from the relaying goroutine (the
	// engine's loop, for the engine): it must not block.
	Moved(d int, n int64) bool
}

// Owner is told how a tunnel ended, for a caller that keeps an object of
// its own for each tunnel ([Engine.AddOwned], [Engine.AddTLSOwned]): the
// engine then holds that object, not a callback made for the tunnel.
type Owner interface {
	// TunnelDone is called exactly once with the tunnel's Result when
	// it ends, as Add's done is: from the relaying goroutine, and it
	// must neither block nor call [Engine.Close].
	TunnelDone(Result)
}

// doneFunc is Add's done callback as an Owner.
type doneFunc func(Result)

// TunnelDone calls f.
func (f doneFunc) TunnelDone(r Result) { f(r) }

// owner returns done as an Owner; nil for nil.
func owner(done func(Result)) Owner {
	if done == nil {
		return nil
	}
	return doneFunc(done)
}

// Sides and directions share indexes: side 0 is the client and direction 0
// runs from the client to the upstream; side 1 is the upstream and
// direction 1 runs from the upstream to the client.
var sideName = [2]string{"client", "upstream"}

// Config configures an Engine.
type Config struct {
	// IdleTimeout closes a tunnel when no byte has moved in either
	// direction for this long; 0 means tunnels are never closed for being
	// idle. On Linux the check is coarse: a tunnel may outlive its
	// timeout by up to an eighth of it (at most one second).
	IdleTimeout time.Duration
	// PipeSize is the capacity asked for each splice pipe with
	// F_SETPIPE_SZ; 0 means 1 MiB. If the kernel refuses the size the
	// pipe keeps the kernel default (64 KiB) and no error is reported.
	// Only the Linux engine has pipes; elsewhere it is checked and
	// otherwise ignored.
	PipeSize int
	// MaxIdlePipes is how many empty pipes the engine keeps for reuse;
	// 0 means 16, a negative value means none. Ignored off Linux.
	MaxIdlePipes int
	// MaxPipes bounds the splice pipes the engine holds at once, idle
	// pooled ones included (each is two descriptors); a tunnel direction
	// that needs one past it copies through the engine's shared 16 KiB
	// buffer instead, as when the process is out of descriptors, keeping
	// in memory only what its destination did not take (at most 16 KiB),
	// so that the process's descriptors are not spent on pipes. 0 means no bound. See
	// [Engine.SetMaxPipes]. Ignored off Linux.
	MaxPipes int
	// Logger receives the engine's own failures (not tunnel results, which
	// go to the done callback); nil discards them.
	Logger *slog.Logger
}

// Result describes a finished tunnel.
type Result struct {
	// Up is the number of bytes delivered from the client to the upstream.
	Up int64
	// Down is the number of bytes delivered from the upstream to the client.
	Down int64
	// Duration is the time from Add (or the call to [Relay]) to the
	// tunnel's end.
	Duration time.Duration
	// Err is nil when both sides ended their stream cleanly (FIN both
	// ways); otherwise it says why the tunnel ended: a wrapped socket
	// error such as ECONNRESET or EPIPE, ErrIdleTimeout or ErrClosed
	// (for [Relay], its context's cause, wrapped, instead of ErrClosed).
	Err error
}
