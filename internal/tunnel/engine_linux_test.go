package tunnel

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// exchange sends up bytes from the client and down bytes from the upstream
// at the same time, each followed by a half-close, and checks that each side
// receives exactly the other's bytes and then EOF, and that the tunnel ends
// cleanly with exact counts.
func exchange(t *testing.T, te *tunnelEnds, up, down int64) {
	t.Helper()
	type recv struct {
		n   int64
		sum [32]byte
		err error
	}
	var wg sync.WaitGroup
	var upSum, downSum [32]byte
	var upErr, downErr error
	var atUpstream, atClient recv
	wg.Go(func() {
		upSum, upErr = sendRandom(te.client, 1, up)
		if upErr == nil {
			upErr = te.client.CloseWrite()
		}
	})
	wg.Go(func() {
		downSum, downErr = sendRandom(te.upstream, 2, down)
		if downErr == nil {
			downErr = te.upstream.CloseWrite()
		}
	})
	wg.Go(func() { atUpstream.n, atUpstream.sum, atUpstream.err = recvHash(te.upstream) })
	wg.Go(func() { atClient.n, atClient.sum, atClient.err = recvHash(te.client) })
	wg.Wait()
	if upErr != nil || downErr != nil || atUpstream.err != nil || atClient.err != nil {
		t.Fatalf("send up: %v, send down: %v, receive up: %v, receive down: %v", upErr, downErr, atUpstream.err, atClient.err)
	}
	if atUpstream.n != up || atUpstream.sum != upSum {
		t.Errorf("upstream received %d bytes (hash match %v), want %d", atUpstream.n, atUpstream.sum == upSum, up)
	}
	if atClient.n != down || atClient.sum != downSum {
		t.Errorf("client received %d bytes (hash match %v), want %d", atClient.n, atClient.sum == downSum, down)
	}
	r := te.wait(t)
	if r.Err != nil || r.Up != up || r.Down != down {
		t.Errorf("result: up %d down %d err %v; want up %d down %d err nil", r.Up, r.Down, r.Err, up, down)
	}
}

func TestEcho(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		up, down int64
	}{
		{"empty", Config{}, 0, 0},
		{"one byte each way", Config{}, 1, 1},
		{"up only", Config{}, 100_000, 0},
		{"down only", Config{}, 0, 100_000},
		{"1MB both ways", Config{}, 1 << 20, 1<<20 + 7},
		{"small pipes, no pool", Config{PipeSize: 4096, MaxIdlePipes: -1}, 3<<20 + 1, 2<<20 + 3},
		{"one-page pipes", Config{PipeSize: 1}, 1 << 20, 1<<20 + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, tt.cfg)
			te := newTunnel(t, e, newListener(t))
			exchange(t, te, tt.up, tt.down)
			eventually(t, "Len 0", func() bool { return e.Len() == 0 })
		})
	}
}

func TestLargeTransfer(t *testing.T) {
	if testing.Short() {
		t.Skip("64 MB each way")
	}
	e := newEngine(t, Config{})
	exchange(t, newTunnel(t, e, newListener(t)), 64<<20, 64<<20)
}

func TestHalfClose(t *testing.T) {
	request := []byte("GET / HTTP/1.0\r\n\r\n")
	tests := []struct {
		name          string
		closeUpstream bool // the upstream half-closes first and the client answers
	}{
		{"client first", false},
		{"upstream first", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			te := newTunnel(t, e, newListener(t))
			first, second := te.client, te.upstream
			if tt.closeUpstream {
				first, second = second, first
			}
			if _, err := first.Write(request); err != nil {
				t.Fatal(err)
			}
			if err := first.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			// The second side sees the request, then EOF, while its own
			// direction is still open.
			got, err := io.ReadAll(second)
			if err != nil || !bytes.Equal(got, request) {
				t.Fatalf("second side read %q, %v; want %q, EOF", got, err, request)
			}
			const replySize = 300_000
			errc := make(chan error, 1)
			go func() {
				_, err := sendRandom(second, 7, replySize)
				if err == nil {
					err = second.Close()
				}
				errc <- err
			}()
			n, _, err := recvHash(first)
			if err != nil || n != replySize {
				t.Fatalf("first side read %d bytes, %v; want %d, EOF", n, err, replySize)
			}
			if err := <-errc; err != nil {
				t.Fatalf("second side send: %v", err)
			}
			r := te.wait(t)
			wantUp, wantDown := int64(len(request)), int64(replySize)
			if tt.closeUpstream {
				wantUp, wantDown = wantDown, wantUp
			}
			if r.Err != nil || r.Up != wantUp || r.Down != wantDown {
				t.Errorf("result: up %d down %d err %v; want up %d down %d err nil", r.Up, r.Down, r.Err, wantUp, wantDown)
			}
		})
	}
}

