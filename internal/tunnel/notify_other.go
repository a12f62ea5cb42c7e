//go:build !linux

package tunnel

import (
	"io"
	"time"
)

// Notice is one wait of [Parker.Notify]; off Linux there are none.
type Notice struct{}

// Notify reports false off Linux, calling nothing: the caller waits with
// [Parker.Wait] instead. On Linux it calls fn once the socket is readable
// without a goroutine waiting meanwhile.
func (p *Parker) Notify(deadline time.Time, fn func(error)) (*Notice, bool) {
	return nil, false
}

// NotifyLook reports false off Linux, calling nothing, as Notify does.
func (p *Parker) NotifyLook(deadline time.Time, look func() bool, fn func(error)) (*Notice, bool) {
	return nil, false
}

// ReadNow is r.Read off Linux, where no TLS connection has a Parker.
func (p *Parker) ReadNow(r io.Reader, b []byte) (int, error) { return r.Read(b) }

// Ready reports false off Linux, where callers wait with [Parker.Wait],
// which returns at once when the socket is readable.
func (p *Parker) Ready() (ready bool, err error) { return false, nil }

// Wake does nothing off Linux (no Notice waits).
func (n *Notice) Wake() {}
