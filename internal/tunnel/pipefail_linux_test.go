package tunnel

import (
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// TestPipeBudget stalls more tunnels than the engine may hold pipes: the
// engine keeps at most MaxPipes splice pipes (and their descriptors), the
// other directions relay through memory, and every byte arrives.
func TestPipeBudget(t *testing.T) {
	for _, maxPipes := range []int{1, 2} {
		t.Run(fmt.Sprintf("MaxPipes %d", maxPipes), func(t *testing.T) {
			const n = 8
			const up, down = 4 << 20, 1<<20 + 7
			e := newEngine(t, Config{MaxPipes: maxPipes, PipeSize: 64 << 10})
			var made atomic.Int64
			e.pipe2 = func(p []int, flags int) error {
				err := unix.Pipe2(p, flags)
				if err == nil {
					made.Add(1)
				}
				return err
			}
			ln := newListener(t)
			tunnels := make([]*tunnelEnds, n)
			for i := range tunnels {
				// Small buffers towards the origin, so that the
				// client's bytes stall in the proxy rather than in
				// socket buffers grown by autotuning (which can take
				// all 4 MiB of a tunnel that the engine copied).
				tunnels[i] = newTunnelWith(t, e, ln, func(_, up *net.TCPConn) { up.SetWriteBuffer(64 << 10) })
				tunnels[i].upstream.SetReadBuffer(64 << 10)
			}
			before := countFDs(t)
			// The origins do not read: each client's bytes stall in the
			// proxy, every tunnel's upload direction holding a pipe.
			upSums := make([][32]byte, n)
			var senders sync.WaitGroup
			for i, te := range tunnels {
				senders.Go(func() {
					sum, err := sendRandom(te.client, uint64(i), up)
					if err == nil {
						err = te.client.CloseWrite()
					}
					if err != nil {
						t.Errorf("tunnel %d: send: %v", i, err)
					}
					upSums[i] = sum
				})
			}
			eventually(t, fmt.Sprintf("%d stalled directions", n), func() bool {
				splice, mem := e.Pipes()
				return splice+mem == n
			})
			if splice, mem := e.Pipes(); splice > maxPipes {
				t.Errorf("%d splice pipes and %d in memory with %d tunnels stalled, want at most %d splice pipes", splice, mem, n, maxPipes)
			}
			if got := countFDs(t); got > before+2*maxPipes {
				t.Errorf("%d descriptors with %d tunnels stalled, want at most %d (%d pipes)", got, n, before+2*maxPipes, maxPipes)
			}
			// The origins read, then answer; both ways byte-exact.
			var wg sync.WaitGroup
			for i, te := range tunnels {
				wg.Go(func() {
					got, sum, err := recvHash(te.upstream)
					if err != nil || got != up {
						t.Errorf("tunnel %d: upstream received %d bytes, %v; want %d", i, got, err, up)
						return
					}
					senders.Wait()
					if sum != upSums[i] {
						t.Errorf("tunnel %d: upstream received other bytes than sent", i)
					}
					downSum, err := sendRandom(te.upstream, uint64(100+i), down)
					if err == nil {
						err = te.upstream.CloseWrite()
					}
					if err != nil {
						t.Errorf("tunnel %d: send down: %v", i, err)
						return
					}
					got, sum, err = recvHash(te.client)
					if err != nil || got != down || sum != downSum {
						t.Errorf("tunnel %d: client received %d bytes (hash match %v), %v; want %d", i, got, sum == downSum, err, down)
					}
				})
			}
			wg.Wait()
			for i, te := range tunnels {
				if r := te.wait(t); r.Err != nil || r.Up != up || r.Down != down {
					t.Errorf("tunnel %d result: up %d down %d err %v; want %d, %d, nil", i, r.Up, r.Down, r.Err, up, down)
				}
			}
			// The pool never overflows, so every pipe made is still open:
			// the engine never held more than it made.
			if got := made.Load(); got > int64(maxPipes) {
				t.Errorf("%d splice pipes made, want at most %d", got, maxPipes)
			}
			if splice, mem := e.Pipes(); splice > maxPipes || mem != 0 {
				t.Errorf("after the tunnels: %d splice pipes, %d in memory; want at most %d, 0", splice, mem, maxPipes)
			}
		})
	}
}

// TestNoPipeStallHoldsLittle stalls tunnels while no splice pipe can be
// made (pipe2 fails with EMFILE): each stalled direction relays through
// the engine's shared small buffer, so what it keeps in memory is at most
// what the destination did not take of one small read (16 KiB), the rest
// waiting in the source's socket.
func TestNoPipeStallHoldsLittle(t *testing.T) {
	const n = 100
	e := newEngine(t, Config{MaxIdlePipes: -1})
	e.pipe2 = func([]int, int) error { return unix.EMFILE }
	ln := newListener(t)
	tunnels := make([]*tunnelEnds, n)
	for i := range tunnels {
		tunnels[i] = newTunnelWith(t, e, ln, func(_, up *net.TCPConn) { up.SetWriteBuffer(16 << 10) })
		tunnels[i].upstream.SetReadBuffer(16 << 10)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	// The origins do not read: each upload stalls in the proxy.
	payload := make([]byte, 1<<20)
	var senders sync.WaitGroup
	for _, te := range tunnels {
		senders.Go(func() {
			te.client.SetWriteDeadline(time.Now().Add(30 * time.Second))
			te.client.Write(payload) // ends with the deadline or the tunnel
		})
	}
	eventually(t, fmt.Sprintf("%d stalled directions", n), func() bool {
		_, mem := e.Pipes()
		return mem == n
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	perTunnel := (int64(after.HeapInuse) - int64(before.HeapInuse)) / n
	t.Logf("%d B of heap per stalled direction", perTunnel)
	// 16 KiB and the heap's noise; a 64 KiB buffer each is well over.
	if perTunnel > 40<<10 {
		t.Errorf("%d B of heap per stalled direction without a splice pipe, want about %d (the small buffer's share), at most 40 KiB", perTunnel, smallSize)
	}
	for _, te := range tunnels {
		te.client.Close()
		te.upstream.Close()
	}
	senders.Wait()
}