func TestReset(t *testing.T) {
	tests := []struct {
		name        string
		resetClient bool
		inFlight    bool // the peer is sending bytes the resetter never reads
		halfClose   bool // the peer has half-closed before the reset
	}{
		{"client resets", true, false, false},
		{"upstream resets", false, false, false},
		{"client resets with bytes in flight", true, true, false},
		{"upstream resets with bytes in flight", false, true, false},
		{"client resets after half-close", true, false, true},
		{"upstream resets after half-close", false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, Config{})
			ln := newListener(t)
			te := newTunnel(t, e, ln)
			resetter, peer := te.upstream, te.client
			if tt.resetClient {
				resetter, peer = peer, resetter
			}
			sendErr := make(chan error, 1)
			if tt.inFlight {
				// More than the socket buffers and the pipe hold, so
				// that the pipe is full when the reset comes.
				go func() {
					_, err := sendRandom(peer, 3, 16<<20)
					sendErr <- err
				}()
				time.Sleep(100 * time.Millisecond)
			} else {
				sendErr <- nil
			}
			if tt.halfClose {
				if err := peer.CloseWrite(); err != nil {
					t.Fatal(err)
				}
				if _, err := resetter.Read(make([]byte, 1)); err != io.EOF {
					t.Fatalf("read after half-close: %v, want EOF", err)
				}
			}
			if err := resetter.SetLinger(0); err != nil {
				t.Fatal(err)
			}
			resetter.Close()
			r := te.wait(t)
			if !errors.Is(r.Err, syscall.ECONNRESET) && !errors.Is(r.Err, syscall.EPIPE) {
				t.Errorf("result error %v, want ECONNRESET or EPIPE", r.Err)
			}
			// The reset reaches the surviving peer as a reset too, seen
			// by whichever of its reader and writer asks first.
			_, readErr := copyBuf(io.Discard, peer)
			writeErr := <-sendErr
			if !errors.Is(readErr, syscall.ECONNRESET) && !errors.Is(writeErr, syscall.ECONNRESET) && !errors.Is(writeErr, syscall.EPIPE) {
				t.Errorf("peer read error %v, write error %v; want a reset", readErr, writeErr)
			}
			// Pipes left with bytes are not reused: a new tunnel gets
			// exactly its own bytes.
			exchange(t, newTunnel(t, e, ln), 1<<20, 1<<20)
		})
	}
}

func TestBackpressure(t *testing.T) {
	e := newEngine(t, Config{PipeSize: 64 << 10})
	te := newTunnel(t, e, newListener(t))
	// The upstream does not read: the client's writes must block once the
	// socket buffers and the pipe are full, instead of piling up in the
	// proxy.
	const limit = 256 << 20
	buf := make([]byte, 256<<10)
	var written int64
	for written < limit {
		te.client.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := te.client.Write(buf)
		written += int64(n)
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("write: %v", err)
			}
			break
		}
	}
	if written >= limit {
		t.Fatalf("client wrote %d bytes with nobody reading upstream", written)
	}
	te.client.SetWriteDeadline(time.Time{})
	if err := te.client.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	// Reading resumes the flow; every byte arrives.
	n, err := copyBuf(io.Discard, te.upstream)
	if err != nil || n != written {
		t.Fatalf("upstream read %d bytes, %v; want %d, EOF", n, err, written)
	}
	te.upstream.CloseWrite()
	if r := te.wait(t); r.Err != nil || r.Up != written || r.Down != 0 {
		t.Errorf("result: up %d down %d err %v; want up %d down 0 err nil", r.Up, r.Down, r.Err, written)
	}
}

