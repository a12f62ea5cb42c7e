package tunnel

import (
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPipeRefused makes the engine's pipes fail as they do when the
// process is out of descriptors: the tunnel relays through memory and
// carries every byte, instead of being reset.
func TestPipeRefused(t *testing.T) {
	tests := []struct {
		name  string
		err   unix.Errno
		every int // refuse every nth pipe; 1 = all
	}{
		{"EMFILE, every pipe", unix.EMFILE, 1},
		{"ENFILE, every pipe", unix.ENFILE, 1},
		{"EMFILE, every other pipe", unix.EMFILE, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, Config{MaxIdlePipes: -1})
			var calls atomic.Int64
			e.pipe2 = func(p []int, flags int) error {
				if calls.Add(1)%int64(tt.every) == 0 {
					return tt.err
				}
				return unix.Pipe2(p, flags)
			}
			te := newTunnel(t, e, newListener(t))
			exchange(t, te, 3<<20+1, 2<<20+3)
			if calls.Load() == 0 {
				t.Fatal("no pipe was asked for")
			}
			eventually(t, "Len 0", func() bool { return e.Len() == 0 })
		})
	}
}
