package tunnel

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// countPipes makes e count the splice pipes it creates; with no idle pool
// (MaxIdlePipes -1) every pipe borrowed is a pipe created.
func countPipes(e *Engine) *atomic.Int64 {
	var made atomic.Int64
	e.pipe2 = func(p []int, flags int) error {
		err := unix.Pipe2(p, flags)
		if err == nil {
			made.Add(1)
		}
		return err
	}
	return &made
}

// pingPong sends n messages of size bytes from the client, echoes each
// from the upstream and checks every byte that comes back.
func pingPong(t *testing.T, te *tunnelEnds, n, size int) {
	t.Helper()
	msg := make([]byte, size)
	got := make([]byte, size)
	for i := range n {
		for j := range msg {
			msg[j] = byte(i + j)
		}
		if _, err := te.client.Write(msg); err != nil {
			t.Fatalf("message %d: client write: %v", i, err)
		}
		if _, err := io.ReadFull(te.upstream, got); err != nil {
			t.Fatalf("message %d: upstream read: %v", i, err)
		}
		if _, err := te.upstream.Write(got); err != nil {
			t.Fatalf("message %d: upstream write: %v", i, err)
		}
		if _, err := io.ReadFull(te.client, got); err != nil {
			t.Fatalf("message %d: client read: %v", i, err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("message %d came back changed", i)
		}
	}
}

// TestSmallMessagesNoPipe checks that small messages, each read whole and
// taken whole by its destination, are relayed through the engine's small
// buffer: no pipe is borrowed (splice would need one per direction per
// message), and the tunnel ends with exact counts.
func TestSmallMessagesNoPipe(t *testing.T) {
	for _, size := range []int{1, 64, 4000, smallSize - 1} {
		t.Run(strconv.Itoa(size)+"B", func(t *testing.T) {
			e := newEngine(t, Config{MaxIdlePipes: -1})
			made := countPipes(e)
			te := newTunnel(t, e, newListener(t))
			const n = 50
			pingPong(t, te, n, size)
			if got := made.Load(); got != 0 {
				t.Errorf("%d pipes made for %d messages of %d bytes, want 0", got, n, size)
			}
			te.client.CloseWrite()
			te.upstream.CloseWrite()
			if r := te.wait(t); r.Err != nil || r.Up != n*int64(size) || r.Down != n*int64(size) {
				t.Errorf("result %+v, want %d bytes each way, no error", r, n*size)
			}
		})
	}
}

// TestBulkSwitchesToSplice checks that a direction whose reads fill the
// small buffer switches to splice (pipes are made) and back: small
// messages after the bulk transfer borrow no pipe again, and an idle
// tunnel holds none.
func TestBulkSwitchesToSplice(t *testing.T) {
	e := newEngine(t, Config{MaxIdlePipes: -1})
	made := countPipes(e)
	te := newTunnel(t, e, newListener(t))
	pingPong(t, te, 10, 64)
	if got := made.Load(); got != 0 {
		t.Fatalf("%d pipes made before the bulk transfer, want 0", got)
	}
	// 8 MiB up, the upstream reading all of it: bulk.
	const bulk = 8 << 20
	errc := make(chan error, 1)
	var sent [32]byte
	go func() {
		var err error
		sent, err = sendRandom(te.client, 9, bulk)
		errc <- err
	}()
	h := sha256.New()
	if _, err := io.CopyN(h, te.upstream, bulk); err != nil {
		t.Fatalf("upstream read of the bulk transfer: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("client send: %v", err)
	}
	if [32]byte(h.Sum(nil)) != sent {
		t.Fatal("upstream received other bytes than the client sent")
	}
	if made.Load() == 0 {
		t.Fatal("no pipe made for an 8 MiB transfer: not spliced")
	}
	eventually(t, "no pipe held by the idle tunnel", func() bool {
		splice, mem := e.Pipes()
		return splice == 0 && mem == 0
	})
	before := made.Load()
	pingPong(t, te, 10, 64)
	if got := made.Load() - before; got != 0 {
		t.Errorf("%d pipes made for small messages after the bulk transfer, want 0", got)
	}
	te.client.CloseWrite()
	te.upstream.CloseWrite()
	if r := te.wait(t); r.Err != nil || r.Up != bulk+20*64 || r.Down != 20*64 {
		t.Errorf("result %+v, want %d bytes up, %d down, no error", r, bulk+20*64, 20*64)
	}
}

// TestSmallCopyStalledDestination checks the small path's partial
// writes: with the destination's buffers full, what a small read got
// and the destination did not take waits in a pipe (or, when the process
// has no descriptor for one, in memory), and every byte arrives in order.
func TestSmallCopyStalledDestination(t *testing.T) {
	for _, refuse := range []bool{false, true} {
		t.Run(map[bool]string{false: "pipe", true: "no descriptors"}[refuse], func(t *testing.T) {
			e := newEngine(t, Config{MaxIdlePipes: -1})
			var asked atomic.Int64
			e.pipe2 = func(p []int, flags int) error {
				asked.Add(1)
				if refuse {
					return unix.EMFILE
				}
				return unix.Pipe2(p, flags)
			}
			// Small buffers on the way to the upstream, so that they
			// fill soon.
			te := newTunnelWith(t, e, newListener(t), func(_, up *net.TCPConn) { up.SetWriteBuffer(16 << 10) })
			te.upstream.SetReadBuffer(64 << 10)
			// The upstream does not read until the client has sent
			// everything: 4 MiB in 1000-byte writes, so that the
			// engine's reads are small and its writes stop short.
			const total, chunk = 4 << 20, 1000
			want := sha256.New()
			errc := make(chan error, 1)
			go func() {
				msg := make([]byte, chunk)
				for i := 0; i < total; i += chunk {
					for j := range msg {
						msg[j] = byte(i/chunk + j)
					}
					m := msg[:min(chunk, total-i)]
					want.Write(m)
					if _, err := te.client.Write(m); err != nil {
						errc <- err
						return
					}
				}
				errc <- te.client.CloseWrite()
			}()
			eventually(t, "a stalled direction", func() bool {
				splice, mem := e.Pipes()
				return splice+mem > 0
			})
			n, got, err := recvHash(te.upstream)
			if err != nil || n != total {
				t.Fatalf("upstream read %d bytes, %v; want %d, EOF", n, err, total)
			}
			if err := <-errc; err != nil {
				t.Fatalf("client send: %v", err)
			}
			if got != [32]byte(want.Sum(nil)) {
				t.Fatal("upstream received other bytes than the client sent")
			}
			te.upstream.CloseWrite()
			if r := te.wait(t); r.Err != nil || r.Up != total || r.Down != 0 {
				t.Fatalf("result %+v, want %d bytes up, 0 down, no error", r, total)
			}
			if asked.Load() == 0 {
				t.Error("no pipe asked for: the destination never stalled")
			}
			if splice, mem := e.Pipes(); splice != 0 || mem != 0 {
				t.Errorf("after the tunnel: %d splice pipes, %d in memory; want none", splice, mem)
			}
		})
	}
}

// TestSplicesKeepTheProcessor checks that the loop splices bulk
// transfers with system calls that Go's scheduler does not see: sampled
// all through 256 MiB spliced each way at once, the loop goroutine is
// never "in a system call", a state in which the runtime's monitor takes
// its processor away and hands it to another thread (with one processor,
// a thread hand-off and wake-up on most splices).
func TestSplicesKeepTheProcessor(t *testing.T) {
	e := newEngine(t, Config{})
	te := newTunnel(t, e, newListener(t))
	const bulk = 256 << 20
	sendErrs := make(chan error, 2)
	recvErrs := make(chan error, 2)
	started := make(chan struct{}, 2)
	for i, ends := range [][2]*net.TCPConn{{te.client, te.upstream}, {te.upstream, te.client}} {
		go func() {
			_, err := sendRandom(ends[0], uint64(i), bulk)
			sendErrs <- err
		}()
		go func() {
			// Splicing from the first MiB on: sample from then on.
			_, err := io.CopyN(io.Discard, ends[1], 1<<20)
			started <- struct{}{}
			if err == nil {
				_, err = io.CopyN(io.Discard, ends[1], bulk-1<<20)
			}
			recvErrs <- err
		}()
	}
	<-started
	<-started
	samples, inSyscall, received := 0, 0, 0
	var states []string
	for received < 2 {
		select {
		case err := <-recvErrs:
			if err != nil {
				t.Fatalf("receive: %v", err)
			}
			received++
			continue
		default:
		}
		for _, s := range loopStates() {
			samples++
			if s == "syscall" {
				inSyscall++
			}
			if len(states) < 10 {
				states = append(states, s)
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	for range 2 {
		if err := <-sendErrs; err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	if samples < 10 {
		t.Fatalf("only %d samples of the loop during the transfer (%v): too few to tell", samples, states)
	}
	if inSyscall > 0 {
		t.Fatalf("the loop was in a system call the scheduler sees in %d of %d samples while splicing (first states %v), want none", inSyscall, samples, states)
	}
}

// TestPollsPerMessage checks what waiting costs a tunnel that relays one
// small message at a time, the engine parked between them (a WebSocket
// or SSH session at a modest rate): each message is taken with the poll
// that ends the park, and the loop parks again after one more poll,
// which finds nothing. A poll before the park as well (the busy loop's
// shortcut) is a third epoll_pwait per message. A TLS tunnel (CONNECT or
// a WebSocket on the HTTPS port, Engine.AddTLS) must cost the same: its
// messages are relayed by the same loop, parked the same way, and leave
// no goroutine behind.
func TestPollsPerMessage(t *testing.T) {
	for _, tt := range []struct {
		name string
		// ends makes a tunnel on an engine and returns the engine and
		// the tunnel's two application ends.
		ends func(t *testing.T) (e *Engine, client, upstream io.ReadWriter)
	}{
		{"plain", func(t *testing.T) (*Engine, io.ReadWriter, io.ReadWriter) {
			e := newEngine(t, Config{})
			te := newTunnel(t, e, newListener(t))
			pingPong(t, te, 10, 64)
			return e, te.client, te.upstream
		}},
		{"TLS", func(t *testing.T) (*Engine, io.ReadWriter, io.ReadWriter) {
			te := newTLSTunnel(t, tlsImpl{"AddTLS", true}, context.Background(), tls.VersionTLS13, 0)
			return te.eng, te.client, te.origin
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e, client, upstream := tt.ends(t)
			parked := func() {
				t.Helper()
				deadline := time.Now().Add(5 * time.Second)
				for states := loopStates(); !allIOWait(states); states = loopStates() {
					if time.Now().After(deadline) {
						t.Fatalf("engine loop goroutines are in %v, want IO wait", states)
					}
					runtime.Gosched()
				}
			}
			const msgs = 100
			msg := make([]byte, 64)
			got := make([]byte, 64)
			var polls int64
			// One pass through the engine: src writes, the engine
			// relays, dst reads; counted from a parked loop to the
			// message's arrival.
			pass := func(src, dst io.ReadWriter) {
				t.Helper()
				parked()
				before := e.polls.Load()
				if _, err := src.Write(msg); err != nil {
					t.Fatal(err)
				}
				if _, err := io.ReadFull(dst, got); err != nil {
					t.Fatal(err)
				}
				parked()
				polls += e.polls.Load() - before
			}
			for range 10 { // the TLS tunnel's first records (session tickets) pass
				pass(client, upstream)
				pass(upstream, client)
			}
			polls = 0
			goroutines := runtime.NumGoroutine()
			for range msgs {
				pass(client, upstream)
				pass(upstream, client)
			}
			perPass := float64(polls) / (2 * msgs)
			t.Logf("%d polls for %d passes: %.2f per pass", polls, 2*msgs, perPass)
			// At least the poll that ends the park: a message that
			// reached dst without one went around the engine's loop.
			if perPass > 2.5 || perPass < 1 {
				t.Errorf("%.2f event polls per message relayed, want 1 to 2.5", perPass)
			}
			if n := runtime.NumGoroutine(); n > goroutines {
				t.Errorf("%d goroutines after %d messages, %d before: a relayed message must not leave one behind", n, 2*msgs, goroutines)
			}
		})
	}
}