func TestIdleTimeout(t *testing.T) {
	// The engine runs on a fake clock that only the test advances, so
	// that a slow machine cannot make a busy tunnel look idle.
	const timeout = 10 * time.Second
	var now atomic.Int64
	e, err := newWithClock(Config{IdleTimeout: timeout}, func() time.Duration { return time.Duration(now.Load()) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	ln := newListener(t)
	idle := newTunnel(t, e, ln)
	busy := newTunnel(t, e, ln)
	one := []byte{'x'}
	ping := func() {
		t.Helper()
		if _, err := busy.client.Write(one); err != nil {
			t.Fatalf("busy write: %v", err)
		}
		if _, err := io.ReadFull(busy.upstream, one); err != nil {
			t.Fatalf("busy read: %v", err)
		}
	}
	// advance moves the clock and makes the loop look at it.
	advance := func(d time.Duration) {
		now.Add(int64(d))
		e.mu.Lock()
		e.wakeLocked()
		e.mu.Unlock()
	}
	ping() // both tunnels are registered at time 0

	advance(timeout * 6 / 10)
	ping() // the busy tunnel is active at 0.6 timeouts
	advance(timeout * 6 / 10)
	r := idle.wait(t) // the sweep at 1.2 timeouts ends the idle tunnel only
	if !errors.Is(r.Err, ErrIdleTimeout) || r.Duration != timeout*12/10 {
		t.Errorf("idle tunnel: err %v after %v; want ErrIdleTimeout after %v", r.Err, r.Duration, timeout*12/10)
	}
	if n, err := idle.client.Read(one); err != io.EOF {
		t.Errorf("idle client read %d, %v; want EOF", n, err)
	}
	select {
	case r := <-busy.result:
		t.Fatalf("busy tunnel ended with the idle one: %+v", r)
	default:
	}
	ping() // still relaying
	if n := e.Len(); n != 1 {
		t.Errorf("Len = %d, want 1", n)
	}
	// Activity is stamped when the loop finishes its turn, which may be
	// after the next advance; a second timeout is then needed.
	var quiet Result
	advance(timeout)
	select {
	case quiet = <-busy.result:
	case <-time.After(500 * time.Millisecond):
		advance(timeout)
		quiet = busy.wait(t)
	}
	if !errors.Is(quiet.Err, ErrIdleTimeout) || quiet.Up != 3 || quiet.Down != 0 {
		t.Errorf("busy tunnel after going quiet: %+v, want ErrIdleTimeout, up 3, down 0", quiet)
	}
	if n := e.Len(); n != 0 {
		t.Errorf("Len = %d after timeouts, want 0", n)
	}
}

func TestIdleTimeoutRealClock(t *testing.T) {
	const timeout = 200 * time.Millisecond
	e := newEngine(t, Config{IdleTimeout: timeout})
	te := newTunnel(t, e, newListener(t))
	r := te.wait(t)
	if !errors.Is(r.Err, ErrIdleTimeout) || r.Duration < timeout {
		t.Errorf("idle tunnel: err %v after %v; want ErrIdleTimeout after at least %v", r.Err, r.Duration, timeout)
	}
}

func TestClose(t *testing.T) {
	e, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ln := newListener(t)
	var tunnels []*tunnelEnds
	for i := range 10 {
		te := newTunnel(t, e, ln)
		switch i % 3 {
		case 1: // bytes delivered
			te.client.Write([]byte("hello"))
			buf := make([]byte, 5)
			if _, err := io.ReadFull(te.upstream, buf); err != nil {
				t.Fatal(err)
			}
		case 2: // half-closed
			te.client.CloseWrite()
			if _, err := te.upstream.Read(make([]byte, 1)); err != io.EOF {
				t.Fatalf("read after half-close: %v, want EOF", err)
			}
		}
		tunnels = append(tunnels, te)
	}
	if n := e.Len(); n != 10 {
		t.Errorf("Len = %d, want 10", n)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if n := e.Len(); n != 0 {
		t.Errorf("Len after Close = %d, want 0", n)
	}
	for i, te := range tunnels {
		select {
		case r := <-te.result:
			if !errors.Is(r.Err, ErrClosed) {
				t.Errorf("tunnel %d: err %v, want ErrClosed", i, r.Err)
			}
		default:
			t.Errorf("tunnel %d: done not called by the time Close returned", i)
		}
		te.client.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, te.client); err != nil {
			t.Errorf("tunnel %d: client read %v, want EOF", i, err)
		}
	}
	if err := e.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	// Add after Close fails, closes both conns and never calls done.
	clientApp, clientProxy := tcpPair(t, ln)
	upstreamProxy, upstreamApp := tcpPair(t, ln)
	t.Cleanup(func() { clientApp.Close(); upstreamApp.Close() })
	called := false
	if err := e.Add(clientProxy, upstreamProxy, func(Result) { called = true }); !errors.Is(err, ErrClosed) {
		t.Errorf("Add after Close: %v, want ErrClosed", err)
	}
	for _, c := range []*net.TCPConn{clientApp, upstreamApp} {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Errorf("peer of a refused conn read %v, want EOF", err)
		}
	}
	if called {
		t.Errorf("done called after a failed Add")
	}
}

func TestAddErrors(t *testing.T) {
	e := newEngine(t, Config{})
	ln := newListener(t)
	a, b := tcpPair(t, ln)
	t.Cleanup(func() { a.Close() })
	b.Close()
	// A closed conn cannot be taken; the other is closed anyway.
	if err := e.Add(a, b, func(Result) { t.Errorf("done called") }); err == nil {
		t.Fatalf("Add with a closed conn succeeded")
	}
	if _, err := a.Write([]byte("x")); err == nil {
		t.Errorf("conn still usable after a failed Add")
	}
	if err := e.Add(nil, nil, nil); err == nil {
		t.Errorf("Add(nil, nil) succeeded")
	}
	if n := e.Len(); n != 0 {
		t.Errorf("Len = %d, want 0", n)
	}
	if _, err := New(Config{IdleTimeout: -1}); err == nil {
		t.Errorf("New with a negative idle timeout succeeded")
	}
}

func TestManyTunnels(t *testing.T) {
	const n = 1000
	e := newEngine(t, Config{})
	ln := newListener(t)
	tunnels := make([]*tunnelEnds, n)
	for i := range tunnels {
		tunnels[i] = newTunnel(t, e, ln)
	}
	if got := e.Len(); got != n {
		t.Fatalf("Len = %d with %d tunnels open, want %d", got, n, n)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i, te := range tunnels {
		size := int64(1 + i*37%20_000)
		wg.Go(func() { // the origin echoes until EOF
			_, err := copyBuf(te.upstream, te.upstream)
			if err == nil {
				err = te.upstream.CloseWrite()
			}
			if err != nil {
				errs <- fmt.Errorf("tunnel %d echo: %w", i, err)
			}
		})
		wg.Go(func() {
			var sum [32]byte
			var err error
			done := make(chan struct{})
			go func() { // send while receiving, so that no buffer fills
				defer close(done)
				sum, err = sendRandom(te.client, uint64(i), size)
				if err == nil {
					err = te.client.CloseWrite()
				}
			}()
			got, gotSum, rerr := recvHash(te.client)
			<-done
			switch {
			case err != nil || rerr != nil:
				errs <- fmt.Errorf("tunnel %d: send %v, receive %v", i, err, rerr)
			case got != size || gotSum != sum:
				errs <- fmt.Errorf("tunnel %d: echoed %d bytes (hash match %v), want %d", i, got, gotSum == sum, size)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, te := range tunnels {
		size := int64(1 + i*37%20_000)
		if r := te.wait(t); r.Err != nil || r.Up != size || r.Down != size {
			t.Errorf("tunnel %d result: up %d down %d err %v; want %d each way, err nil", i, r.Up, r.Down, r.Err, size)
		}
	}
	if got := e.Len(); got != 0 {
		t.Errorf("Len = %d after all tunnels ended, want 0", got)
	}
}

func TestFDAccounting(t *testing.T) {
	const n = 100
	base := countFDs(t)
	e, err := New(Config{MaxIdlePipes: 4})
	if err != nil {
		t.Fatal(err)
	}
	ln := newListener(t)
	type pair struct{ clientApp, clientProxy, upstreamProxy, upstreamApp *net.TCPConn }
	pairs := make([]pair, n)
	for i := range pairs {
		p := &pairs[i]
		p.clientApp, p.clientProxy = tcpPair(t, ln)
		p.upstreamProxy, p.upstreamApp = tcpPair(t, ln)
	}
	before := countFDs(t)
	results := make(chan Result, n)
	for _, p := range pairs {
		if err := e.Add(p.clientProxy, p.upstreamProxy, func(r Result) { results <- r }); err != nil {
			t.Fatal(err)
		}
	}
	// Each idle tunnel holds exactly its two sockets: the engine's
	// duplicates replace the Go conns, and no pipe is open.
	if got := countFDs(t); got != before {
		t.Errorf("%d descriptors with %d idle tunnels, want %d (2 per tunnel, no pipes)", got, n, before)
	}
	// Traffic on all tunnels at once, then idle again: at most the pool's
	// pipes stay open.
	var wg sync.WaitGroup
	for i, p := range pairs {
		wg.Go(func() {
			if _, err := sendRandom(p.clientApp, uint64(i), 200_000); err != nil {
				t.Errorf("send: %v", err)
			}
		})
		wg.Go(func() {
			if _, err := io.ReadFull(p.upstreamApp, make([]byte, 200_000)); err != nil {
				t.Errorf("receive: %v", err)
			}
		})
	}
	wg.Wait()
	// The last pipe goes back just after its last bytes were delivered.
	eventually(t, fmt.Sprintf("at most %d descriptors after traffic (4 pooled pipes)", before+2*4), func() bool {
		return countFDs(t) <= before+2*4
	})
	// Half of the tunnels are reset with bytes stuck in their pipes; the
	// rest end cleanly.
	for i, p := range pairs {
		if i%2 == 0 {
			p.upstreamApp.SetReadBuffer(4096)
			sendRandom(p.clientApp, 9, 100_000)
			p.upstreamApp.SetLinger(0)
			p.upstreamApp.Close()
			p.clientApp.Close()
		}
	}
	for i, p := range pairs {
		if i%2 == 1 {
			p.clientApp.CloseWrite()
			p.upstreamApp.CloseWrite()
		}
	}
	for range n {
		select {
		case <-results:
		case <-time.After(20 * time.Second):
			t.Fatalf("tunnels did not end")
		}
	}
	e.Close()
	for _, p := range pairs {
		p.clientApp.Close()
		p.upstreamApp.Close()
	}
	ln.Close()
	eventually(t, fmt.Sprintf("descriptor count back to %d", base), func() bool { return countFDs(t) == base })
}

func BenchmarkTransfer1MB(b *testing.B) {
	e := newEngine(b, Config{})
	te := newTunnel(b, e, newListener(b))
	const size = 1 << 20
	buf := make([]byte, size)
	received := make(chan error, 1)
	go func() {
		rbuf := make([]byte, 256<<10)
		var total int64
		for total < int64(b.N)*size {
			n, err := te.upstream.Read(rbuf)
			total += int64(n)
			if err != nil {
				received <- err
				return
			}
		}
		received <- nil
	}()
	b.SetBytes(size)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := te.client.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-received; err != nil {
		b.Fatal(err)
	}
}

func BenchmarkTunnelSetup(b *testing.B) {
	e := newEngine(b, Config{})
	ln := newListener(b)
	b.ReportAllocs()
	for range b.N {
		b.StopTimer()
		clientApp, clientProxy := tcpPair(b, ln)
		upstreamProxy, upstreamApp := tcpPair(b, ln)
		ended := make(chan Result, 1)
		b.StartTimer()
		if err := e.Add(clientProxy, upstreamProxy, func(r Result) { ended <- r }); err != nil {
			b.Fatal(err)
		}
		clientApp.CloseWrite()
		upstreamApp.CloseWrite()
		if r := <-ended; r.Err != nil {
			b.Fatal(r.Err)
		}
		b.StopTimer()
		clientApp.Close()
		upstreamApp.Close()
		b.StartTimer()
	}
}

// TestIdleLoopParksInPoller checks that an idle engine's loop goroutine
// waits in Go's netpoller ("IO wait"), not in a blocking epoll_wait
// system call ("syscall"), both without an idle timeout and with one
// (a deadline on the wait), and that it still relays afterwards.
func TestIdleLoopParksInPoller(t *testing.T) {
	for _, idle := range []time.Duration{0, time.Hour} {
		t.Run(fmt.Sprint("idle timeout ", idle), func(t *testing.T) {
			e := newEngine(t, Config{IdleTimeout: idle})
			deadline := time.Now().Add(5 * time.Second)
			for {
				states := loopStates()
				if len(states) > 0 && allIOWait(states) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("engine loop goroutines are in %v, want IO wait", states)
				}
				time.Sleep(10 * time.Millisecond)
			}
			exchange(t, newTunnel(t, e, newListener(t)), 1<<10, 1<<10)
		})
	}
}

// loopStates returns the scheduler state of every goroutine running an
// engine loop, as runtime.Stack prints it ("IO wait", "syscall", ...).
func loopStates() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var states []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if !strings.Contains(g, "tunnel.(*Engine).loop") {
			continue
		}
		head, _, _ := strings.Cut(g, "\n")
		if i, j := strings.Index(head, "["), strings.Index(head, "]"); i >= 0 && j > i {
			state, _, _ := strings.Cut(head[i+1:j], ",")
			states = append(states, state)
		}
	}
	return states
}

func allIOWait(states []string) bool {
	for _, s := range states {
		if s != "IO wait" {
			return false
		}
	}
	return true
}

// TestSmallWritesSlowReader sends one small write at a time to a reader
// that stalls, so that the destination fills while the source keeps
// sending: every byte must arrive once and in order, and the write half
// close must follow them.
func TestSmallWritesSlowReader(t *testing.T) {
	e := newEngine(t, Config{})
	// Small buffers on the way to the reader, so that it fills soon.
	te := newTunnelWith(t, e, newListener(t), func(_, up *net.TCPConn) { up.SetWriteBuffer(16 << 10) })
	te.upstream.SetReadBuffer(64 << 10)
	const msgs, size = 300, 3000
	want := sha256.New()
	errc := make(chan error, 1)
	go func() {
		msg := make([]byte, size)
		for i := range msgs {
			for j := range msg {
				msg[j] = byte(i*7 + j)
			}
			want.Write(msg)
			if _, err := te.client.Write(msg); err != nil {
				errc <- err
				return
			}
			time.Sleep(200 * time.Microsecond) // the engine sees one message per read
		}
		errc <- te.client.CloseWrite()
	}()
	time.Sleep(200 * time.Millisecond) // the destination fills meanwhile
	n, got, err := recvHash(te.upstream)
	if err != nil || n != msgs*size {
		t.Fatalf("upstream read %d bytes, %v; want %d, EOF", n, err, msgs*size)
	}
	if err := <-errc; err != nil {
		t.Fatalf("client send: %v", err)
	}
	if got != [32]byte(want.Sum(nil)) {
		t.Fatal("upstream received other bytes than the client sent")
	}
	te.upstream.CloseWrite()
	if r := te.wait(t); r.Err != nil || r.Up != msgs*size || r.Down != 0 {
		t.Fatalf("result %+v, want %d bytes up, 0 down, no error", r, msgs*size)
	}
}

// TestLoopParksAfterSweeps checks that an engine whose last tunnel was
// closed by the idle sweep (its wait deadline had just passed) parks
// again instead of spinning on a deadline that has already passed.
func TestLoopParksAfterSweeps(t *testing.T) {
	e := newEngine(t, Config{IdleTimeout: 40 * time.Millisecond}) // sweeps every 5 ms
	te := newTunnel(t, e, newListener(t))
	echo := func() error {
		if _, err := te.client.Write([]byte("x")); err != nil {
			return err
		}
		var b [1]byte
		_, err := io.ReadFull(te.upstream, b[:])
		return err
	}
	// Keep it alive across several sweep deadlines. A pause of the test
	// over 40 ms on a loaded machine lets the sweep end it sooner, which
	// is what comes next anyway.
	for i := range 4 {
		if err := echo(); err != nil {
			t.Logf("echo %d: %v: swept early", i, err)
			break
		}
		time.Sleep(15 * time.Millisecond)
	}
	if r := te.wait(t); !errors.Is(r.Err, ErrIdleTimeout) {
		t.Fatalf("result %+v, want the idle timeout", r)
	}
	eventually(t, "Len 0", func() bool { return e.Len() == 0 })
	// Parked, and still parked a little later: not spinning.
	for i := range 5 {
		deadline := time.Now().Add(5 * time.Second)
		for states := loopStates(); !allIOWait(states); states = loopStates() {
			if time.Now().After(deadline) {
				t.Fatalf("sample %d: engine loop goroutines are in %v, want IO wait", i, states)
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	time.Sleep(200 * time.Millisecond)
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	used := time.Duration(ru1.Utime.Nano()+ru1.Stime.Nano()-ru0.Utime.Nano()-ru0.Stime.Nano()) * time.Nanosecond
	if used > 100*time.Millisecond {
		t.Fatalf("the process used %v of CPU in 200 ms with an idle engine, want it idle", used)
	}
}

// TestShortReadThenFIN checks the end of a stream whose last bytes and FIN
// reach the proxy together, in one epoll event: the engine skips the read
// after a short one (the socket is empty then), but not when the event
// said the peer was done, or the FIN would never be seen. Each case sends
// a few bytes and closes, on a tunnel that is idle in the engine and on
// one whose bytes and FIN were queued before it was added.
func TestShortReadThenFIN(t *testing.T) {
	for _, queued := range []bool{false, true} {
		t.Run(map[bool]string{false: "idle tunnel", true: "queued before Add"}[queued], func(t *testing.T) {
			e := newEngine(t, Config{})
			ln := newListener(t)
			for i := range 20 {
				msg := []byte("last words " + strconv.Itoa(i))
				clientApp, clientProxy := tcpPair(t, ln)
				upstreamProxy, upstreamApp := tcpPair(t, ln)
				deadline := time.Now().Add(20 * time.Second)
				clientApp.SetDeadline(deadline)
				upstreamApp.SetDeadline(deadline)
				t.Cleanup(func() { clientApp.Close(); upstreamApp.Close() })
				send := func() {
					t.Helper()
					if _, err := clientApp.Write(msg); err != nil {
						t.Fatal(err)
					}
					if err := clientApp.CloseWrite(); err != nil {
						t.Fatal(err)
					}
				}
				if queued {
					send()
				}
				done := make(chan Result, 1)
				if err := e.Add(clientProxy, upstreamProxy, func(r Result) { done <- r }); err != nil {
					t.Fatal(err)
				}
				if !queued {
					// One exchange first, so that the tunnel is
					// registered and idle when the last bytes come.
					if _, err := upstreamApp.Write([]byte("hi")); err != nil {
						t.Fatal(err)
					}
					if _, err := io.ReadFull(clientApp, make([]byte, 2)); err != nil {
						t.Fatal(err)
					}
					send()
				}
				got, err := io.ReadAll(upstreamApp)
				if err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("tunnel %d: upstream read %q, %v; want %q then EOF", i, got, err, msg)
				}
				upstreamApp.Close()
				select {
				case <-done:
				case <-time.After(20 * time.Second):
					t.Fatalf("tunnel %d did not end", i)
				}
			}
		})
	}
}
